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
