import { MAX_INPUT_MESSAGE_BYTES } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { DEFAULT_REPLAY_BYTES, EventBus } from "../event-bus";
import { startTestGateway, type TestGateway } from "../testing/test-gateway";
import { type EventFrame, TestPeer } from "../testing/test-peer";

/**
 * One worker streaming ordinary `run.progress` text deltas, each under the frame limit, as fast as
 * it can: the replay window used to keep 16 384 of them whatever their size, and the gateway died of
 * heap exhaustion. Now the window stays within its byte budget, and a client resuming from before
 * what it dropped is told it missed events.
 */
const WORKER = "worker-token-0123456789";
let gw: TestGateway | undefined;
const peers: TestPeer[] = [];

afterEach(async () => {
  for (const peer of peers.splice(0)) peer.close();
  await gw?.close();
  gw = undefined;
});

async function connect(options: Parameters<typeof TestPeer.connect>[1]): Promise<TestPeer> {
  const peer = await TestPeer.connect(gw!.url, options);
  peers.push(peer);
  return peer;
}

/** A gateway (memory store, `limits` set) with an operator and one raw worker for main. */
async function gatewayWithWorker(limits: { maxReplayBytes?: number } = {}) {
  gw = await startTestGateway(
    { auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] }, gateway: { limits } },
    { store: "memory" },
  );
  const op = await gw.operator();
  peers.push(op);
  const worker = await connect({ token: WORKER, role: "agent", agents: ["main"] });
  return { op, worker };
}

/** A run on main, once the worker holds it. */
async function assignedRun(op: TestPeer, worker: TestPeer): Promise<string> {
  const { runId } = await op.call<{ runId: string }>("agent", { sessionKey: "main", message: "stream" });
  await worker.waitForEvent((event) => event.event === "run.assigned");
  return runId;
}

describe("a worker flooding run.progress", () => {
  it("keeps the replay window within its byte budget; a client resuming past it hears it missed events", async () => {
    const { op, worker } = await gatewayWithWorker();
    // A client following everything, which goes away before the flood and comes back after it.
    const away = await connect({ token: gw!.token, role: "operator" });
    const cursor = (await away.call<{ seq: number }>("events.subscribe", {})).seq;
    away.close();

    const runId = await assignedRun(op, worker);

    // 150 deltas of 500 000 characters: 75 MB, more than the default 64 MiB budget, far under the
    // 16 384-event count (the only bound before, at which this gateway held ~8 GB).
    const delta = "d".repeat(500_000);
    for (let sent = 0; sent < 150; sent += 10) {
      const answers = await Promise.all(
        Array.from({ length: 10 }, () =>
          worker.request("run.progress", { runId, kind: "text-delta", text: delta }),
        ),
      );
      expect(answers.every((answer) => answer.ok)).toBe(true);
    }
    const bus = gw!.gateway.bus as EventBus;
    expect(bus).toBeInstanceOf(EventBus);
    expect(bus.window.bytes).toBeLessThanOrEqual(DEFAULT_REPLAY_BYTES);

    const back = await connect({ token: gw!.token, role: "operator" });
    const answer = await back.call<{ seq: number; missed?: { after: number; before: number } }>(
      "events.subscribe",
      { after: cursor },
    );
    expect(answer.missed?.after).toBe(cursor);
    expect(answer.missed!.before).toBeGreaterThan(cursor + 1);
    // The newest events were replayed (before the answer), nothing from below the gap, and no more
    // than the client's send buffer takes: it is told what it missed rather than dropped as slow.
    const replayed = back.events.filter((event: EventFrame) => event.event === "run.progress");
    expect(replayed.length).toBeGreaterThan(0);
    expect(replayed.length).toBeLessThan(150);
    expect(Math.min(...back.events.map((event) => event.seq))).toBeGreaterThanOrEqual(answer.missed!.before);
    expect(back.events.at(-1)!.seq).toBe(bus.replay(cursor, () => true).at(-1)!.seq);
    expect(back.closed).toBeUndefined();

    // The run, the worker and the gateway carry on.
    expect((await worker.request("run.complete", { runId, reply: "done" })).ok).toBe(true);
    expect(await op.call("agent.wait", { runId, timeoutMs: 5_000 })).toMatchObject({ status: "ok" });
  }, 60_000);

  it("holds no more than gateway.limits.maxReplayBytes", async () => {
    const { op, worker } = await gatewayWithWorker({ maxReplayBytes: 2 * 1024 * 1024 });
    const runId = await assignedRun(op, worker);
    for (let i = 0; i < 10; i++)
      await worker.call("run.progress", { runId, kind: "text-delta", text: "d".repeat(500_000) });
    const { window } = gw!.gateway.bus as EventBus;
    expect(window.bytes).toBeLessThanOrEqual(2 * 1024 * 1024);
    expect(window.events).toBeLessThanOrEqual(4);
  });

  it("refuses a text delta over the input text limit, naming the field and the limit", async () => {
    const { op, worker } = await gatewayWithWorker();
    const runId = await assignedRun(op, worker);
    const before = gw!.gateway.bus.currentSeq;

    const refused = await worker.request("run.progress", {
      runId,
      kind: "text-delta",
      text: "é".repeat(MAX_INPUT_MESSAGE_BYTES / 2 + 1),
    });
    expect(refused.error?.code).toBe("INVALID_REQUEST");
    expect(refused.error?.message).toContain("text");
    expect(refused.error?.message).toContain(`${MAX_INPUT_MESSAGE_BYTES} bytes`);
    // Nothing was published for it; a delta within the limit still goes through.
    expect(gw!.gateway.bus.currentSeq).toBe(before);
    expect((await worker.request("run.progress", { runId, kind: "text-delta", text: "ok" })).ok).toBe(true);
  });
});
