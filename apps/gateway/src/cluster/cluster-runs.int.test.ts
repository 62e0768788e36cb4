import { randomUUID } from "node:crypto";
import type { RunRecord, SessionEntry } from "@switchboard/core";
import { type Cluster, listenerApplicationName, openCluster, openPostgresStore } from "@switchboard/store-pg";
import {
  adminQuery,
  dropTestSchema,
  pgUnavailableReason,
  testPgUrl,
  testSchemaName,
} from "@switchboard/store-pg/testing";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { EventBus } from "../event-bus";
import { ClusterRuns, type LocalRuns, runChannel } from "./cluster-runs";

/**
 * `ClusterRuns` on a real PostgreSQL schema, with the in-process bus standing in for the cluster's
 * event log (its delivery order is what matters here): what an instance asks of the database for
 * runs it hands to the cluster's queue, and when it listens for queued runs.
 */

const unavailable = await pgUnavailableReason();
if (unavailable !== undefined && process.env.SWITCHBOARD_REQUIRE_PG !== "1")
  console.warn(`[cluster-runs.int.test] skipped: no PostgreSQL (${unavailable})`);

const silent = pino({ level: "silent" });
const opened: Array<{ cluster: Cluster; runs: ClusterRuns; schema: string; close?: () => Promise<void> }> =
  [];

afterEach(async () => {
  for (const { cluster, runs, schema, close } of opened.splice(0)) {
    runs.stop();
    await close?.();
    await cluster.close({ graceful: false });
    await dropTestSchema(schema);
  }
});

/**
 * The scheduler's side: which agents have workers and free slots here; every adoption is refused
 * unless `accept` takes it.
 */
class FakeLocal implements LocalRuns {
  accept: ((record: RunRecord) => boolean) | undefined;
  agents: string[] = [];
  free: string[] = [];
  /** Records offered to `adopt`, as offered (refused: the slot was taken meanwhile). */
  readonly refused: RunRecord[] = [];
  /** The session rows offered with them (undefined: none read; `{ session: undefined }`: gone). */
  readonly sessions: Array<{ session: SessionEntry | undefined } | undefined> = [];
  connectedAgents(): string[] {
    return this.agents;
  }
  agentsWithFreeSlot(): string[] {
    return this.free;
  }
  adopt(record: RunRecord, options: { session?: { session: SessionEntry | undefined } } = {}): boolean {
    if (this.accept) return this.accept(record);
    this.refused.push(structuredClone(record));
    this.sessions.push(options.session);
    this.free = [];
    return false;
  }
}

/**
 * An instance on a fresh schema. Its run reads go to a map that counts them, or with `postgres` to
 * the store on the same schema (opened first, so the claims return and start records).
 */
async function start(
  options: { postgres?: boolean; getRun?: (runId: string) => Promise<RunRecord | undefined> } = {},
) {
  const schema = testSchemaName("sbclruns");
  const postgres = options.postgres
    ? await openPostgresStore({ url: testPgUrl(), schema, pool: { max: 2 } })
    : undefined;
  const applicationName = `sb-clruns-${randomUUID().slice(0, 8)}`;
  const cluster = await openCluster({
    url: testPgUrl(),
    schema,
    instanceId: randomUUID(),
    logger: silent,
    applicationName,
  });
  const bus = new EventBus();
  const reads: string[] = [];
  const stored = new Map<string, RunRecord>();
  const counted = {
    runs: {
      get: async (runId: string) => {
        reads.push(runId);
        return options.getRun ? options.getRun(runId) : stored.get(runId);
      },
    },
  } as unknown as ConstructorParameters<typeof ClusterRuns>[1];
  const runs = new ClusterRuns(cluster, postgres ?? counted, bus, silent);
  const local = new FakeLocal();
  opened.push({ cluster, runs, schema, ...(postgres ? { close: () => postgres.close() } : {}) });
  await runs.start(local);
  return { cluster, runs, bus, reads, stored, local, schema, postgres, applicationName };
}

function queuedRun(): RunRecord {
  return {
    runId: randomUUID(),
    sessionKey: "agent:main:t",
    sessionId: randomUUID(),
    agentId: "main",
    lane: "nested",
    status: "queued",
    createdAt: Date.now(),
    timeoutSeconds: 30,
    origin: "send",
    message: "hello",
    attempts: 0,
  };
}

function publishEnd(bus: EventBus, record: RunRecord, reply: string): void {
  bus.publish(
    "run.ended",
    {
      runId: record.runId,
      sessionKey: record.sessionKey,
      status: "ok",
      reply,
      startedAt: record.createdAt,
      endedAt: Date.now(),
    },
    { sessionKey: record.sessionKey, agentId: record.agentId },
  );
}

/** Server processes of the instance's listener connection (its events and, with workers, its runs). */
async function listeners(applicationName: string): Promise<number> {
  const found = await adminQuery<{ count: string }>(
    "SELECT count(*) AS count FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
    [listenerApplicationName(applicationName)],
  );
  return Number(found.rows[0]!.count);
}

describe.skipIf(unavailable !== undefined && process.env.SWITCHBOARD_REQUIRE_PG !== "1")(
  "ClusterRuns",
  () => {
    it("answers a wait on a run it handed off from the end it heard, without reading the run", async () => {
      const { runs, bus, reads, stored } = await start();
      const early = queuedRun();
      stored.set(early.runId, early);
      await runs.handOff(early, undefined);
      // Ended before anyone waited: the end was heard since the hand-off.
      publishEnd(bus, early, "first");
      expect(await runs.wait(early.runId, 5_000)).toMatchObject({
        runId: early.runId,
        status: "ok",
        reply: "first",
      });

      const late = queuedRun();
      stored.set(late.runId, late);
      await runs.handOff(late, undefined);
      const waiting = runs.wait(late.runId, 5_000);
      publishEnd(bus, late, "second");
      expect(await waiting).toMatchObject({ runId: late.runId, status: "ok", reply: "second" });
      expect(reads).toEqual([]);

      // A run this instance did not hand off is read once: it may have ended before the wait.
      const elsewhere = { ...queuedRun(), status: "ok" as const, reply: "stored", endedAt: Date.now() };
      stored.set(elsewhere.runId, elsewhere);
      expect(await runs.wait(elsewhere.runId, 5_000)).toMatchObject({ status: "ok", reply: "stored" });
      expect(reads).toEqual([elsewhere.runId]);
    });

    it("puts a run it claimed but could not adopt back in the queue, stored as it was", async () => {
      const { cluster, runs, local, postgres } = await start({ postgres: true });
      const store = postgres!;
      const record = queuedRun();
      await store.runs.put(record);
      const session: SessionEntry = {
        key: record.sessionKey,
        sessionId: record.sessionId,
        agentId: "main",
        createdAt: 1_700_000_000_000,
        updatedAt: 1_700_000_000_000,
        taint: "PUBLIC",
        clearance: "INTERNAL",
      };
      await store.sessions.put(session);
      await cluster.lanes.enqueue(`${record.sessionKey}|nested`, record.runId, { agentId: "main" });
      // One free slot, taken by the time the claim comes back.
      local.agents = ["main"];
      local.free = ["main"];
      runs.pull();
      await expect.poll(() => local.refused.length, { timeout: 5_000 }).toBe(1);
      await expect
        .poll(() => cluster.lanes.next(`${record.sessionKey}|nested`), { timeout: 5_000 })
        .toBe(record.runId);
      // The claim had stored it `running` (what the refused adoption was offered)…
      expect(local.refused).toHaveLength(1);
      expect(local.refused[0]).toMatchObject({ status: "running", attempts: 1 });
      // The claim read the session's row as well: the scheduler checks and assigns with it.
      expect(local.sessions).toEqual([{ session: expect.objectContaining(session) }]);
      // …and the refusal stored it back as it was before the claim.
      expect(await store.runs.get(record.runId)).toEqual(record);
    });

    it("claims runs by the names their wake-ups give, none found missing, while its runs end", async () => {
      const { cluster, runs, local, stored, schema } = await start();
      // Every claim this instance makes, and those that found nothing to take.
      let claims = 0;
      let empty = 0;
      const claimNext = cluster.lanes.claimNext.bind(cluster.lanes);
      cluster.lanes.claimNext = async (agents, options) => {
        claims += 1;
        const claim = await claimNext(agents, options);
        if (!claim) empty += 1;
        return claim;
      };
      // Four worker slots; each run ends a few milliseconds after its adoption, freeing its slot
      // and its lane (a released lane used to send a claim of the queue's head after runs that
      // wake-ups had named already).
      const adopted: string[] = [];
      let running = 0;
      local.agents = ["main"];
      local.free = ["main"];
      local.accept = (record) => {
        adopted.push(record.runId);
        running += 1;
        if (running >= 4) local.free = [];
        setTimeout(() => {
          running -= 1;
          local.free = ["main"];
          void runs.release(record);
        }, 3);
        return true;
      };
      runs.workersChanged();
      await expect
        .poll(() => cluster.coordination.listener.listening(runChannel(schema)), { timeout: 5_000 })
        .toBe(true);
      const queued: string[] = [];
      const began = Date.now();
      // Eight callers, each queuing its next run once its last one was adopted.
      await Promise.all(
        Array.from({ length: 8 }, async (_, caller) => {
          for (let n = 0; n < 10; n++) {
            const record = { ...queuedRun(), sessionKey: `agent:main:c${caller}-${n}` };
            stored.set(record.runId, record);
            queued.push(record.runId);
            await cluster.lanes.enqueue(`${record.sessionKey}|nested`, record.runId, {
              agentId: "main",
              notify: runChannel(schema),
            });
            await expect.poll(() => adopted.includes(record.runId), { timeout: 5_000 }).toBe(true);
          }
        }),
      );
      expect([...adopted].sort()).toEqual([...queued].sort());
      // One claim per run; only the one made at start and those of the one-second poll (a claim of
      // the queue's heads, and a named one for a wake-up it met) may find nothing. Before, a third
      // of all claims did (24–27 here).
      const polls = Math.ceil((Date.now() - began) / 1000);
      expect(empty).toBeLessThanOrEqual(1 + 2 * polls);
      expect(claims).toBeLessThanOrEqual(queued.length + 1 + 2 * polls);
    });

    it("counts the runs it handed off against its limits until it hears their end", async () => {
      const { runs, bus, schema } = await start();
      const first = queuedRun();
      const second = { ...queuedRun(), sessionKey: "agent:main:u", message: "hi" };
      await runs.handOff(first, 30_000);
      await runs.handOff(second, undefined);
      expect(runs.queuedLoad(first.sessionKey)).toEqual({ sessionRuns: 1, runs: 2, bytes: 7 });
      // Their deadlines are on the database's clock: `now()` plus the time each had left.
      const deadlines = await adminQuery<{ run_id: string; left: number | null; finite: boolean }>(
        `SELECT run_id, CASE WHEN isfinite(deadline_at) THEN extract(epoch FROM deadline_at - now())::float8 END AS left,
           isfinite(deadline_at) AS finite
         FROM "${schema}".run_queue`,
      );
      const byRun = new Map(deadlines.rows.map((row) => [row.run_id, row]));
      expect(byRun.get(first.runId)!.left).toBeGreaterThan(25);
      expect(byRun.get(first.runId)!.left).toBeLessThanOrEqual(30);
      expect(byRun.get(second.runId)!.finite).toBe(false);
      publishEnd(bus, first, "done");
      expect(runs.queuedLoad(first.sessionKey)).toEqual({ sessionRuns: 0, runs: 1, bytes: 2 });
      publishEnd(bus, second, "done");
      expect(runs.queuedLoad(second.sessionKey)).toEqual({ sessionRuns: 0, runs: 0, bytes: 0 });
    });

    it("answers UNAVAILABLE at the wait's time when its first read of the run gets no answer", async () => {
      // A store that never answers (a stalled database: no reply, no error).
      const { runs } = await start({ getRun: () => new Promise(() => undefined) });
      const began = performance.now();
      await expect(runs.wait(randomUUID(), 2_500)).rejects.toMatchObject({
        code: "UNAVAILABLE",
        retryable: true,
      });
      const took = performance.now() - began;
      expect(took).toBeGreaterThanOrEqual(2_400);
      expect(took).toBeLessThan(4_000);
    });

    it("listens for queued runs only while it has workers, on the event log's connection", async () => {
      const { runs, local, schema, cluster, applicationName } = await start();
      const listener = cluster.coordination.listener;
      const channel = runChannel(schema);
      expect(listener.listening(channel)).toBe(false);
      expect(await listeners(applicationName)).toBe(1);
      local.agents = ["main"];
      runs.workersChanged();
      await expect.poll(() => listener.listening(channel), { timeout: 5_000 }).toBe(true);
      // The run wake-ups share the instance's one listener connection with its events.
      expect(await listeners(applicationName)).toBe(1);
      local.agents = [];
      runs.workersChanged();
      await expect.poll(() => listener.channels().includes(channel), { timeout: 5_000 }).toBe(false);
      expect(listener.listening(channel)).toBe(false);
    });
  },
);
