import { describe, expect, it } from "vitest";
import { perTestGateway } from "./testing/per-test-gateway";
import { testStoreKind, WORKER_TOKEN } from "./testing/test-gateway";

// A send decides no read-up on the target's row as it reads it; an operator lowering the target's
// clearance before the taint rise is written (another instance's `sessions.patch` during the
// cluster's admission round trip, in the review that found it) left the session holding
// CONFIDENTIAL data above its PUBLIC clearance. The rise itself now checks the row it writes over.

const SENDER = "agent:main:main";
const VAULT = "agent:main:vault:dm:cfo";
const RECV = "agent:main:cron:recv";

const edge = perTestGateway();

describe("a clearance lowered while a message into the session is delivered", () => {
  it("refuses the delivery instead of leaving the session tainted above its clearance", async () => {
    const gw = await edge.start(
      {
        auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
        agents: { list: [{ id: "main", default: true }] },
        labels: { channels: { vault: "CONFIDENTIAL" } },
        session: { agentToAgent: { maxPingPongTurns: 0 } },
      },
      { store: testStoreKind() },
    );
    const op = await gw.operator();
    await op.call("sessions.create", { key: VAULT, channel: "vault" });
    await op.call("chat.send", { sessionKey: VAULT, message: "Q3 revenue miss: -38% (embargoed)" });
    await op.call("sessions.create", { key: SENDER });
    await op.call("tools.invoke", { tool: "sessions_history", args: { sessionKey: VAULT }, as: SENDER });
    await op.call("sessions.create", { key: RECV });
    const sessions = gw.gateway.sessions;
    const raiseTaint = sessions.raiseTaint.bind(sessions);
    let patched = false;
    sessions.raiseTaint = async (...args: Parameters<typeof raiseTaint>) => {
      if (!patched && args[0] === RECV && args[2].startsWith("message from")) {
        patched = true;
        await op.call("sessions.patch", { key: RECV, clearance: "PUBLIC" });
      }
      return raiseTaint(...args);
    };
    const sent = await op.call<{ result?: Record<string, unknown> } & Record<string, unknown>>(
      "tools.invoke",
      {
        tool: "sessions_send",
        args: { sessionKey: RECV, message: "the figure is -38%", timeoutSeconds: 0 },
        as: SENDER,
      },
    );
    expect(patched).toBe(true);
    expect(sent.result ?? sent).toMatchObject({ status: "forbidden" });
    const recv = await op.call<{ taint: string; clearance: string }>("sessions.status", { sessionKey: RECV });
    expect(recv).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });
    expect(JSON.stringify(await op.call("sessions.history", { sessionKey: RECV }))).not.toContain("-38%");
  });
});

// The same race for a session's own reads: sessions_history and session_status decided no read-up
// on the caller's row as it was at the start of the call, and a tool's result label on the row as
// it was before the tool ran; the taint rise after it took no account of a clearance lowered since.
describe("a clearance lowered while the session reads", () => {
  /** READER's clearance is lowered to PUBLIC (no force: its taint is still PUBLIC) just before the rise. */
  async function readerLoweredDuring(reason: string, tools: Record<string, "CONFIDENTIAL"> = {}) {
    const gw = await edge.start(
      {
        auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
        agents: { list: [{ id: "main", default: true }] },
        labels: { channels: { vault: "CONFIDENTIAL" }, tools },
      },
      { store: testStoreKind() },
    );
    const op = await gw.operator();
    await op.call("sessions.create", { key: VAULT, channel: "vault" });
    await op.call("chat.send", { sessionKey: VAULT, message: "Q3 revenue miss: -38% (embargoed)" });
    await op.call("sessions.create", { key: RECV });
    const sessions = gw.gateway.sessions;
    const raiseTaint = sessions.raiseTaint.bind(sessions);
    const state = { patched: false };
    sessions.raiseTaint = async (...args: Parameters<typeof raiseTaint>) => {
      if (!state.patched && args[0] === RECV && args[2].startsWith(reason)) {
        state.patched = true;
        await op.call("sessions.patch", { key: RECV, clearance: "PUBLIC" });
      }
      return raiseTaint(...args);
    };
    const invoke = (tool: string, args: Record<string, unknown>) =>
      op.call<{ status: string } & Record<string, unknown>>("tools.invoke", { tool, args, as: RECV });
    const reader = () =>
      op.call<{ taint: string; clearance: string }>("sessions.status", { sessionKey: RECV });
    return { state, invoke, reader };
  }

  for (const tool of ["sessions_history", "session_status"]) {
    it(`${tool} answers forbidden and leaves the reader at its new clearance`, async () => {
      const { state, invoke, reader } = await readerLoweredDuring("read ");
      const result = await invoke(tool, { sessionKey: VAULT });
      expect(state.patched).toBe(true);
      expect(result).toMatchObject({ status: "forbidden" });
      expect(String(result.error)).toContain("clearance PUBLIC");
      expect(JSON.stringify(result)).not.toContain("-38%");
      expect(await reader()).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });
    });
  }

  it("withholds a tool's result labelled above the new clearance", async () => {
    const { state, invoke, reader } = await readerLoweredDuring("result of tool", {
      agents_list: "CONFIDENTIAL",
    });
    const result = await invoke("agents_list", {});
    expect(state.patched).toBe(true);
    expect(result).toMatchObject({ status: "forbidden" });
    expect(result).not.toHaveProperty("agents");
    expect(await reader()).toMatchObject({ taint: "PUBLIC", clearance: "PUBLIC" });
  });
});
