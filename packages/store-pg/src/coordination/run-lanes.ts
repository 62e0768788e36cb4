import {
  isSwitchboardError,
  type RunRecord,
  type RunRegistryStore,
  type SessionEntry,
  SwitchboardError,
} from "@switchboard/core";
import { isUniqueViolation } from "../errors";
import type { Coordination } from "./context";
import type { LostRun } from "./membership";

/** A run this instance now holds: the lane is its until `release`. */
export interface RunClaim {
  runId: string;
  laneKey: string;
  agentId: string;
  /** Times it was reassigned after losing an instance (0: first try). */
  attempts: number;
  /** The run's record as stored when it was claimed (read in the claim's own statement). */
  record?: RunRecord;
  /**
   * The claim also stored the run `running` (`claimNext` with `startAt`, the run found `queued`):
   * `record` is that stored record, its `attempts` counted and `startedAt` set (kept if it had one).
   */
  started?: boolean;
  /**
   * The session row of the run's `sessionKey` as it was at the claim (with `record`; undefined
   * when the session is gone): what the claimer would read right after to check and assign it.
   */
  session?: SessionEntry;
  /**
   * Milliseconds left before the run's deadline, as the database counts them at the claim (its
   * `deadline_at` minus its `now()`; negative once past). Absent: the run has no timeout, or it was
   * queued by an instance that did not record its deadline.
   */
  deadlineInMs?: number;
}

/**
 * The time a run has left, as its instance counts it: `deadlineInMs`. The database turns it into a
 * deadline on its own clock (`now()` plus that) where the run is first queued or claimed; from then
 * on the deadline moves with the run between queue and claims, and whoever needs the time left asks
 * the database, never another instance's clock. Absent: no timeout ('infinity').
 */
export interface RunDeadline {
  deadlineInMs?: number | undefined;
}

/**
 * Backs the gateway's `RunLanes` port (and the cluster part of `ActiveRuns`: who holds which run)
 * with two tables: `run_queue` (runs waiting, FIFO per lane) and `run_claims` (the run holding each
 * lane, UNIQUE per lane: one active run per lane cluster-wide, named with the holding instance).
 *
 * What changes for callers: every operation is async; `claimNext` replaces the pair `next` +
 * `claim` for the common case (the head of a lane whose agent this instance has a free worker
 * for, taken with `FOR UPDATE SKIP LOCKED` so instances never wait on each other); `claim` of a
 * specific run answers false when another instance holds the lane; a claim only exists while the
 * instance's membership lease is renewed (`membership.ts`): a dead instance's runs come back at
 * the head of their lane once, then end up in the failure outbox (`failures`/`acknowledgeFailure`)
 * for the gateway to end them with the reason given.
 */
export interface ClusterRunLanes {
  /** Queues a run at the back of its lane (`front`: at the head, for a run handed back). */
  /** `notify`: a LISTEN channel to wake when the run is queued (in the same statement). */
  /** A run queued again keeps the deadline it was first queued with. */
  enqueue(
    laneKey: string,
    runId: string,
    options: { agentId: string; front?: boolean; notify?: string } & RunDeadline,
  ): Promise<void>;
  /** The run next in line, or undefined when nothing waits. */
  next(laneKey: string): Promise<string | undefined>;
  /** Drops the head of the lane (a run that no longer exists). */
  skip(laneKey: string): Promise<void>;
  /**
   * Takes `runId` (queued or not) as the lane's holder for this instance. False when another run
   * holds the lane, and with `unlessQueued` also when another run of the lane waits in the queue
   * (a run accepted after those must run after them: it joins the queue instead).
   */
  claim(
    laneKey: string,
    runId: string,
    agentId: string,
    options?: { unlessQueued?: boolean } & RunDeadline,
  ): Promise<boolean>;
  /**
   * Claims the oldest lane head among `agentIds` whose lane is free; undefined when none. With
   * `startAt`, a claimed run still `queued` is stored `running` in the same statement (see
   * `RunClaim.started`): the adopting instance writes no record of its own to start it. With
   * `runId`, only that run (the one a wake-up named), if it heads its free lane: a key lookup
   * instead of a search of the queue.
   */
  claimNext(
    agentIds: readonly string[],
    options?: { startAt?: number; runId?: string },
  ): Promise<RunClaim | undefined>;
  /**
   * `runId`, holding its lane here, gives it up and goes back to the head of the lane's queue in one
   * statement (no run can take the lane between the two), waking `notify`'s listeners with its id.
   * It keeps the deadline its claim carried (`deadlineInMs` counts only for a claim without one).
   */
  handBack(
    laneKey: string,
    runId: string,
    agentId: string,
    notify: string,
    options?: RunDeadline,
  ): Promise<void>;
  /** The run holding a lane, and the instance holding it. */
  holder(laneKey: string): Promise<{ runId: string; instanceId: string } | undefined>;
  /** `runId` ended or was handed back: it gives up the lane, or leaves the queue. True when the lane's queue is empty. */
  release(laneKey: string, runId: string): Promise<boolean>;
  /** Lanes with a queue. */
  laneKeys(): Promise<string[]>;
  queuedUnder(prefix: string): Promise<number>;
  holderUnder(prefix: string): Promise<string | undefined>;
  /** Runs of lost instances that may not be retried, not yet acknowledged (the gateway ends each). */
  failures(): Promise<LostRun[]>;
  /** The run's end is durable: it leaves the failure outbox. */
  acknowledgeFailure(runId: string): Promise<void>;
}

const likePrefix = (prefix: string) => `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

export function openClusterRunLanes(coordination: Coordination): ClusterRunLanes {
  const { db, q, instanceId } = coordination;
  const queue = q("run_queue");
  const claims = q("run_claims");
  const position = `'${q("run_queue_position").replaceAll("'", "''")}'`;
  const notMember = () =>
    new SwitchboardError(
      "UNAVAILABLE",
      `gateway instance ${instanceId} holds no cluster lease (not registered, or declared dead): renew its membership before claiming runs`,
      { retryable: true },
    );

  let withRecords: Promise<boolean> | undefined;
  /** The deadline, on the database's clock, of a run with `ms` left (undefined: no timeout). */
  const deadlineOf = (param: string) =>
    `CASE WHEN ${param}::float8 IS NULL THEN 'infinity'::timestamptz ELSE now() + make_interval(secs => ${param}::float8 / 1000) END`;
  /** Milliseconds left before `column` on the database's clock (NULL: none known). */
  const leftUntil = (column: string) =>
    `CASE WHEN isfinite(${column}) THEN (extract(epoch FROM ${column} - now()) * 1000)::float8 END`;

  return {
    async enqueue(laneKey, runId, { agentId, front = false, notify, deadlineInMs }) {
      const insert = `INSERT INTO ${queue} AS qr (run_id, lane_key, agent_id, position, deadline_at)
         VALUES ($1, $2, $3, ${front ? "-" : ""}nextval(${position}), ${deadlineOf("$4")})
         ON CONFLICT (run_id) DO UPDATE SET position = EXCLUDED.position, lane_key = EXCLUDED.lane_key,
           deadline_at = coalesce(qr.deadline_at, EXCLUDED.deadline_at)`;
      const deadline = deadlineInMs ?? null;
      await db.query(
        "queuing a run",
        // The wake-up goes out at the insert's commit: one round trip, and no wake-up without the run.
        notify === undefined
          ? insert
          : // The payload names the run, so a woken instance can claim it by its key (`claimNext`).
            `WITH queued AS (${insert} RETURNING run_id) SELECT pg_notify($5, run_id) FROM queued`,
        notify === undefined
          ? [runId, laneKey, agentId, deadline]
          : [runId, laneKey, agentId, deadline, notify],
      );
    },
    async next(laneKey) {
      const found = await db.read<{ run_id: string }>(
        "reading a lane's next run",
        `SELECT run_id FROM ${queue} WHERE lane_key = $1 ORDER BY position LIMIT 1`,
        [laneKey],
      );
      return found.rows[0]?.run_id;
    },
    async skip(laneKey) {
      await db.query(
        "dropping a lane's head",
        `DELETE FROM ${queue} WHERE run_id = (
           SELECT run_id FROM ${queue} WHERE lane_key = $1 ORDER BY position LIMIT 1 FOR UPDATE SKIP LOCKED
         )`,
        [laneKey],
      );
    },
    async claim(laneKey, runId, agentId, { unlessQueued = false, deadlineInMs } = {}) {
      try {
        // One statement: a lane held by another run refuses the insert and the whole statement
        // (the queue row's delete too) rolls back; without this instance's lease nothing is done.
        const member = `EXISTS (SELECT 1 FROM ${q("cluster_instances")} WHERE instance_id = $4)`;
        const found = await db.query<{ ahead: boolean; claimed: boolean }>(
          "claiming a run",
          `WITH ahead AS (
             SELECT $5::boolean AND EXISTS (SELECT 1 FROM ${queue} WHERE lane_key = $2 AND run_id <> $1) AS yes
           ), queued AS (
             DELETE FROM ${queue} WHERE run_id = $1 AND ${member} AND NOT (SELECT yes FROM ahead)
             RETURNING attempts, deadline_at
           ), claimed AS (
             INSERT INTO ${claims} (run_id, lane_key, agent_id, instance_id, attempts, deadline_at)
             SELECT $1, $2, $3, $4, coalesce((SELECT attempts FROM queued), 0),
               coalesce((SELECT deadline_at FROM queued), ${deadlineOf("$6")})
             WHERE ${member} AND NOT (SELECT yes FROM ahead)
             RETURNING run_id
           )
           SELECT (SELECT yes FROM ahead) AS ahead, EXISTS (SELECT 1 FROM claimed) AS claimed`,
          [runId, laneKey, agentId, instanceId, unlessQueued, deadlineInMs ?? null],
        );
        const row = found.rows[0]!;
        if (row.ahead) return false;
        if (!row.claimed) throw notMember();
        return true;
      } catch (error) {
        if (isLaneTaken(error)) return false;
        throw error;
      }
    },
    async claimNext(agentIds, { startAt, runId } = {}) {
      if (agentIds.length === 0) return undefined;
      withRecords ??= db
        .read<{ found: string | null }>(
          "looking for the runs table",
          "SELECT to_regclass($1)::text AS found",
          [q("runs")],
        )
        .then(
          (found) => found.rows[0]?.found != null,
          () => {
            withRecords = undefined;
            return false;
          },
        );
      // With the store's tables in this schema (always, beside a gateway), the claim also returns the
      // run's record: one statement where the claimer would read the run right after. With
      // `startAt` it also stores the run `running`, where the claimer would write it right after.
      const records = await withRecords;
      const start = records && startAt !== undefined;
      const session = (run: string) =>
        `(SELECT s.row FROM ${q("sessions")} s WHERE s.key = (SELECT r.session_key FROM ${q("runs")} r WHERE r.run_id = ${run}))`;
      const record = records
        ? `, (SELECT r.row FROM ${q("runs")} r WHERE r.run_id = c.run_id) AS record, ${session("c.run_id")} AS session`
        : "";
      const version = `nextval('${q("row_versions").replaceAll("'", "''")}')`;
      const claimed = `INSERT INTO ${claims} AS c (run_id, lane_key, agent_id, instance_id, attempts, deadline_at)
             SELECT run_id, lane_key, agent_id, $2, attempts, deadline_at FROM taken`;
      // The record as the scheduler's dispatch would write it: status, attempts + 1, startedAt unless
      // set by an earlier attempt. Only a run still `queued` (one ended meanwhile is released).
      const finish = start
        ? `, claimed AS (${claimed} RETURNING c.run_id, c.lane_key, c.agent_id, c.attempts, c.deadline_at),
             started AS (
               UPDATE ${q("runs")} r SET status = 'running', version = ${version},
                 row = (r.row::jsonb || jsonb_build_object(
                   'status', 'running',
                   'startedAt', coalesce(r.row::jsonb -> 'startedAt', to_jsonb($3::bigint)),
                   'attempts', coalesce((r.row ->> 'attempts')::int, 0) + 1))::json
               -- At most one run is claimed: a key lookup, whatever the planner thinks of the CTE.
               WHERE r.run_id = (SELECT run_id FROM claimed) AND r.status = 'queued'
               RETURNING r.run_id, r.row
             )
             SELECT c.run_id, c.lane_key, c.agent_id, c.attempts, started.run_id IS NOT NULL AS started,
               ${leftUntil("c.deadline_at")} AS deadline_in_ms,
               coalesce(started.row, (SELECT r.row FROM ${q("runs")} r WHERE r.run_id = c.run_id)) AS record,
               ${session("c.run_id")} AS session
             FROM claimed c LEFT JOIN started ON started.run_id = c.run_id`
        : `
             ${claimed}
             RETURNING c.run_id, c.lane_key, c.agent_id, c.attempts,
               ${leftUntil("c.deadline_at")} AS deadline_in_ms${record}`;
      // A few tries: a lane head can be claimed by another instance between our snapshot and our
      // insert (the lane's UNIQUE claim refuses the second, and the statement rolls back whole).
      for (let attempt = 0; attempt < 5; attempt++) {
        try {
          const found = await db.query<{
            run_id: string;
            lane_key: string;
            agent_id: string;
            attempts: number;
            record?: RunRecord | null;
            started?: boolean;
            session?: SessionEntry | null;
            deadline_in_ms: number | null;
          }>(
            "claiming the next run",
            `WITH head AS (
               SELECT r.run_id, r.lane_key, r.agent_id, r.attempts FROM ${queue} r
               WHERE r.agent_id = ANY($1::text[])${runId === undefined ? "" : ` AND r.run_id = $${start ? 4 : 3}`}
                 AND r.position = (SELECT min(h.position) FROM ${queue} h WHERE h.lane_key = r.lane_key)
                 AND NOT EXISTS (SELECT 1 FROM ${claims} c WHERE c.lane_key = r.lane_key)
                 AND EXISTS (SELECT 1 FROM ${q("cluster_instances")} i WHERE i.instance_id = $2)
               ORDER BY r.position
               LIMIT 1
               FOR UPDATE OF r SKIP LOCKED
             ), taken AS (
               DELETE FROM ${queue} WHERE run_id IN (SELECT run_id FROM head)
               RETURNING run_id, lane_key, agent_id, attempts, deadline_at
             )${finish}`,
            [agentIds, instanceId, ...(start ? [startAt] : []), ...(runId === undefined ? [] : [runId])],
          );
          const row = found.rows[0];
          return row
            ? {
                runId: row.run_id,
                laneKey: row.lane_key,
                agentId: row.agent_id,
                attempts: row.attempts,
                ...(row.record ? { record: row.record } : {}),
                ...(row.started ? { started: true } : {}),
                ...(row.session ? { session: row.session } : {}),
                ...(row.deadline_in_ms != null ? { deadlineInMs: row.deadline_in_ms } : {}),
              }
            : undefined;
        } catch (error) {
          if (!isLaneTaken(error)) throw error;
        }
      }
      return undefined;
    },
    async handBack(laneKey, runId, agentId, notify, { deadlineInMs } = {}) {
      await db.query(
        "handing a run back to the queue",
        `WITH freed AS (
           DELETE FROM ${claims} WHERE run_id = $1 AND lane_key = $2 AND instance_id = $5
           RETURNING attempts, deadline_at
         ), queued AS (
           INSERT INTO ${queue} AS qr (run_id, lane_key, agent_id, position, attempts, deadline_at)
           VALUES ($1, $2, $3, -nextval(${position}), coalesce((SELECT attempts FROM freed), 0),
             coalesce((SELECT deadline_at FROM freed), ${deadlineOf("$6")}))
           ON CONFLICT (run_id) DO UPDATE SET position = EXCLUDED.position, lane_key = EXCLUDED.lane_key,
             deadline_at = coalesce(qr.deadline_at, EXCLUDED.deadline_at)
           RETURNING run_id
         )
         SELECT pg_notify($4, run_id) FROM queued`,
        [runId, laneKey, agentId, notify, instanceId, deadlineInMs ?? null],
      );
    },
    async holder(laneKey) {
      const found = await db.read<{ run_id: string; instance_id: string }>(
        "reading a lane's holder",
        `SELECT run_id, instance_id FROM ${claims} WHERE lane_key = $1`,
        [laneKey],
      );
      const row = found.rows[0];
      return row ? { runId: row.run_id, instanceId: row.instance_id } : undefined;
    },
    async release(laneKey, runId) {
      const found = await db.query<{ empty: boolean }>(
        "releasing a run's lane",
        `WITH freed AS (DELETE FROM ${claims} WHERE run_id = $2 AND lane_key = $1 RETURNING run_id),
              dequeued AS (DELETE FROM ${queue} WHERE run_id = $2 AND lane_key = $1 RETURNING run_id)
         SELECT NOT EXISTS (SELECT 1 FROM ${queue} WHERE lane_key = $1 AND run_id <> $2) AS empty`,
        [laneKey, runId],
      );
      return found.rows[0]?.empty ?? true;
    },
    async laneKeys() {
      const found = await db.read<{ lane_key: string }>(
        "listing queued lanes",
        `SELECT DISTINCT lane_key FROM ${queue} ORDER BY lane_key`,
      );
      return found.rows.map((row) => row.lane_key);
    },
    async queuedUnder(prefix) {
      const found = await db.read<{ count: string }>(
        "counting queued runs",
        `SELECT count(*) AS count FROM ${queue} WHERE lane_key LIKE $1`,
        [likePrefix(prefix)],
      );
      return Number(found.rows[0]?.count ?? 0);
    },
    async holderUnder(prefix) {
      const found = await db.read<{ run_id: string }>(
        "reading a lane holder",
        `SELECT run_id FROM ${claims} WHERE lane_key LIKE $1 ORDER BY claimed_at LIMIT 1`,
        [likePrefix(prefix)],
      );
      return found.rows[0]?.run_id;
    },
    async failures() {
      const found = await db.read<{
        run_id: string;
        lane_key: string;
        agent_id: string;
        lost_instance: string;
        reason: string;
      }>(
        "reading lost runs",
        `SELECT run_id, lane_key, agent_id, lost_instance, reason FROM ${q("run_claim_failures")} ORDER BY at, run_id`,
      );
      return found.rows.map((row) => ({
        runId: row.run_id,
        laneKey: row.lane_key,
        agentId: row.agent_id,
        lostInstance: row.lost_instance,
        attempts: 0,
        reason: row.reason,
      }));
    },
    async acknowledgeFailure(runId) {
      await db.query("acknowledging a lost run", `DELETE FROM ${q("run_claim_failures")} WHERE run_id = $1`, [
        runId,
      ]);
    },
  };
}

function isLaneTaken(error: unknown): boolean {
  const cause = isSwitchboardError(error) ? (error as { cause?: unknown }).cause : error;
  return isUniqueViolation(cause, "run_claims_lane") || isUniqueViolation(cause, "run_claims_pkey");
}

/**
 * Creates `record` unless a run with its idempotency key exists, cluster-wide: the store's UNIQUE
 * index decides between instances racing on one key, and the loser gets the winner's run. Backs
 * `ActiveRuns.creating/startCreating` across instances (the in-process map still saves a round
 * trip for a repeat on the same instance).
 */
export async function createRunOnce(
  runs: Pick<RunRegistryStore, "put" | "getByIdempotencyKey">,
  record: RunRecord,
): Promise<{ record: RunRecord; created: boolean }> {
  const key = record.idempotencyKey;
  if (key !== undefined) {
    const existing = await runs.getByIdempotencyKey(key);
    if (existing) return { record: existing, created: false };
  }
  try {
    await runs.put(record, { expectedVersion: 0 });
    return { record, created: true };
  } catch (error) {
    const field = isSwitchboardError(error)
      ? (error.details as { field?: string } | undefined)?.field
      : undefined;
    if (key === undefined || field !== "idempotencyKey") throw error;
    const winner = await runs.getByIdempotencyKey(key);
    if (!winner) throw error;
    return { record: winner, created: false };
  }
}
