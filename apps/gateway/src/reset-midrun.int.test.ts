import { describe, expect, it } from "vitest";
import { deferred } from "./testing/deferred";
import { perTestGateway } from "./testing/per-test-gateway";
import { testStoreKind, WORKER_TOKEN as WORKER } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

// A reset gives a session a new transcript at taint PUBLIC. A run of the old transcript that already
// read CONFIDENTIAL data must not carry on under the new, lower taint: before session 20 its tool
// calls passed the write-down check at PUBLIC and its reply reached a PUBLIC-clearance caller.

const TARGET = "agent:main:main";
const VAULT = "agent:main:vault:dm:cfo";
const LOBBY = "agent:main:discord:group:dev";

const edge = perTestGateway();
let op: TestPeer;

/** A gateway whose `agent:main:main` has read CONFIDENTIAL data, with a PUBLIC discord chat. */
async function taintedTarget() {
  const gw = await edge.start(
    {
      auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
      agents: { list: [{ id: "main", default: true }] },
      labels: { channels: { vault: "CONFIDENTIAL", discord: "PUBLIC" } },
      session: { agentToAgent: { maxPingPongTurns: 0 } },
    },
    { store: testStoreKind() },
  );
  op = await gw.operator();
  await op.call("sessions.create", { key: VAULT, channel: "vault" });
  await op.call("chat.send", { sessionKey: VAULT, message: "Q3 revenue miss: -38% (embargoed)" });
  await op.call("sessions.create", { key: TARGET });
  await op.call("tools.invoke", { tool: "sessions_history", args: { sessionKey: VAULT }, as: TARGET });
  await op.call("sessions.create", { key: LOBBY, channel: "discord" });
  const status = await op.call<{ taint: string }>("sessions.status", { sessionKey: TARGET });
  expect(status.taint).toBe("CONFIDENTIAL");
}

describe("a reset while a run of the session is going", () => {
  it("ends the run: its tool calls and its reply are refused, not judged at the new taint", async () => {
    await taintedTarget();
    const { promise: gate, resolve: release } = deferred();
    let started = false;
    let afterReset: Record<string, unknown> | undefined;
    await edge.startWorker(
      async ({ run, invokeTool }) => {
        if (run.sessionKey !== TARGET) return { ignore: true };
        started = true;
        await gate;
        afterReset = await invokeTool("message", { channel: "discord", to: "dev", text: "leak: -38%" }).catch(
          (error: Error & { code?: string }) => ({ refused: error.code, message: error.message }),
        );
        return "the embargoed figure is -38%";
      },
      ["main"],
    );
    const { runId } = await op.call<{ runId: string }>("agent", { sessionKey: TARGET, message: "go" });
    await until(() => started, "the target's run");
    const { sessionId } = await op.call<{ sessionId: string }>("sessions.reset", { key: TARGET });
    const ended = await op.call<{ status: string; error?: string; reply?: string }>("agent.wait", {
      runId,
      timeoutMs: 5_000,
    });
    expect(ended).toMatchObject({ status: "error", error: "the session was reset while this run was going" });
    release();
    await until(() => afterReset !== undefined, "the tool call after the reset");
    expect(afterReset).toMatchObject({ refused: "FORBIDDEN" });
    // Nothing went out, and the new transcript holds nothing of the old run.
    const lobby = await op.call<{ messages: unknown[] }>("sessions.history", { sessionKey: LOBBY });
    expect(JSON.stringify(lobby.messages)).not.toContain("-38%");
    const fresh = await op.call<{ sessionId: string; taint: string }>("sessions.status", {
      sessionKey: TARGET,
    });
    expect(fresh).toMatchObject({ sessionId, taint: "PUBLIC" });
    const history = await op.call<{ messages: unknown[] }>("sessions.history", { sessionKey: TARGET });
    expect(JSON.stringify(history.messages)).not.toContain("-38%");
  });

  it("a waiting sessions_send from a PUBLIC chat gets the run's error, not the reply", async () => {
    await taintedTarget();
    const { promise: gate, resolve: release } = deferred();
    let started = false;
    let sent: Record<string, unknown> | undefined;
    await edge.startWorker(
      async ({ run, invokeTool }) => {
        if (run.sessionKey === TARGET) {
          started = true;
          await gate;
          return "the embargoed figure is -38%";
        }
        if (run.sessionKey === LOBBY) {
          sent = await invokeTool("sessions_send", {
            sessionKey: TARGET,
            message: "Q3?",
            timeoutSeconds: 10,
          });
          return "done";
        }
        return { ignore: true };
      },
      ["main"],
    );
    const { runId } = await op.call<{ runId: string }>("agent", { sessionKey: LOBBY, message: "ask" });
    await until(() => started, "the target's run");
    await op.call("sessions.reset", { key: TARGET });
    release();
    await op.call("agent.wait", { runId, timeoutMs: 10_000 });
    expect(sent).toMatchObject({ status: "error" });
    expect(JSON.stringify(sent)).not.toContain("-38%");
    const lobby = await op.call<{ taint: string }>("sessions.status", { sessionKey: LOBBY });
    expect(lobby.taint).toBe("PUBLIC");
  });
});
