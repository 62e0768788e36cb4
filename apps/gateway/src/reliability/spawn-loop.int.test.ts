import type { ConfigInput } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway, TestWorker, type WorkerHandler } from "../testing/test-gateway";

/**
 * Issue 16, item 3: a model that spawns on every run (its announces included) must stop — the
 * announce continues the spawn's chain (maxHops applies) and each session has a spawn budget.
 */
const WORKER = "worker-token-0123456789";

let gw: TestGateway;
let worker: TestWorker | undefined;

afterEach(async () => {
  worker?.close();
  worker = undefined;
  await gw?.close();
});

const results: Array<Record<string, unknown>> = [];

/** Main spawns on every run, announces included; a sub-agent just answers. */
const spawnEveryRun: WorkerHandler = async (context) => {
  if (context.run.input.context.includes("Sub-agent context")) return "found it";
  const result = (await context.invokeTool("sessions_spawn", { task: "look again" })) as Record<
    string,
    unknown
  >;
  results.push(result);
  return JSON.stringify(result);
};

async function runLoop(agentToAgent: Record<string, number>) {
  results.length = 0;
  const config: ConfigInput = {
    auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
    agents: { list: [{ id: "main", default: true, subagents: { maxChildren: 50 } }] },
    session: { agentToAgent },
  };
  gw = await startTestGateway(config, { store: "file" });
  const op = await gw.operator();
  worker = await TestWorker.start(gw.url, WORKER, ["main"], spawnEveryRun);
  await op.call("sessions.create", { key: "main" });
  await op.call("chat.send", { sessionKey: "main", message: "start" });
  // Wait until the loop has stopped: no new run for a while (bounded: at most 15 s).
  let last = -1;
  for (let i = 0; i < 60 && worker.runs.length !== last; i++) {
    last = worker.runs.length;
    await new Promise((resolve) => setTimeout(resolve, 250));
    await gw.gateway.flows.idle();
  }
  return {
    spawned: results.filter((result) => result.status === "accepted").length,
    refused: results.filter((result) => result.status === "forbidden"),
  };
}

describe("spawn → announce → spawn", () => {
  it("ends at maxHops: the announce run continues the spawn's chain", async () => {
    const { spawned, refused } = await runLoop({ maxHops: 3 });
    expect(spawned).toBe(3);
    expect(refused).toHaveLength(1);
    expect(String(refused[0]!.error)).toContain("hop limit reached (3)");
  });

  it("ends at the session's spawn budget per minute, naming it", async () => {
    const { spawned, refused } = await runLoop({ maxHops: 16, budgetPerMinute: 5 });
    expect(spawned).toBe(5);
    expect(refused).toHaveLength(1);
    expect(String(refused[0]!.error)).toContain("session.agentToAgent.budgetPerMinute is 5");
  });
});
