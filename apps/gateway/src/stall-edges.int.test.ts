/**
 * Event-loop stalls that grow with the size of the file store. Everything runs in one Node
 * process, so one synchronous pass over every run delays every client's request. This is a liveness
 * check, not a speed figure (B7 of `pnpm bench` measures stalls): the bound is wide — each of these
 * held the loop for 0.8 s at 100k records before it was sliced, and takes a few ms per slice now.
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import type { RunRecord } from "@switchboard/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway, twoAgentConfig } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";

const RUNS = 100_000;
const MAX_BLOCK_MS = 250;
const AUDIT_RECORDS = 100_000;
const OLD = 1_700_000_000_000; // 2023: past any retention or archive window

/**
 * Runs `op` while a 2 ms interval probe watches the loop, and (with `probe`) a client sends cheap
 * requests back to back; returns the longest block seen and the probe requests' worst latency (ms).
 */
async function longestBlock<T>(
  op: () => Promise<T>,
  probe?: TestPeer,
): Promise<{ blockMs: number; probeMaxMs: number; result: T }> {
  const period = 2;
  let last = performance.now();
  let max = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    max = Math.max(max, now - last - period);
    last = now;
  }, period);
  await new Promise((resolve) => setTimeout(resolve, 20));
  last = performance.now();
  max = 0;
  let probing = probe !== undefined;
  let probeMax = 0;
  const probes = (async () => {
    while (probing && probe) {
      const sent = performance.now();
      await probe.call("agents.list", {});
      probeMax = Math.max(probeMax, performance.now() - sent);
    }
  })();
  // The first probe request is on the wire before the operation starts.
  await new Promise((resolve) => setImmediate(resolve));
  const result = await op();
  // Let the probes fire once more, so a block at the very end is seen.
  await new Promise((resolve) => setTimeout(resolve, 10));
  probing = false;
  await probes;
  clearInterval(timer);
  return { blockMs: Math.round(max), probeMaxMs: Math.round(probeMax), result };
}

function finishedSpawnRun(index: number): RunRecord {
  const runId = randomUUID();
  const createdAt = OLD + index;
  return {
    runId,
    sessionKey: `agent:main:subagent:${runId}`,
    sessionId: randomUUID(),
    agentId: "main",
    lane: "subagent",
    status: "ok",
    createdAt,
    startedAt: createdAt,
    endedAt: createdAt + 1,
    origin: "spawn",
    message: "do the thing",
    reply: "done",
    attempts: 1,
    spawn: {
      requesterKey: "agent:main:main",
      // Children already archived/deleted long ago: the sweep only has to look them up.
      childKey: `agent:main:subagent:${runId}`,
      childSessionId: randomUUID(),
      task: "do the thing",
      cleanup: "keep",
      announce: { status: "delivered", attempts: 1, idempotencyKey: `announce:${runId}` },
    },
  } as RunRecord;
}

describe("event-loop stalls on a 100k-run file store", () => {
  let gw: TestGateway;
  let operator: TestPeer;
  let prober: TestPeer;

  beforeAll(async () => {
    gw = await startTestGateway(twoAgentConfig, { store: "file" });
    // Keep the periodic jobs from running during the measurements; each test triggers its own.
    gw.gateway.retention.stop();
    const archiveTimer = (gw.gateway.flows as unknown as { archiveTimer?: NodeJS.Timeout }).archiveTimer;
    if (archiveTimer) clearInterval(archiveTimer);
    for (let start = 0; start < RUNS; start += 5000) {
      const batch: Promise<number>[] = [];
      for (let index = start; index < Math.min(RUNS, start + 5000); index++)
        batch.push(gw.gateway.store.runs.put(finishedSpawnRun(index)));
      await Promise.all(batch);
    }
    for (let start = 0; start < AUDIT_RECORDS; start += 5000) {
      const batch: Promise<unknown>[] = [];
      for (let index = start; index < Math.min(AUDIT_RECORDS, start + 5000); index++)
        batch.push(
          gw.gateway.audit.append({
            kind: "delivery",
            actor: "agent:main:main",
            data: { n: index },
          } as never),
        );
      await Promise.all(batch);
    }
    operator = await gw.operator();
    prober = await gw.operator();
  }, 120_000);

  afterAll(async () => {
    await gw?.close();
  });

  it("audit.verify does not hold the loop over 100k audit records", async () => {
    const { blockMs, result } = await longestBlock(
      () => operator.call<{ ok: boolean; entries: number }>("audit.verify", {}),
      prober,
    );
    expect(result.ok).toBe(true);
    expect(result.entries).toBeGreaterThanOrEqual(AUDIT_RECORDS);
    expect(blockMs).toBeLessThan(MAX_BLOCK_MS);
  }, 30_000);

  it("the sub-agent archive sweep does not hold the loop over 100k ended spawn runs", async () => {
    const { blockMs, result } = await longestBlock(() => gw.gateway.flows.archiveSweep(), prober);
    expect(result).toBe(0);
    expect(blockMs).toBeLessThan(MAX_BLOCK_MS);
  });

  it("a retention pass pruning 100k ended runs never holds the loop", async () => {
    const { blockMs, result } = await longestBlock(() => gw.gateway.retention.runOnce());
    expect(result.runs).toBe(RUNS);
    expect(blockMs).toBeLessThan(MAX_BLOCK_MS);
  }, 60_000);
});
