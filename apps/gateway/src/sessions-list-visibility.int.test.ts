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
