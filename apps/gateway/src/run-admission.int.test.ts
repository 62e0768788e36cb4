import { describe, expect, it, vi } from "vitest";
import { perTestGateway } from "./testing/per-test-gateway";
import { type TestGateway, testStoreKind, WORKER_TOKEN as WORKER } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";

// Before session 21 a client could queue runs without bound while no worker took them: each held
// its whole input in memory (and every ended run kept it for the retention window), until the
// gateway died of heap exhaustion. Runs not ended are now bounded per session and in input bytes,
// and an ended chat run keeps only the head of its input (the transcript has all of it).

const CHAT = (n: number) => `agent:main:webchat:dm:user-${n}`;

const edge = perTestGateway();
let gw: TestGateway;
let op: TestPeer;

async function start(limits: Record<string, number>) {
  gw = await edge.start(
    {
      gateway: { limits },
      auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
      agents: { list: [{ id: "main", default: true }] },
    },
    { store: testStoreKind() },
  );
  op = await gw.operator();
}

async function send(sessionKey: string, message: string) {
  return op.request("chat.send", { sessionKey, message });
}

describe("runs waiting for a worker", () => {
  // Until session 23 a spawn whose run was refused under load kept its child session: one per call,
  // never archived (the archiver finds children through their runs).
  it("a spawn refused at the run limit leaves no child session behind", async () => {
    await start({ maxRuns: 2 });
    await op.call("sessions.create", { key: "agent:main:main" });
    for (const n of [1, 2]) expect((await send(CHAT(n), "hi")).ok).toBe(true);
    for (let i = 0; i < 5; i++) {
      const answer = await op.call<{ status: string; error?: string }>("tools.invoke", {
        tool: "sessions_spawn",
        args: { task: `task ${i}` },
        as: "agent:main:main",
      });
      expect(answer).toMatchObject({
        status: "error",
        error: expect.stringContaining("gateway.limits.maxRuns"),
      });
    }
    const { sessions } = await op.call<{ sessions: Array<{ key: string }> }>("sessions.list", { limit: 100 });
    expect(sessions.map((row) => row.key).filter((key) => key.includes(":subagent:"))).toEqual([]);
  });

  it("are bounded per session: past the limit a send is refused RATE_LIMITED, retryable, and nothing is written", async () => {
    await start({ maxRunsPerSession: 3 });
    await op.call("sessions.create", { key: CHAT(1) });
    await op.call("sessions.create", { key: CHAT(2) });
    for (let i = 0; i < 3; i++) expect((await send(CHAT(1), `hello ${i}`)).ok).toBe(true);
    const refused = await send(CHAT(1), "one too many");
    expect(refused.ok).toBe(false);
    expect(refused.error).toMatchObject({ code: "RATE_LIMITED", retryable: true });
    expect(refused.error?.message).toContain("gateway.limits.maxRunsPerSession");
    // Refused before anything was written: the transcript holds the three accepted inputs only.
    const history = await op.call<{ messages: { content: { text?: string }[] }[] }>("sessions.history", {
      sessionKey: CHAT(1),
    });
    expect(history.messages.map((message) => message.content[0]?.text)).toEqual([
      "hello 0",
      "hello 1",
      "hello 2",
    ]);
    // Another session is not held back by this one.
    expect((await send(CHAT(2), "other")).ok).toBe(true);

    // A worker drains the queue: the session takes sends again.
    await edge.startWorker(async ({ run }) => `done: ${run.input.message}`, ["main"]);
    const deadline = Date.now() + 10_000;
    let accepted = await send(CHAT(1), "after the drain");
    while (!accepted.ok && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      accepted = await send(CHAT(1), "after the drain");
    }
    expect(accepted.ok).toBe(true);
  });

  it("are bounded in number across sessions: a send spraying new sessions is refused past maxRuns", async () => {
    await start({ maxRuns: 4 });
    for (let n = 1; n <= 4; n++) expect((await send(CHAT(n), "hi")).ok).toBe(true);
    const refused = await send(CHAT(5), "hi");
    expect(refused.error).toMatchObject({ code: "RATE_LIMITED", retryable: true });
    expect(refused.error?.message).toContain("gateway.limits.maxRuns ");
  });

  it("are bounded in input bytes across sessions, and a retried idempotent send is still answered", async () => {
    await start({ maxRunInputBytes: 1_048_576 });
    const big = "x".repeat(400_000);
    for (const n of [1, 2, 3]) await op.call("sessions.create", { key: CHAT(n) });
    const first = await op.request("chat.send", { sessionKey: CHAT(1), message: big, idempotencyKey: "k-1" });
    expect(first.ok).toBe(true);
    expect((await send(CHAT(2), big)).ok).toBe(true);
    const refused = await send(CHAT(3), big);
    expect(refused.error).toMatchObject({ code: "RATE_LIMITED", retryable: true });
    expect(refused.error?.message).toContain("gateway.limits.maxRunInputBytes");
    // A small input still fits under the budget.
    expect((await send(CHAT(3), "small")).ok).toBe(true);
    // The same send again finds its run rather than being counted a second time.
    const again = await op.request("chat.send", { sessionKey: CHAT(1), message: big, idempotencyKey: "k-1" });
    expect(again.ok).toBe(true);
    expect((again.result as { runId: string }).runId).toBe((first.result as { runId: string }).runId);
    // Still alive and answering.
    expect((await op.call<{ sessions: unknown[] }>("sessions.list", {})).sessions.length).toBeGreaterThan(0);
  });

  it("an ended chat run keeps only the head of its input; the transcript keeps all of it", async () => {
    await start({});
    await op.call("sessions.create", { key: CHAT(1) });
    await edge.startWorker(async ({ run }) => `got ${run.input.message.length}`, ["main"]);
    const big = `${"é".repeat(100)}${"y".repeat(300_000)}`;
    // Each end is counted towards retention's count cap (gateway.retention.maxEndedRuns).
    const noted = vi.spyOn(gw.gateway.retention, "noteEnded");
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: CHAT(1), message: big });
    const ended = await op.call<{ status: string; reply?: string }>("agent.wait", {
      runId,
      timeoutMs: 10_000,
    });
    expect(ended).toMatchObject({ status: "ok", reply: "got 300100" });
    await vi.waitFor(() => expect(noted).toHaveBeenCalledTimes(1));
    const record = await gw.gateway.store.runs.get(runId);
    expect(record!.message.length).toBeLessThan(400);
    expect(record!.message.startsWith("é".repeat(100))).toBe(true);
    expect(record!.message).toContain("300100 characters in all");
    const history = await op.call<{ messages: { role: string; content: { text?: string }[] }[] }>(
      "sessions.history",
      { sessionKey: CHAT(1), maxBytes: 1_048_576 },
    );
    expect(history.messages.find((message) => message.role === "user")?.content[0]?.text).toBe(big);
  });
});
