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
  return gw;
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

describe("a reset between a run's end and its waiting caller's take-in", () => {
  /** Every take-in first waits for a reset of the target: the reset lands after the end, before the read. */
  function resetBeforeTakeIn(gw: Awaited<ReturnType<typeof edge.start>>) {
    const flows = gw.gateway.flows;
    const takeIn = flows.takeIn.bind(flows);
    let resets = 0;
    flows.takeIn = async (...args: Parameters<typeof takeIn>) => {
      if (args[1] === TARGET) {
        await op.call("sessions.reset", { key: TARGET });
        resets += 1;
      }
      return takeIn(...args);
    };
    return () => resets;
  }

  it("withholds the reply from a PUBLIC caller: it carries the label it was computed at", async () => {
    const resets = resetBeforeTakeIn(await taintedTarget());
    let sent: Record<string, unknown> | undefined;
    await edge.startWorker(
      async ({ run, invokeTool }) => {
        if (run.sessionKey === TARGET) return "the embargoed figure is -38%";
        if (run.sessionKey !== LOBBY) return { ignore: true };
        sent = await invokeTool("sessions_send", { sessionKey: TARGET, message: "Q3?", timeoutSeconds: 10 });
        return "done";
      },
      ["main"],
    );
    const { runId } = await op.call<{ runId: string }>("agent", { sessionKey: LOBBY, message: "ask" });
    await op.call("agent.wait", { runId, timeoutMs: 10_000 });
    expect(resets()).toBe(1);
    expect(sent).toMatchObject({ status: "ok", reply: "", dataLabel: "CONFIDENTIAL" });
    expect(sent?.withheld).toEqual(expect.any(String));
    expect(JSON.stringify(sent)).not.toContain("-38%");
    const lobby = await op.call<{ taint: string }>("sessions.status", { sessionKey: LOBBY });
    expect(lobby.taint).toBe("PUBLIC");
    const history = await op.call<{ messages: unknown[] }>("sessions.history", { sessionKey: LOBBY });
    expect(JSON.stringify(history.messages)).not.toContain("-38%");
  });

  it("raises a cleared caller to the reply's label, not the reset session's", async () => {
    const resets = resetBeforeTakeIn(await taintedTarget());
    await edge.startWorker(
      async ({ run }) => (run.sessionKey === TARGET ? "the figure is -38%" : { ignore: true }),
      ["main"],
    );
    const CALLER = "agent:main:desk";
    await op.call("sessions.create", { key: CALLER });
    await op.call("sessions.patch", { key: CALLER, clearance: "CONFIDENTIAL" });
    const sent = await op.call<{ result: Record<string, unknown> }>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: TARGET, message: "Q3?", timeoutSeconds: 10 },
      as: CALLER,
    });
    expect(resets()).toBe(1);
    expect(JSON.stringify(sent)).toContain("-38%");
    expect(JSON.stringify(sent)).toContain('"dataLabel":"CONFIDENTIAL"');
    const caller = await op.call<{ taint: string }>("sessions.status", { sessionKey: CALLER });
    expect(caller.taint).toBe("CONFIDENTIAL");
    const target = await op.call<{ taint: string }>("sessions.status", { sessionKey: TARGET });
    expect(target.taint).toBe("PUBLIC");
  });
});

describe("a reset of the caller while its tool call is going", () => {
  it("does not write the call's record into the new transcript", async () => {
    const gw = await taintedTarget();
    const CALLER = "agent:main:desk";
    await op.call("sessions.create", { key: CALLER });
    await op.call("sessions.patch", { key: CALLER, clearance: "CONFIDENTIAL" });
    // The reset lands after the history read raised the caller, before the call's record is written.
    const sessions = gw.gateway.sessions;
    const raiseTaint = sessions.raiseTaint.bind(sessions);
    let reset = false;
    sessions.raiseTaint = async (...args: Parameters<typeof raiseTaint>) => {
      const raised = await raiseTaint(...args);
      if (!reset && args[0] === CALLER && args[2].startsWith("read history")) {
        reset = true;
        await op.call("sessions.reset", { key: CALLER });
      }
      return raised;
    };
    const read = await op.call("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: VAULT },
      as: CALLER,
    });
    expect(JSON.stringify(read)).toContain("-38%");
    expect(reset).toBe(true);
    const after = await op.call<{ taint: string }>("sessions.status", { sessionKey: CALLER });
    expect(after.taint).toBe("PUBLIC");
    const history = await op.call("sessions.history", { sessionKey: CALLER, includeTools: true });
    expect(JSON.stringify(history)).not.toContain("-38%");
  });
});

describe("a reset of the target while a message into it becomes a run", () => {
  const RECV = "agent:main:cron:recv";
  const FIGURE = "the embargoed figure is -38%";

  async function sendToRecv(): Promise<Record<string, unknown>> {
    const sent = await op.call<{ result?: Record<string, unknown> } & Record<string, unknown>>(
      "tools.invoke",
      {
        tool: "sessions_send",
        args: { sessionKey: RECV, message: FIGURE, timeoutSeconds: 0 },
        as: TARGET,
      },
    );
    return sent.result ?? sent;
  }

  it("before the run is made: the new transcript takes the message at its label", async () => {
    const gw = await taintedTarget();
    await op.call("sessions.create", { key: RECV });
    await edge.startWorker(async () => "noted", ["main"]);
    const scheduler = gw.gateway.scheduler;
    const enqueue = scheduler.enqueue.bind(scheduler);
    let reset = false;
    scheduler.enqueue = async (spec) => {
      if (!reset && spec.sessionKey === RECV) {
        reset = true;
        await op.call("sessions.reset", { key: RECV });
      }
      return enqueue(spec);
    };
    expect(await sendToRecv()).toMatchObject({ status: "accepted" });
    expect(reset).toBe(true);
    const recv = await op.call<{ taint: string }>("sessions.status", { sessionKey: RECV });
    expect(recv.taint).toBe("CONFIDENTIAL");
  });

  it("between the run's record and its input: the input is not written into the new transcript", async () => {
    const gw = await taintedTarget();
    await op.call("sessions.create", { key: RECV });
    const sessions = gw.gateway.sessions;
    const appendFor = sessions.appendFor.bind(sessions);
    let reset = false;
    sessions.appendFor = async (...args: Parameters<typeof appendFor>) => {
      if (!reset && args[0] === RECV) {
        reset = true;
        await op.call("sessions.reset", { key: RECV });
      }
      return appendFor(...args);
    };
    const sent = await sendToRecv();
    expect(reset).toBe(true);
    expect(sent.status).not.toBe("accepted");
    const recv = await op.call<{ taint: string }>("sessions.status", { sessionKey: RECV });
    expect(recv.taint).toBe("PUBLIC");
    const history = await op.call("sessions.history", { sessionKey: RECV });
    expect(JSON.stringify(history)).not.toContain("-38%");
  });
});
