import type { ConfigInput } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { perTestGateway } from "./testing/per-test-gateway";
import { type TestGateway, WORKER_TOKEN, type WorkerHandler } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

// What a send's follow-up (reply-back turns, the announce) and a spawn's announce pass between
// sessions is the same data a waiting caller takes in: it keeps the label its run's end gave it
// (a reset since lowers the session, not the reply) and PRE_HISTORY redact rules rewrite it.
// Before session 22 a reset between the primary's end and turn 1 put CONFIDENTIAL text into a
// PUBLIC session at PUBLIC, and a redacted reply reached the requester raw in turn 1.

const PUB = "agent:main:discord:group:pub";
const ALICE = "agent:main:webchat:dm:alice";
const MAIN = "agent:main:main";
const SECRET = "zulu-4242";

const edge = perTestGateway();
let op: TestPeer;

/** Runs whose message is `call <tool> <json args>` call it and reply with its result. */
function scripted(reply: (run: Parameters<WorkerHandler>[0]["run"]) => string | undefined): WorkerHandler {
  return async ({ run, invokeTool }) => {
    const own = reply(run);
    if (own !== undefined) return own;
    const call = /^call (\S+) (.*)$/s.exec(run.input.message);
    if (call) return JSON.stringify(await invokeTool(call[1]!, JSON.parse(call[2]!)));
    return "ok";
  };
}

async function start(config: ConfigInput): Promise<TestGateway> {
  const gw = await edge.start({
    auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
    agents: { list: [{ id: "main", default: true }] },
    tools: { agentToAgent: { enabled: true, allow: ["*"] } },
    ...config,
  });
  op = await gw.operator();
  return gw;
}

/**
 * The first background wait for a `send` run of ALICE is followed by a reset of ALICE, and with
 * `clearance`, by the operator setting ALICE's clearance (no force needed: it holds nothing now).
 */
function resetAliceAfterItsSend(gw: TestGateway, clearance?: string): () => boolean {
  const flows = gw.gateway.flows as unknown as { waitEnd(runId: string): Promise<unknown> };
  const waitEnd = flows.waitEnd.bind(flows);
  let reset = false;
  flows.waitEnd = async (runId: string) => {
    const result = await waitEnd(runId);
    const record = await gw.gateway.scheduler.latestRecord(runId);
    if (!reset && record?.sessionKey === ALICE && record.origin === "send") {
      reset = true;
      await op.call("sessions.reset", { key: ALICE });
      if (clearance) await op.call("sessions.patch", { key: ALICE, clearance });
    }
    return result;
  };
  return () => reset;
}

async function sendFrom(from: string, to: string): Promise<void> {
  const args = { sessionKey: to, message: "code?", timeoutSeconds: 10 };
  const { runId } = await op.call<{ runId: string }>("agent", {
    sessionKey: from,
    message: `call sessions_send ${JSON.stringify(args)}`,
  });
  await op.call("agent.wait", { runId, timeoutMs: 15_000 });
}

/** ALICE, a CONFIDENTIAL chat, after a first message from it (its taint CONFIDENTIAL). */
async function aliceHeardFrom(): Promise<void> {
  await op.call("sessions.create", { key: ALICE, channel: "webchat" });
  const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: ALICE, message: "hi" });
  await op.call("agent.wait", { runId, timeoutMs: 10_000 });
  const alice = await op.call<{ taint: string }>("sessions.status", { sessionKey: ALICE });
  expect(alice.taint).toBe("CONFIDENTIAL");
}

async function transcriptOf(key: string): Promise<string> {
  return JSON.stringify(await op.call("sessions.history", { sessionKey: key, limit: 100 }));
}

describe("a send's follow-up after a reset of its target", () => {
  const labelled = (turns: number) =>
    start({
      session: { agentToAgent: { maxPingPongTurns: turns } },
      labels: { channels: { discord: "PUBLIC", webchat: "CONFIDENTIAL" } },
    });

  /**
   * PUB sends to ALICE and waits; ALICE answers the secret, every follow-up step skips, and ALICE is
   * reset right after its reply. Returns the worker once the follow-up settled.
   */
  async function sendFromPubWithAliceReset(turns: number, clearance?: string) {
    const gw = await labelled(turns);
    const worker = await edge.startWorker(
      scripted((run) => {
        if (run.input.context.includes("announce step")) return "ANNOUNCE_SKIP";
        if (run.input.context.includes("reply step")) return "REPLY_SKIP";
        return run.sessionKey === ALICE ? `the launch code is ${SECRET}` : undefined;
      }),
      ["main"],
    );
    await op.call("sessions.create", { key: PUB, channel: "discord" });
    await aliceHeardFrom();
    const reset = resetAliceAfterItsSend(gw, clearance);
    await sendFrom(PUB, ALICE);
    await gw.gateway.flows.idle();
    expect(reset()).toBe(true);
    return worker;
  }

  it("a reply-back turn does not carry the target's CONFIDENTIAL reply into a PUBLIC session", async () => {
    const worker = await sendFromPubWithAliceReset(2);
    expect(JSON.stringify(worker.runs.filter((run) => run.sessionKey === PUB))).not.toContain(SECRET);
    expect(await transcriptOf(PUB)).not.toContain(SECRET);
    const pub = await op.call<{ taint: string }>("sessions.status", { sessionKey: PUB });
    expect(pub.taint).toBe("PUBLIC");
  });

  it("the announce brings the reply back into the reset target at its own label", async () => {
    const worker = await sendFromPubWithAliceReset(0);
    const announce = worker.runs.find((run) => run.input.context.includes("announce step"));
    expect(announce?.input.context).toContain(SECRET);
    const alice = await op.call<{ taint: string }>("sessions.status", { sessionKey: ALICE });
    expect(alice.taint).toBe("CONFIDENTIAL");
    const read = await op.call("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: ALICE },
      as: PUB,
    });
    expect(JSON.stringify(read)).not.toContain(SECRET);
  });

  it("makes no announce into a target whose clearance was lowered below the reply's label", async () => {
    const worker = await sendFromPubWithAliceReset(0, "PUBLIC");
    const announce = worker.runs.find((run) => run.input.context.includes("announce step"));
    expect(announce).toBeUndefined();
    const audit = await op.call<{ entries: Array<{ kind: string; sessionKey?: string; data: object }> }>(
      "audit.tail",
      { limit: 1000 },
    );
    const refused = audit.entries.find((record) => record.kind === "announce" && record.sessionKey === ALICE);
    expect(refused?.data).toMatchObject({
      refused: true,
      error: expect.stringContaining("clearance PUBLIC"),
    });
    const alice = await op.call<{ taint: string; clearance: string }>("sessions.status", {
      sessionKey: ALICE,
    });
    expect(alice).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });
    expect(await transcriptOf(ALICE)).not.toContain(SECRET);
  });
});

describe("PRE_HISTORY redaction of what a follow-up hands over", () => {
  const redacting = (turns: number) =>
    start({
      session: { agentToAgent: { maxPingPongTurns: turns } },
      policy: {
        rules: [
          { id: "no-codes", hook: "PRE_HISTORY", action: "redact", redact: { patterns: ["zulu-\\d+"] } },
        ],
      },
    });

  it("rewrites the target's reply in the requester's reply-back turn, as in the send's result", async () => {
    await redacting(1);
    const TARGET = "agent:main:discord:group:ops";
    const worker = await edge.startWorker(
      scripted((run) => {
        if (run.input.context.includes("reply step")) return "REPLY_SKIP";
        if (run.input.context.includes("announce step")) return "ANNOUNCE_SKIP";
        return run.sessionKey === TARGET ? `the code is ${SECRET}` : undefined;
      }),
      ["main"],
    );
    await op.call("sessions.create", { key: TARGET, channel: "discord" });
    await sendFrom(MAIN, TARGET);
    const turn = await until(
      () => worker.runs.find((run) => run.sessionKey === MAIN && run.input.context.includes("reply step")),
      "the requester's reply-back turn",
    );
    expect(turn.input.message).toBe("the code is [REDACTED]");
    expect(await transcriptOf(MAIN)).not.toContain(SECRET);
  });

  it("rewrites a child's findings in its spawn announce, as in a read of its history", async () => {
    await redacting(0);
    const worker = await edge.startWorker(
      scripted((run) => {
        if (run.input.context.includes("announce step")) return "ANNOUNCE_SKIP";
        return run.sessionKey.includes(":subagent:") ? `found ${SECRET}` : undefined;
      }),
      ["main"],
    );
    const { runId } = await op.call<{ runId: string }>("agent", {
      sessionKey: MAIN,
      message: `call sessions_spawn ${JSON.stringify({ task: "find it" })}`,
    });
    await op.call("agent.wait", { runId, timeoutMs: 15_000 });
    const announce = await until(
      () => worker.runs.find((run) => run.sessionKey === MAIN && run.input.context.includes("announce step")),
      "the spawn's announce run",
    );
    expect(announce.input.message).toContain("found [REDACTED]");
    expect(announce.input.message).not.toContain(SECRET);
  });
});

describe("a spawn's announce retried after a reset of its requester", () => {
  // The first announce run on the requester waits for a worker; meanwhile the operator resets the
  // requester and lowers its clearance. That run ends unrun, and the retry used to re-deliver the
  // findings, raising the requester above its new clearance, with none of the first one's checks.
  it("is judged again on the requester as it is now, and fails instead of delivering", async () => {
    const HELPER_CHAT = "agent:helper:webchat:dm:alice";
    const gw = await edge.start({
      auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
      agents: {
        list: [{ id: "main", default: true, subagents: { allowAgents: ["helper"] } }, { id: "helper" }],
      },
      tools: { agentToAgent: { enabled: true, allow: ["*"] } },
      labels: { channels: { webchat: "CONFIDENTIAL" } },
    });
    op = await gw.operator();
    // Only the helper agent has a worker for now: runs on MAIN stay queued.
    await edge.startWorker(
      async ({ run }) => (run.sessionKey === HELPER_CHAT ? "hello" : `found ${SECRET}`),
      ["helper"],
    );
    await op.call("sessions.create", { key: HELPER_CHAT, channel: "webchat" });
    const hi = await op.call<{ runId: string }>("chat.send", { sessionKey: HELPER_CHAT, message: "hi" });
    await op.call("agent.wait", { runId: hi.runId, timeoutMs: 10_000 });
    await op.call("sessions.create", { key: MAIN });
    await op.call("tools.invoke", { tool: "sessions_history", args: { sessionKey: HELPER_CHAT }, as: MAIN });
    const spawned = await op.call<{ status: string; runId: string }>("tools.invoke", {
      tool: "sessions_spawn",
      args: { task: "find it", agentId: "helper" },
      as: MAIN,
    });
    expect(spawned.status).toBe("accepted");
    await op.call("agent.wait", { runId: spawned.runId, timeoutMs: 10_000 });
    const announceOf = async () => (await gw.gateway.store.runs.get(spawned.runId))?.spawn?.announce;
    await until(async () => (await announceOf())?.runId !== undefined, "the announce run queued on MAIN");

    await op.call("sessions.reset", { key: MAIN });
    await op.call("sessions.patch", { key: MAIN, clearance: "PUBLIC" });
    const mainWorker = await edge.startWorker(async () => "ANNOUNCE_SKIP", ["main"]);
    await until(async () => (await announceOf())?.status === "failed", "the announce reported failed");
    await gw.gateway.flows.idle();

    expect((await announceOf())?.lastError).toContain("clearance PUBLIC");
    const main = await op.call<{ taint: string; clearance: string }>("sessions.status", { sessionKey: MAIN });
    expect(main).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });
    expect(JSON.stringify(mainWorker.runs)).not.toContain(SECRET);
    expect(await transcriptOf(MAIN)).not.toContain(SECRET);
  });
});
