import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import {
  a2aConfig,
  startTestGateway,
  type TestGateway,
  TestWorker,
  WORKER_TOKEN,
} from "./testing/test-gateway";
import type { ResponseFrame } from "./testing/test-peer";
import { until } from "./testing/until";

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close().catch(() => undefined);
  gw = undefined;
});

function answerWithin(request: Promise<ResponseFrame>, ms: number): Promise<ResponseFrame | "none"> {
  return Promise.race([request, new Promise<"none">((resolve) => setTimeout(() => resolve("none"), ms))]);
}

const TARGET = "agent:research:main";

async function queuedSendAtClose(toolCallId: string | undefined) {
  gw = await startTestGateway(a2aConfig({ gateway: { shutdown: { drainMs: 3000 } } }));
  const worker = await TestWorker.start(gw.url, WORKER_TOKEN, ["main", "research"], behaviour());
  const op = await gw.operator();
  for (const key of ["main", TARGET]) {
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: key, message: "hello" });
    await op.call("agent.wait", { runId, timeoutMs: 5000 });
  }
  const before = worker.runs.length;
  // The target's lane is held by a run that never answers...
  const running = op.request("tools.invoke", {
    tool: "sessions_send",
    as: "main",
    args: { sessionKey: TARGET, message: "silent", timeoutSeconds: 60 },
  });
  await until(() => worker.runs.length > before, "the first send's run to be assigned");
  // ...so this send's run stays queued behind it (and stays queued through the stop).
  const queued = op.request("tools.invoke", {
    tool: "sessions_send",
    as: "main",
    ...(toolCallId ? { toolCallId } : {}),
    args: { sessionKey: TARGET, message: "queued behind", timeoutSeconds: 60 },
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const started = performance.now();
  const closed = await gw.gateway.close();
  const closeMs = Math.round(performance.now() - started);
  const answers = [await answerWithin(running, 2000), await answerWithin(queued, 2000)];
  worker.close();
  return { closed, closeMs, answers };
}

describe("a graceful stop answers a tools.invoke waiting on a queued run", () => {
  it("without a toolCallId", async () => {
    const { closed, answers } = await queuedSendAtClose(undefined);
    expect(answers[1]).not.toBe("none");
    expect(closed.requestsCut).toBe(0);
  }, 60_000);

  it("with a toolCallId (a tracked, cancellable call): not cut after drainMs", async () => {
    const { closed, closeMs, answers } = await queuedSendAtClose("tc-1");
    expect(closed.requestsCut).toBe(0);
    expect(closeMs).toBeLessThan(2500);
    expect(answers[1]).not.toBe("none");
  }, 60_000);
});
