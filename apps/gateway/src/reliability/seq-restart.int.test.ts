import type { ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type AgentWorker, connect, type SwitchboardClient, serve } from "@switchboard/client";
import { afterAll, describe, expect, it } from "vitest";
import { type ChildGateway, startChildGateway } from "../testing/child-gateway";

/**
 * issue 16 item 1: a gateway killed with SIGKILL while several thousand events per second stream
 * through it. After the restart the event seq must neither go back nor repeat: the reconnected
 * worker still receives (and completes) new runs, and a subscriber that resumes with its last seq
 * misses nothing the new gateway publishes and sees no number twice.
 */

const gatewayRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const childScript = join(gatewayRoot, "test", "seq-gateway.mjs");
const distEntry = join(gatewayRoot, "dist", "index.js");
const built = existsSync(distEntry) && readFileSync(distEntry, "utf8").includes("Gateway");
if (!built) console.warn(`[seq-restart.int.test] skipped: ${distEntry} is missing; build the gateway first`);

const FAST_RECONNECT = { initialDelayMs: 20, maxDelayMs: 100 } as const;
const STREAMING_RUNS = 12;
const KILL_AFTER_EVENTS = 20_000;
const ROUNDS = 2;
const NEW_RUNS = 10;

type Child = ChildGateway;

const children = new Set<ChildProcess>();
const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  for (const child of children) child.kill("SIGKILL");
});

function startChild(dataDir: string, port = 0): Promise<Child> {
  return startChildGateway(childScript, [dataDir, String(port)], children);
}

/** Every event an operator subscription delivered, in delivery order. */
function record(client: SwitchboardClient): Array<{ seq: number; event: string; runId?: string }> {
  const seen: Array<{ seq: number; event: string; runId?: string }> = [];
  void (async () => {
    for await (const event of client.events({ highWaterMark: 1_000_000 })) {
      const runId = (event.payload as { runId?: unknown }).runId;
      seen.push({ seq: event.seq, event: event.event, ...(typeof runId === "string" ? { runId } : {}) });
    }
  })().catch(() => undefined);
  return seen;
}

async function until(check: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 10));
  }
}

describe.skipIf(!built)("event seq across kill -9 under streaming load", () => {
  it("never goes back or repeats: the reconnected worker completes new runs, a resuming subscriber misses nothing", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "switchboard-seq-"));
    cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
    let child = await startChild(dataDir);
    const port = Number(new URL(child.url).port);
    const token = child.token;
    let streaming = true;

    // The worker streams one event per delta, as fast as the gateway takes them, until told to stop;
    // after that it answers at once.
    const worker: AgentWorker = await serve(
      { url: child.url, token, reconnect: FAST_RECONNECT, requestTimeoutMs: 5_000 },
      ["main"],
      async (run, context) => {
        while (streaming && !context.signal.aborted && run.input.message.startsWith("stream")) {
          await context.progress("text-delta", { text: "." });
        }
        return { reply: `done: ${run.input.message}` };
      },
      { concurrency: STREAMING_RUNS + NEW_RUNS, progressIntervalMs: 0 },
    );
    cleanups.push(() => worker.stop());
    const subscriber = await connect({ url: child.url, token, role: "operator", reconnect: FAST_RECONNECT });
    cleanups.push(() => subscriber.close());
    const seen = record(subscriber);
    await subscriber.subscribe();

    for (let round = 0; round < ROUNDS; round++) {
      const where = `round ${round}`;
      streaming = true;
      const operator = await connect({
        url: child.url,
        token,
        role: "operator",
        reconnect: { enabled: false },
      });
      for (let i = 0; i < STREAMING_RUNS; i++) {
        await operator.chat.send({
          sessionKey: `agent:main:cron:stream-${round}-${i}`,
          message: `stream ${i}`,
        });
      }
      const before = seen.length;
      const started = Date.now();
      await until(() => seen.length - before >= KILL_AFTER_EVENTS, `${where}: streaming load`);
      const rate = Math.round(((seen.length - before) * 1000) / (Date.now() - started));
      console.info(`[seq-restart] ${where}: ${rate} events/s before the kill`);
      const lastSeqBeforeKill = subscriber.lastEventSeq!;
      child.process.kill("SIGKILL");
      await child.exited;
      await operator.close();
      streaming = false;

      child = await startChild(dataDir, port);
      await subscriber.ready();
      await worker.client.ready();
      const afterRestart = seen.length;

      // New runs reach the reconnected worker and complete (none dropped as "already seen").
      const client = await connect({
        url: child.url,
        token,
        role: "operator",
        reconnect: { enabled: false },
      });
      const runIds: string[] = [];
      for (let i = 0; i < NEW_RUNS; i++) {
        const { runId } = await client.chat.send({
          sessionKey: `agent:main:cron:new-${round}-${i}`,
          message: `new ${i}`,
        });
        runIds.push(runId);
      }
      for (const runId of runIds) {
        await expect(
          client.agent.wait({ runId, timeoutMs: 10_000 }),
          `${where}: run ${runId}`,
        ).resolves.toMatchObject({
          status: "ok",
        });
      }

      // The live subscriber saw every new run end, with seqs above everything before the kill.
      await until(
        () =>
          runIds.every((runId) => seen.some((event) => event.event === "run.ended" && event.runId === runId)),
        `${where}: run.ended of the new runs at the live subscriber`,
      );
      expect(seen[afterRestart]!.seq, `${where}: first seq after the restart`).toBeGreaterThan(
        lastSeqBeforeKill,
      );

      // A subscriber resuming in a new process from the last seq it stored gets the new epoch's events.
      const resumed = await connect({
        url: child.url,
        token,
        role: "operator",
        reconnect: { enabled: false },
      });
      const replayed = record(resumed);
      await resumed.subscribe({ after: lastSeqBeforeKill });
      await until(
        () =>
          runIds.every((runId) =>
            replayed.some((event) => event.event === "run.ended" && event.runId === runId),
          ),
        `${where}: run.ended of the new runs replayed after ${lastSeqBeforeKill}`,
      );
      expect(replayed.every((event) => event.seq > lastSeqBeforeKill)).toBe(true);
      await resumed.close();
      await client.close();
    }

    // Over the whole life, through both kills: strictly increasing, so no number repeats.
    const out = seen.findIndex((event, index) => index > 0 && event.seq <= seen[index - 1]!.seq);
    expect(out, out >= 0 ? `seq ${seen[out]!.seq} after ${seen[out - 1]!.seq}` : "").toBe(-1);
  }, 60_000);
});
