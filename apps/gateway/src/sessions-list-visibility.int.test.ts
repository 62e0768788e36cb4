import type { ConfigInput } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker, testStoreKind } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";

// What the store gets as data (visibility, mainKey) and what stays a per-row check in the gateway
// (user PRE_HISTORY rules) must still add up to what sessions_list showed before.

const STORE = testStoreKind();
const WORKER = "worker-token-0123456789";

type Listed = {
  status: string;
  sessions: Array<{ key: string; kind: string; agentId: string }>;
  hidden: number;
};

let gw: TestGateway;
let op: TestPeer;
const workers: TestWorker[] = [];

async function setup(overrides: Partial<ConfigInput> = {}) {
  gw = await startTestGateway(
    {
      auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
      agents: { list: [{ id: "main", default: true }, { id: "research" }, { id: "ops", sandboxed: true }] },
      tools: { agentToAgent: { enabled: true, allow: ["*"] } },
      ...overrides,
    },
    { store: STORE },
  );
  op = await gw.operator();
  workers.push(await TestWorker.start(gw.url, WORKER, ["main", "research", "ops"], behaviour()));
  for (const key of ["agent:main:main", "agent:research:main", "agent:ops:main", "agent:ops:cron:daily"]) {
    await op.call("sessions.create", { key });
  }
}

afterEach(async () => {
  for (const worker of workers.splice(0)) worker.close();
  await gw?.close();
});

const list = (as: string, args: Record<string, unknown> = {}) =>
  op.call<Listed>("tools.invoke", { tool: "sessions_list", args, as });
const keys = (listed: Listed) => listed.sessions.map((row) => row.key).sort();

describe("sessions_list visibility", () => {
  it("shows a sandboxed caller only its own row, counting the others as hidden", async () => {
    await setup();
    const listed = await list("agent:ops:main");
    // The caller's own main session is shown by its short key.
    expect(listed.sessions.map((row) => [row.key, row.agentId])).toEqual([["main", "ops"]]);
    expect(listed.hidden).toBe(3);
  });

  it("still applies user PRE_HISTORY rules row by row, and never to the caller's own row", async () => {
    await setup({
      policy: {
        rules: [
          { id: "no-research", hook: "PRE_HISTORY", action: "deny", when: { "target.agentId": "research" } },
          { id: "no-main", hook: "PRE_HISTORY", action: "deny", when: { "target.agentId": "main" } },
        ],
      },
    });
    const listed = await list("agent:main:main");
    expect(keys(listed)).toEqual(["agent:ops:cron:daily", "agent:ops:main", "main"]);
    expect(listed.hidden).toBe(1);
  });

  it("classifies the main kind with the configured mainKey, for the tool and the method", async () => {
    await setup({ session: { mainKey: "home" } });
    // Each agent's main session now ends in `home`; under the default rules none would be `main`.
    const viaTool = await list("agent:main:home", { kinds: ["main"] });
    expect(viaTool.sessions.map((row) => row.agentId).sort()).toEqual(["main", "ops", "research"]);
    const viaMethod = await op.call<Listed>("sessions.list", { kinds: ["main"] });
    expect(viaMethod.sessions.map((row) => row.agentId).sort()).toEqual(["main", "ops", "research"]);
    expect(viaMethod.sessions.every((row) => row.kind === "main")).toBe(true);
  });
});

describe("sessions_list of a caller whose clearance was lowered below its taint", () => {
  // `sessions.patch` with `force` lowers a clearance and keeps what the session holds: its
  // sessions_history of a CONFIDENTIAL session is refused from then on, and its list previews of
  // that session used to hand over the same new data, bounded by the taint alone.
  it("hides a session above the clearance, with its previews, as its history is refused", async () => {
    const ALICE = "agent:main:webchat:dm:alice";
    const BOB = "agent:main:main";
    await setup({ labels: { channels: { webchat: "CONFIDENTIAL" } } });
    await op.call("sessions.create", { key: ALICE, channel: "webchat" });
    const chat = async (message: string) => {
      const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: ALICE, message });
      await op.call("agent.wait", { runId, timeoutMs: 10_000 });
    };
    await chat("hi");
    await op.call("tools.invoke", { tool: "sessions_history", args: { sessionKey: ALICE }, as: BOB });
    await op.call("sessions.patch", { key: BOB, clearance: "PUBLIC", force: true });
    await chat("the new code is victor-9191");

    const history = await op.call<{ status: string }>("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: ALICE },
      as: BOB,
    });
    expect(history.status).toBe("forbidden");
    const listed = await list(BOB, { messageLimit: 5 });
    expect(JSON.stringify(listed)).not.toContain("victor-9191");
    expect(keys(listed)).not.toContain(ALICE);
    expect(keys(listed)).toContain("main");
    expect(listed.hidden).toBe(1);
  });
});
