import type { ConfigInput } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";

const WORKER_TOKEN = "worker-token-0123456789";
let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

/** A gateway with one raw worker, holding the run of a `chat.send` to main. */
async function runAssignedToRawWorker(config: ConfigInput, store: "memory" | "file") {
  gw = await startTestGateway(
    { ...config, auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] } },
    { store },
  );
  const worker = await TestPeer.connect(gw.url, { token: WORKER_TOKEN, role: "agent", agents: ["main"] });
  const operator = await gw.operator();
  const { runId } = await operator.call<{ runId: string }>("chat.send", {
    sessionKey: "main",
    message: "hi",
  });
  await worker.waitForEvent((event) => event.event === "run.assigned");
  return { worker, operator, runId };
}

describe("a raw worker's reply over the frame limit", () => {
  it("is refused with its request id and ends the run at once, naming the limit", async () => {
    const { worker, operator, runId } = await runAssignedToRawWorker({}, "memory");

    const refused = await worker.request("run.complete", { runId, reply: "x".repeat(1_200_000) });
    expect(refused.error?.code).toBe("PAYLOAD_TOO_LARGE");
    const ended = await operator.call<{ status: string; error?: string }>("agent.wait", {
      runId,
      timeoutMs: 5000,
    });
    // Ended now, not at the run's 600 s deadline (the wait above gives up after 5 s).
    expect(ended.status).toBe("error");
    expect(ended.error).toContain("limits.maxPayload");
    // The worker is still connected and can take the next run.
    const next = await operator.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "again",
    });
    await worker.waitForEvent(
      (event) => event.event === "run.assigned" && (event.payload as { runId?: string }).runId === next.runId,
    );
    worker.close();
  });

  it("with a raised maxPayload, a reply past the store's message limit is refused naming reply, not acknowledged", async () => {
    const { worker, operator, runId } = await runAssignedToRawWorker(
      { gateway: { limits: { maxPayload: 4 * 1024 * 1024 } } },
      "file",
    );
    // Before: answered {} and reported `ok` while the store refused the reply's entry (it was lost).
    const refused = await worker.request("run.complete", { runId, reply: "r".repeat(2 * 1024 * 1024) });
    expect(refused.error?.code).toBe("INVALID_REQUEST");
    expect(refused.error?.message).toContain("reply: must be at most 1048576 bytes of UTF-8");
    // The run is still the worker's: a reply that fits completes it, and it is in the transcript.
    expect((await worker.request("run.complete", { runId, reply: "short" })).ok).toBe(true);
    expect(await operator.call("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "short",
    });
    const history = await operator.call<{ messages: Array<{ role: string }> }>("sessions.history", {
      sessionKey: "main",
    });
    expect(history.messages.map((message) => message.role)).toEqual(["user", "assistant"]);
    worker.close();
  });
});
