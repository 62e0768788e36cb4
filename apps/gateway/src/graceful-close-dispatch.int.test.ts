import { afterEach, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import {
  a2aConfig,
  startTestGateway,
  type TestGateway,
  TestWorker,
  WORKER_TOKEN,
} from "./testing/test-gateway";
import { until } from "./testing/until";

// beginClose: "no run handed to a worker any more". A worker that goes during the stop window
// (between beginClose and close, where `switchboard up` stops its worker) has its running run
// reassigned — dispatched — to another connected worker anyway (RunScheduler.removeWorker ignores
// `stopping`), which then starts work the close ends a moment later.

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close().catch(() => undefined);
  gw = undefined;
});

it("after beginClose, a departing worker's run is not dispatched to another worker", async () => {
  gw = await startTestGateway(a2aConfig());
  const w1 = await TestWorker.start(gw.url, WORKER_TOKEN, ["main"], behaviour(), { concurrency: 1 });
  const op = await gw.operator();
  const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "silent" });
  await until(() => w1.runs.length === 1, "the run assigned to w1");
  const w2 = await TestWorker.start(gw.url, WORKER_TOKEN, ["main"], behaviour(), { concurrency: 1 });

  await gw.gateway.beginClose();
  w1.close();
  await new Promise((resolve) => setTimeout(resolve, 1000));

  expect(w2.runs.map((run) => run.runId)).not.toContain(runId);
  w2.close();
}, 30_000);
