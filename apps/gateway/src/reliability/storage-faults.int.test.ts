import { setFaultHook } from "@switchboard/store-fs/testing";
import { afterEach, describe, expect, it, vi } from "vitest";
import { behaviour } from "../testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker } from "../testing/test-gateway";
import type { TestPeer } from "../testing/test-peer";

/**
 * Issue 10, item 7: a full disk (or no file descriptors left) never takes the gateway down. Writes
 * are refused with UNAVAILABLE naming the cause, reads keep working, /healthz says so, and writes
 * come back by themselves when the cause clears. Vitest fails the run on any unhandled rejection.
 */
const WORKER = "worker-token-0123456789";
let gw: TestGateway;
let worker: TestWorker | undefined;
let fault: string | undefined;

afterEach(async () => {
  fault = undefined;
  setFaultHook(undefined);
  worker?.close();
  await gw?.close();
});

async function healthz(): Promise<{ status: number; body: { ok: boolean; degraded?: string[] } }> {
  await gw.gateway.storeHealth.poll();
  const response = await fetch(`${gw.url.replace("ws://", "http://")}/healthz`);
  return { status: response.status, body: (await response.json()) as { ok: boolean; degraded?: string[] } };
}

async function setup(): Promise<TestPeer> {
  gw = await startTestGateway(
    { auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] } },
    { store: "file" },
  );
  const op = await gw.operator();
  worker = await TestWorker.start(gw.url, WORKER, ["main"], behaviour());
  const dataDir = gw.gateway.dataDir;
  setFaultHook((_op, filePath) => (fault && filePath.startsWith(dataDir) ? fault : undefined));
  const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "before" });
  expect(await op.call("agent.wait", { runId })).toMatchObject({ status: "ok", reply: "echo: before" });
  return op;
}

describe.each(["ENOSPC", "EMFILE", "EPERM"])("storage fault %s", (code) => {
  it("refuses writes with UNAVAILABLE, keeps reads, reports it, and recovers without a restart", async () => {
    const op = await setup();
    // A run in flight when the fault starts: its completion cannot be recorded, and nothing crashes.
    const { runId: inFlight } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "sleep 200",
    });
    fault = code;

    const send = await op.request("chat.send", { sessionKey: "main", message: "during" });
    expect(send.error?.code).toBe("UNAVAILABLE");
    expect(send.error?.message).toContain(code);
    const create = await op.request("sessions.create", { key: "agent:main:webchat:dm:new" });
    expect(create.error?.code).toBe("UNAVAILABLE");

    const history = await op.call<{ messages: Array<{ content: Array<{ text: string }> }> }>(
      "sessions.history",
      {
        sessionKey: "main",
      },
    );
    expect(history.messages.map((m) => m.content[0]!.text)).toContain("echo: before");
    const down = await healthz();
    expect(down.status).toBe(503);
    expect(down.body.ok).toBe(false);
    expect(down.body.degraded?.join(" ")).toContain(code);
    await new Promise((resolve) => setTimeout(resolve, 400));

    // The cause clears: a machine-wide one (space, descriptors) is noticed by the health probe, a
    // file-specific one (permissions) by the next write to that file.
    fault = undefined;
    await gw.gateway.storeHealth.poll();
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "after" });
    expect(await op.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
      reply: "echo: after",
    });
    // Row touches are written within 100 ms of the append (the file store gathers them), so the
    // sessions journal may report its recovery that much later than the send's answer.
    await vi.waitFor(
      async () => {
        const up = await healthz();
        expect(up.status).toBe(200);
        expect(up.body.ok).toBe(true);
      },
      { timeout: 3_000, interval: 50 },
    );
    // The run in flight ended one way or the other (never stuck as running).
    const ended = await op.call<{ status: string }>("agent.wait", { runId: inFlight, timeoutMs: 10_000 });
    expect(["ok", "error"]).toContain(ended.status);
    const after = await op.call<{ messages: Array<{ content: Array<{ text: string }> }> }>(
      "sessions.history",
      {
        sessionKey: "main",
        limit: 50,
      },
    );
    const texts = after.messages.map((m) => m.content[0]!.text);
    expect(texts).toContain("echo: before");
    expect(texts).toContain("echo: after");
    expect(texts).not.toContain("during");
  });
});

describe("a failed audit append", () => {
  it("does not wedge the audit chain: later records append and the chain verifies", async () => {
    const op = await setup();
    const dataDir = gw.gateway.dataDir;
    setFaultHook((_op, filePath) =>
      fault && filePath.startsWith(dataDir) && filePath.includes("audit") ? fault : undefined,
    );
    await op.call("sessions.patch", { key: "main", displayName: "one" });
    fault = "ENOSPC";
    const failed = await op.request("sessions.patch", { key: "main", displayName: "two" });
    expect(failed.error?.code).toBe("UNAVAILABLE");
    fault = undefined;
    await gw.gateway.storeHealth.poll();
    await op.call("sessions.patch", { key: "main", displayName: "three" });
    await op.call("sessions.patch", { key: "main", displayName: "four" });
    const verified = await op.call<{ ok: boolean; entries: number }>("audit.verify", {});
    expect(verified.ok).toBe(true);
    const tail = await op.call<{ entries: Array<{ kind: string }> }>("audit.tail", { limit: 10 });
    expect(tail.entries.filter((entry) => entry.kind === "session.patched").length).toBeGreaterThanOrEqual(3);
  });
});
