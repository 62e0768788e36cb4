import { afterEach, describe, expect, it } from "vitest";
import {
  CLIENT_TOKEN,
  startTestGateway,
  type TestGateway,
  TestWorker,
  twoAgentConfig,
  WORKER_TOKEN,
} from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";

const CONFIG = twoAgentConfig;

interface RunRow {
  runId: string;
  sessionKey: string;
  agentId: string;
  status: string;
  lane: string;
}

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

describe("runs.list", () => {
  it("lists queued and running runs by default, ended ones on request, filtered by session and agent", async () => {
    gw = await startTestGateway(CONFIG, { store: "file" });
    const op = await gw.operator();
    // No worker yet: both runs wait in their lanes.
    const main = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "one" });
    const research = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:research:main",
      message: "two",
    });
    const waiting = await op.call<{ runs: RunRow[] }>("runs.list", {});
    expect(waiting.runs.map((run) => [run.runId, run.status, run.lane])).toEqual([
      [research.runId, "queued", "main"],
      [main.runId, "queued", "main"],
    ]);
    const forResearch = await op.call<{ runs: RunRow[] }>("runs.list", { agentId: "research" });
    expect(forResearch.runs.map((run) => run.runId)).toEqual([research.runId]);

    const worker = await TestWorker.start(gw.url, WORKER_TOKEN, ["main", "research"], () => "done");
    for (const { runId } of [main, research]) await op.call("agent.wait", { runId, timeoutMs: 5000 });
    expect((await op.call<{ runs: RunRow[] }>("runs.list", {})).runs).toEqual([]);
    const ended = await op.call<{ runs: RunRow[] }>("runs.list", { statuses: ["ok", "error"], limit: 1 });
    expect(ended.runs.map((run) => [run.runId, run.status])).toEqual([[research.runId, "ok"]]);
    const bySession = await op.call<{ runs: RunRow[] }>("runs.list", {
      statuses: ["ok"],
      sessionKey: "main",
    });
    expect(bySession.runs.map((run) => run.sessionKey)).toEqual(["agent:main:main"]);
    const endedResearch = await op.call<{ runs: RunRow[] }>("runs.list", {
      statuses: ["ok"],
      agentId: "research",
    });
    expect(endedResearch.runs.map((run) => run.runId)).toEqual([research.runId]);
    worker.close();
  });

  it("is for operators only, and names a bad status", async () => {
    gw = await startTestGateway(CONFIG, { store: "memory" });
    const client = await TestPeer.connect(gw.url, {
      token: CLIENT_TOKEN,
      role: "client",
      sessionKey: "agent:main:webchat:dm:alice",
    });
    expect((await client.request("runs.list", {})).error?.code).toBe("FORBIDDEN");
    client.close();
    const op = await gw.operator();
    const bad = await op.request("runs.list", { statuses: ["finished"] });
    expect(bad.error?.code).toBe("INVALID_REQUEST");
    expect(bad.error?.message).toContain("statuses");
  });
});
