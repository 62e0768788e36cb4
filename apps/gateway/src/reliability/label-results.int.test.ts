import type { ConfigInput } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "../testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker, type WorkerHandler } from "../testing/test-gateway";
import type { TestPeer } from "../testing/test-peer";

/**
 * Every result that carries another session's data carries that data's label: above the caller's
 * clearance the data is withheld (and audited), within it the caller's taint rises, and the
 * transcript entry of the result is recorded at that label (issue 10, item 1).
 */
const WORKER = "worker-token-0123456789";
const PUB = "agent:main:discord:group:pub";
const ALICE = "agent:main:webchat:dm:alice";
// "zulu": a code no random id (hex) can contain by chance, as "4242" alone sometimes was in a UUID.
const SECRET = "the launch code is zulu-4242";

type Result = Record<string, unknown> & { status: string };

let gw: TestGateway;
let op: TestPeer;
let worker: TestWorker | undefined;

afterEach(async () => {
  aliceFails = false;
  await gw?.gateway.flows.idle();
  worker?.close();
  worker = undefined;
  await gw?.close();
});

/** Alice's runs fail, with the secret in their error text. */
let aliceFails = false;

/**
 * Alice's session answers every message with its secret (or fails with it, `aliceFails`); main, in a reply-back step, reads Alice's
 * history and repeats the secret; an announce step repeats its whole context; everything else
 * follows `behaviour()`.
 */
const handler: WorkerHandler = async (context) => {
  const { sessionKey, input } = context.run;
  if (sessionKey === ALICE && aliceFails) return { fail: `could not comply: ${SECRET}` };
  if (sessionKey === ALICE && !input.context.includes("step")) return SECRET;
  if (sessionKey === "agent:main:main" && input.context.includes("Agent-to-agent reply step")) {
    await context.invokeTool("sessions_history", { sessionKey: ALICE });
    return `main says: ${SECRET}`;
  }
  if (input.context.includes("Agent-to-agent announce step")) return input.context;
  return behaviour()(context);
};

async function setup(extra: Partial<ConfigInput> = {}) {
  gw = await startTestGateway(
    {
      auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
      agents: { list: [{ id: "main", default: true }] },
      session: { agentToAgent: { maxPingPongTurns: 0 } },
      tools: { agentToAgent: { enabled: true, allow: ["*"] } },
      labels: { channels: { discord: "PUBLIC", webchat: "CONFIDENTIAL" } },
      ...extra,
    },
    { store: "file" },
  );
  op = await gw.operator();
  worker = await TestWorker.start(gw.url, WORKER, ["main"], handler);
  await op.call("sessions.create", { key: PUB, channel: "discord" });
  await op.call("sessions.create", { key: ALICE, channel: "webchat" });
  // Alice's session takes in a CONFIDENTIAL message from its channel.
  const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: ALICE, message: "hi" });
  await op.call("agent.wait", { runId, timeoutMs: 10_000 });
}

/** A run of `sessionKey` that calls one tool; resolves with the tool's result. */
async function toolInRun(sessionKey: string, name: string, args: Record<string, unknown>): Promise<Result> {
  const { runId } = await op.call<{ runId: string }>("agent", {
    sessionKey,
    message: `call ${name} ${JSON.stringify(args)}`,
  });
  const waited = await op.call<{ status: string; reply?: string; error?: string }>("agent.wait", {
    runId,
    timeoutMs: 15_000,
  });
  if (waited.status !== "ok") throw new Error(`run ${waited.status}: ${waited.error}`);
  return JSON.parse(waited.reply!) as Result;
}

async function status(key: string) {
  return op.call<{ taint: string; clearance: string }>("sessions.status", { sessionKey: key });
}

async function auditKinds() {
  const tail = await op.call<{ entries: Array<{ kind: string; data?: Record<string, unknown> }> }>(
    "audit.tail",
    { limit: 200 },
  );
  return tail.entries;
}

describe("labels of results carrying another session's data", () => {
  it("withholds a send's reply above the caller's clearance, and says so", async () => {
    await setup();
    expect(await status(ALICE)).toMatchObject({ taint: "CONFIDENTIAL" });
    expect(await status(PUB)).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });

    const result = await toolInRun(PUB, "sessions_send", {
      sessionKey: ALICE,
      message: "what is the code?",
      timeoutSeconds: 10,
    });
    expect(result.status).toBe("ok");
    expect(JSON.stringify(result)).not.toContain("zulu-4242");
    expect(result.reply).toBe("");
    expect(result.dataLabel).toBe("CONFIDENTIAL");
    expect(String(result.withheld)).toContain("read-up blocked");
    expect(await status(PUB)).toMatchObject({ taint: "PUBLIC" });

    const history = await op.call<{ messages: Array<{ role: string; content: unknown[] }> }>(
      "sessions.history",
      { sessionKey: PUB, includeTools: true, limit: 20 },
    );
    expect(JSON.stringify(history.messages)).not.toContain("zulu-4242");
    const blocked = (await auditKinds()).filter((entry) => entry.kind === "policy.blocked");
    expect(blocked.some((entry) => String(entry.data?.message).includes("read-up blocked"))).toBe(true);
  });

  it("within clearance, raises the caller's taint, labels the recorded result, and blocks the write-down out", async () => {
    await setup();
    await op.call("sessions.patch", { key: PUB, clearance: "CONFIDENTIAL" });

    const result = await toolInRun(PUB, "sessions_send", {
      sessionKey: ALICE,
      message: "what is the code?",
      timeoutSeconds: 10,
    });
    expect(result).toMatchObject({ status: "ok", reply: SECRET, dataLabel: "CONFIDENTIAL" });
    expect(await status(PUB)).toMatchObject({ taint: "CONFIDENTIAL" });

    const history = await op.call<{ messages: Array<{ role: string; label: string }> }>("sessions.history", {
      sessionKey: PUB,
      includeTools: true,
      limit: 20,
    });
    const recorded = history.messages.find((message) => message.role === "toolResult");
    expect(recorded?.label).toBe("CONFIDENTIAL");

    // P's own reply (it carries the secret) may not reach the PUBLIC discord channel.
    await gw.gateway.flows.idle();
    const blocked = (await auditKinds()).filter(
      (entry) => entry.kind === "policy.blocked" && entry.data?.hook === "PRE_OUTPUT",
    );
    expect(blocked.length).toBeGreaterThan(0);
    expect(String(blocked[0]!.data?.message)).toContain("write-down blocked");
  });

  it("withholds a failed run's error text above the caller's clearance, as it does a reply", async () => {
    await setup();
    aliceFails = true;
    const result = await toolInRun(PUB, "sessions_send", {
      sessionKey: ALICE,
      message: "what is the code?",
      timeoutSeconds: 10,
    });
    // Before, the error text came back whole: `could not comply: the launch code is zulu-4242`.
    expect(result).toMatchObject({ status: "error", error: "run failed", dataLabel: "CONFIDENTIAL" });
    expect(JSON.stringify(result)).not.toContain("zulu-4242");
    expect(String(result.withheld)).toContain("read-up blocked");
    expect(await status(PUB)).toMatchObject({ taint: "PUBLIC" });
    const history = await op.call<{ messages: unknown[] }>("sessions.history", {
      sessionKey: PUB,
      includeTools: true,
      limit: 20,
    });
    expect(JSON.stringify(history.messages)).not.toContain("zulu-4242");
  });

  it("within clearance, a failed run's error text raises the caller's taint and carries its label", async () => {
    await setup();
    await op.call("sessions.patch", { key: PUB, clearance: "CONFIDENTIAL" });
    aliceFails = true;
    const sent = await toolInRun(PUB, "sessions_send", {
      sessionKey: ALICE,
      message: "what is the code?",
      timeoutSeconds: 10,
    });
    expect(sent).toMatchObject({
      status: "error",
      error: `could not comply: ${SECRET}`,
      dataLabel: "CONFIDENTIAL",
    });
    expect(sent.withheld).toBeUndefined();
    // Before, PUB kept its PUBLIC taint with the secret in hand, free to post it to its channel.
    expect(await status(PUB)).toMatchObject({ taint: "CONFIDENTIAL" });
    // And the recorded result holding the secret carries its label, not the caller's old taint.
    const history = await op.call<{ messages: Array<{ role: string; label: string; content: unknown }> }>(
      "sessions.history",
      { sessionKey: PUB, includeTools: true, limit: 20 },
    );
    const recorded = history.messages.filter(
      (message) => message.role === "toolResult" && JSON.stringify(message.content).includes(SECRET),
    );
    expect(recorded.map((message) => message.label)).toEqual(["CONFIDENTIAL"]);

    // The same for a summary whose run fails.
    await op.call("sessions.create", { key: "agent:main:discord:group:other", channel: "discord" });
    await op.call("sessions.patch", { key: "agent:main:discord:group:other", clearance: "CONFIDENTIAL" });
    const summary = await toolInRun("agent:main:discord:group:other", "summarize", { sessionKey: ALICE });
    expect(summary).toMatchObject({
      status: "error",
      error: `could not comply: ${SECRET}`,
      dataLabel: "CONFIDENTIAL",
    });
    expect(await status("agent:main:discord:group:other")).toMatchObject({ taint: "CONFIDENTIAL" });
  });

  it("labels history and status results with the target's taint", async () => {
    await setup({ agents: { list: [{ id: "main", default: true, clearance: "CONFIDENTIAL" }] } });
    await op.call("sessions.create", { key: "main" });
    const history = await op.call<Result>("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: ALICE },
      as: "main",
    });
    expect(history).toMatchObject({ status: "ok", dataLabel: "CONFIDENTIAL" });
    const stat = await op.call<Result>("tools.invoke", {
      tool: "session_status",
      args: { sessionKey: ALICE },
      as: "main",
    });
    expect(stat).toMatchObject({ status: "ok", dataLabel: "CONFIDENTIAL" });
  });

  it("keeps a requester's reply-back turn above the target's clearance out of the target's announce", async () => {
    await setup({
      agents: { list: [{ id: "main", default: true, clearance: "CONFIDENTIAL" }] },
      session: { agentToAgent: { maxPingPongTurns: 1 } },
    });
    await op.call("sessions.create", { key: "main" });
    const sent = await op.call<Result>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: PUB, message: "hello", timeoutSeconds: 10 },
      as: "main",
    });
    expect(sent.status).toBe("ok");
    await gw.gateway.flows.idle();
    expect(await status("main")).toMatchObject({ taint: "CONFIDENTIAL" });
    const announce = worker!.runs.find(
      (run) => run.sessionKey === PUB && run.input.context.includes("announce step"),
    );
    expect(announce).toBeDefined();
    expect(announce!.input.context).not.toContain("zulu-4242");
    expect(await status(PUB)).toMatchObject({ taint: "PUBLIC" });
  });
});
