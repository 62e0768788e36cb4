import { type AgentWorker, type RunHandler, serve } from "@switchboard/client";
import { afterEach, describe, expect, it } from "vitest";
import { deferred } from "./testing/deferred";
import { a2aConfig, startTestGateway, type TestGateway, WORKER_TOKEN } from "./testing/test-gateway";
import { until } from "./testing/until";

// An SDK worker stopping while its gateway stays up: a run handed to it during its grace (a slot
// freed as one of its runs ended) was never started, so it must not end as an error of the
// worker's: the connection's close hands it back, and the gateway gives it to another worker.

let gw: TestGateway | undefined;
const workers: AgentWorker[] = [];
afterEach(async () => {
  await Promise.all(workers.splice(0).map((worker) => worker.stop()));
  await gw?.close();
  gw = undefined;
});

async function startWorker(url: string, concurrency: number, handler: RunHandler): Promise<AgentWorker> {
  const worker = await serve({ url, token: WORKER_TOKEN }, ["main"], handler, { concurrency });
  workers.push(worker);
  return worker;
}

describe("an SDK agent worker stopping with its gateway up", () => {
  it("hands back a run assigned during its stop: another worker of the agent runs it", async () => {
    gw = await startTestGateway(a2aConfig());
    const op = await gw.operator();
    const gates = new Map(["a1", "a2", "b"].map((name) => [name, deferred<void>()]));
    const seenByA: string[] = [];
    const a = await startWorker(gw.url, 2, async (run) => {
      seenByA.push(run.input.message);
      await gates.get(run.input.message)?.promise;
      return { reply: `A: ${run.input.message}` };
    });
    const send = async (key: string, message: string) =>
      (await op.call<{ runId: string }>("chat.send", { sessionKey: `agent:main:cron:${key}`, message }))
        .runId;
    const a1 = await send("a1", "a1");
    const a2 = await send("a2", "a2");
    await until(() => a.activeRuns === 2, "worker A to hold two runs");
    const b = await startWorker(gw.url, 1, async (run) => {
      await gates.get(run.input.message)?.promise;
      return { reply: `B: ${run.input.message}` };
    });
    const bRun = await send("b", "b");
    await until(() => b.activeRuns === 1, "worker B to hold its run");
    // Every slot is taken: this one waits at the gateway.
    const third = await send("third", "third");

    const stopping = a.stop();
    // a1 ends during A's grace: its slot frees and the gateway hands "third" to the stopping A.
    gates.get("a1")!.resolve();
    expect(await op.call("agent.wait", { runId: a1, timeoutMs: 5000 })).toMatchObject({ status: "ok" });
    await new Promise((resolve) => setTimeout(resolve, 300));
    gates.get("a2")!.resolve();
    await stopping;
    expect(await op.call("agent.wait", { runId: a2, timeoutMs: 5000 })).toMatchObject({ status: "ok" });
    expect(seenByA).toEqual(["a1", "a2"]);

    // Handed back at A's close, it waits for B's free slot.
    gates.get("b")!.resolve();
    expect(await op.call("agent.wait", { runId: bRun, timeoutMs: 5000 })).toMatchObject({ status: "ok" });
    expect(await op.call("agent.wait", { runId: third, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "B: third",
    });
  }, 30_000);
});
