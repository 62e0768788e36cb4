import { type AgentWorker, serve } from "@switchboard/client";
import { afterEach, expect, it } from "vitest";
import { deferred } from "./testing/deferred";
import { a2aConfig, startTestGateway, type TestGateway, WORKER_TOKEN } from "./testing/test-gateway";
import { until } from "./testing/until";

// AgentWorker.stop "declines" a run handed to it during its stop (holds it unreported) so that
// "closing the connection hands it back" — "failing it would end for good a run that never began".
// With the usual deployment (one worker of the agent, being restarted while the gateway stays up),
// the gateway's removeWorker finds no other worker and ends the run `error` ("worker disconnected"):
// a run that was queued at the gateway, and would have waited for the next worker, is lost because
// the stopping worker's freed slot pulled it in.

let gw: TestGateway | undefined;
const workers: AgentWorker[] = [];
afterEach(async () => {
  await Promise.all(workers.splice(0).map((worker) => worker.stop()));
  await gw?.close();
  gw = undefined;
});

it("a queued run is not lost when the only worker stops (it runs on the next worker)", async () => {
  gw = await startTestGateway(a2aConfig());
  const op = await gw.operator();
  const gate = deferred<void>();
  const seen: string[] = [];
  const a = await serve(
    { url: gw.url, token: WORKER_TOKEN },
    ["main"],
    async (run) => {
      seen.push(run.input.message);
      if (run.input.message === "first") await gate.promise;
      return { reply: `A: ${run.input.message}` };
    },
    { concurrency: 1 },
  );
  workers.push(a);
  const send = async (key: string, message: string) =>
    (await op.call<{ runId: string }>("chat.send", { sessionKey: `agent:main:cron:${key}`, message })).runId;
  const first = await send("one", "first");
  await until(() => a.activeRuns === 1, "A to run the first run");
  // Waits at the gateway: A's only slot is taken.
  const second = await send("two", "second");

  const stopping = a.stop();
  // The first run ends within A's grace: its slot frees and the gateway hands "second" to A.
  gate.resolve();
  expect(await op.call("agent.wait", { runId: first, timeoutMs: 5000 })).toMatchObject({ status: "ok" });
  await stopping;
  workers.splice(0);

  // The next worker (the restarted one) connects.
  const b = await serve(
    { url: gw.url, token: WORKER_TOKEN },
    ["main"],
    async (run) => ({
      reply: `B: ${run.input.message}`,
    }),
    { concurrency: 1 },
  );
  workers.push(b);
  const result = await op.call<{ status: string; reply?: string; error?: string }>("agent.wait", {
    runId: second,
    timeoutMs: 5000,
  });

  expect(result).toMatchObject({ status: "ok", reply: "B: second" });
}, 30_000);
