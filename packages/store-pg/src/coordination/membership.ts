import { SwitchboardError } from "@switchboard/core";
import type pg from "pg";
import type { Coordination } from "./context";

/** A run whose instance was lost: put back at the head of its lane, or failed. */
export interface LostRun {
  runId: string;
  laneKey: string;
  agentId: string;
  /** The instance that held the run and stopped renewing its lease. */
  lostInstance: string;
  /** Times the run had been reassigned before this loss. */
  attempts: number;
  /** For a failed run: the error to end it with (names the lost instance). */
  reason?: string;
}

export interface SweepResult {
  /** Instances declared dead by this sweep. */
  lostInstances: string[];
  /** Runs put back at the head of their lane (claimable by any instance with a worker). */
  requeued: LostRun[];
  /** Runs that had been reassigned already: kept in the failure outbox until acknowledged. */
  failed: LostRun[];
  /** Agent-to-agent waits of the lost instances removed. */
  waitsRemoved: number;
}

export interface MembershipOptions {
  /** How long a renewal keeps the instance alive (ms). Default 5000. */
  leaseMs?: number;
  /** Renewal period of `start()` (ms). Default a third of the lease. */
  renewMs?: number;
  /** How often a lost instance's runs are reassigned before they fail. Default 1. */
  maxReassignments?: number;
  /**
   * Called when a renewal finds this instance was declared dead (paused or cut off longer than the
   * lease): its claims and waits are gone, and the runs it holds now belong to others.
   */
  onLost?: () => void;
  onError?: (error: unknown) => void;
}

/**
 * Cluster membership: each instance renews a lease row; its run claims and agent-to-agent waits
 * live exactly as long as that row. Backs the liveness part of the gateway's `ActiveRuns` (which
 * runs are held by a living instance); the gateway's leader calls `sweep` every second or so.
 *
 * Timing: with lease L and a sweep every S, a dead instance's runs are back in their lanes (or
 * failed) at most L + S after its last renewal: 5 s + 1 s by default, inside the 10 s of
 * scale-out.md. Lease times use the database's clock (`now()`), never the instances'.
 */
export interface ClusterMembership {
  readonly instanceId: string;
  /**
   * Registers or renews this instance. `lost` is true when a sweep had declared it dead since the
   * previous renewal (it is registered afresh).
   */
  renew(): Promise<{ lost: boolean }>;
  /** Renews every `renewMs` until `stop`. */
  start(): void;
  /** Stops renewing (shutdown; tests simulate a dead instance with it). */
  stop(): void;
  /** Declares instances whose lease ran out dead and frees what they held, in one transaction. */
  sweep(): Promise<SweepResult>;
  /** Instances whose lease is current. */
  alive(): Promise<string[]>;
  /** Graceful exit: removes this instance's row (what it still holds is swept as lost). */
  leave(): Promise<void>;
  /**
   * Whether the lease is being kept: not when two renewals' worth of time has passed since the
   * last one that went through (failing or stuck), well before the lease runs out and the cluster
   * takes this instance's runs away. `since` is when the renewals began to fail or stall.
   */
  health(): { ok: true } | { ok: false; cause: string; since: string };
}

interface ClaimRow {
  run_id: string;
  lane_key: string;
  agent_id: string;
  instance_id: string;
  attempts: number;
  /** As text, so it goes back into the queue as it was (`infinity` and NULL included). */
  deadline_at: string | null;
}

export function openMembership(
  coordination: Coordination,
  options: MembershipOptions = {},
): ClusterMembership {
  const leaseMs = options.leaseMs ?? 5000;
  const renewMs = options.renewMs ?? Math.max(1, Math.floor(leaseMs / 3));
  const maxReassignments = options.maxReassignments ?? 1;
  if (!(renewMs < leaseMs)) {
    throw new SwitchboardError("INVALID_REQUEST", "cluster.renewMs: must be shorter than cluster.leaseMs", {
      details: { field: "cluster.renewMs" },
    });
  }
  const { db, q, instanceId, logger } = coordination;
  const instances = q("cluster_instances");
  let registered = false;
  let timer: NodeJS.Timeout | undefined;
  /** Monotonic time of the last renewal that went through (or of the start), and the last failure. */
  let renewedAt = performance.now();
  let lastFailure: string | undefined;
  const onError =
    options.onError ??
    ((error: unknown) => logger.warn({ error: (error as Error).message }, "lease renewal failed"));

  /**
   * Frees what the `dead` instances held — and anything held by an instance without a row (one
   * that left, or claimed after being swept) — inside the caller's transaction.
   */
  const free = async (client: pg.PoolClient, dead: string[]): Promise<Omit<SweepResult, "lostInstances">> => {
    const claims = await client.query<ClaimRow>(
      `DELETE FROM ${q("run_claims")} c
           WHERE c.instance_id = ANY($1::text[])
              OR NOT EXISTS (SELECT 1 FROM ${instances} i WHERE i.instance_id = c.instance_id)
           RETURNING run_id, lane_key, agent_id, instance_id, attempts, deadline_at::text`,
      [dead],
    );
    const deadlines = new Map(claims.rows.map((row) => [row.run_id, row.deadline_at]));
    const requeued: LostRun[] = [];
    const failed: LostRun[] = [];
    for (const row of claims.rows) {
      const lost: LostRun = {
        runId: row.run_id,
        laneKey: row.lane_key,
        agentId: row.agent_id,
        lostInstance: row.instance_id,
        attempts: row.attempts,
      };
      if (row.attempts < maxReassignments) requeued.push(lost);
      else {
        lost.reason = `gateway instance ${row.instance_id} holding the run was lost (its lease expired, or it restarted) and the run had already been reassigned ${row.attempts} time${row.attempts === 1 ? "" : "s"}`;
        failed.push(lost);
      }
    }
    if (requeued.length > 0) {
      // Back at the head of the lane (below every normal position), one attempt more, with the
      // deadline its claim carried (on the database's clock).
      await client.query(
        `INSERT INTO ${q("run_queue")} (run_id, lane_key, agent_id, position, attempts, deadline_at)
             SELECT t.run_id, t.lane_key, t.agent_id, -nextval('${q("run_queue_position").replaceAll("'", "''")}'), t.attempts + 1, t.deadline_at
             FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::timestamptz[])
               AS t(run_id, lane_key, agent_id, attempts, deadline_at)
             ON CONFLICT (run_id) DO NOTHING`,
        [
          requeued.map((run) => run.runId),
          requeued.map((run) => run.laneKey),
          requeued.map((run) => run.agentId),
          requeued.map((run) => run.attempts),
          requeued.map((run) => deadlines.get(run.runId) ?? null),
        ],
      );
      // Their records go back to `queued` in the same transaction (beside a gateway's tables, always
      // there): an instance adopting one right after this commit finds it queued and starts it, and
      // no write after the sweep can take a run another instance adopted, or ended, back to queued.
      const runs = await client.query<{ found: string | null }>("SELECT to_regclass($1)::text AS found", [
        q("runs"),
      ]);
      if (runs.rows[0]?.found != null) {
        await client.query(
          `UPDATE ${q("runs")} SET status = 'queued',
             row = (row::jsonb || '{"status": "queued"}'::jsonb)::json,
             version = nextval('${q("row_versions").replaceAll("'", "''")}')
           WHERE run_id = ANY($1::text[]) AND status NOT IN ('ok', 'error', 'timeout')`,
          [requeued.map((run) => run.runId)],
        );
      }
    }
    if (failed.length > 0) {
      await client.query(
        `INSERT INTO ${q("run_claim_failures")} (run_id, lane_key, agent_id, lost_instance, reason)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
             ON CONFLICT (run_id) DO NOTHING`,
        [
          failed.map((run) => run.runId),
          failed.map((run) => run.laneKey),
          failed.map((run) => run.agentId),
          failed.map((run) => run.lostInstance),
          failed.map((run) => run.reason!),
        ],
      );
    }
    const waits = await client.query(
      `DELETE FROM ${q("waits")} w
           WHERE w.instance_id = ANY($1::text[])
              OR NOT EXISTS (SELECT 1 FROM ${instances} i WHERE i.instance_id = w.instance_id)`,
      [dead],
    );
    // Their calls in flight: a cancellation must not count (or be sent to) a call nobody runs.
    await client.query(
      `DELETE FROM ${q("cancellable_calls")} c
           WHERE c.instance_id = ANY($1::text[])
              OR NOT EXISTS (SELECT 1 FROM ${instances} i WHERE i.instance_id = c.instance_id)`,
      [dead],
    );
    return { requeued, failed, waitsRemoved: waits.rowCount ?? 0 };
  };

  /**
   * The first registration of this process: whatever a previous process with the same instance id
   * held (a restart with a configured id, after kill -9) is freed as lost before the new row goes in.
   */
  const register = () =>
    db.transaction("registering the instance", async (client) => {
      await client.query(`DELETE FROM ${instances} WHERE instance_id = $1`, [instanceId]);
      const freed = await free(client, [instanceId]);
      await client.query(
        `INSERT INTO ${instances} (instance_id, lease_until)
         VALUES ($1, now() + make_interval(secs => $2::double precision / 1000))`,
        [instanceId, leaseMs],
      );
      if (freed.requeued.length + freed.failed.length > 0) {
        logger.warn(
          { requeued: freed.requeued.length, failed: freed.failed.length },
          "runs held by a previous process with this instance id freed",
        );
      }
    });

  const renew = async (): Promise<{ lost: boolean }> => {
    try {
      const renewed = await renewOnce();
      renewedAt = performance.now();
      lastFailure = undefined;
      return renewed;
    } catch (error) {
      lastFailure = (error as Error).message;
      throw error;
    }
  };

  const renewOnce = async (): Promise<{ lost: boolean }> => {
    if (!registered) {
      await register();
      registered = true;
      return { lost: false };
    }
    // A sweep deletes the row of a dead instance in the same transaction that frees its claims; a
    // renewal that has to insert the row again therefore knows it was declared dead.
    const result = await db.query<{ inserted: boolean }>(
      "renewing the instance lease",
      `INSERT INTO ${instances} (instance_id, lease_until)
       VALUES ($1, now() + make_interval(secs => $2::double precision / 1000))
       ON CONFLICT (instance_id) DO UPDATE SET lease_until = EXCLUDED.lease_until
       RETURNING (xmax = 0) AS inserted`,
      [instanceId, leaseMs],
    );
    const lost = result.rows[0]?.inserted === true;
    if (lost) {
      logger.warn({ instanceId }, "this instance had been declared dead by the cluster; registered again");
      options.onLost?.();
    }
    return { lost };
  };

  return {
    instanceId,
    renew,
    health() {
      const late = performance.now() - renewedAt - renewMs;
      if (!timer || late <= renewMs) return { ok: true };
      return {
        ok: false,
        cause: `lease not renewed for ${Math.round(late + renewMs)} ms (of ${leaseMs}): ${lastFailure ?? "the renewal has not answered"}`,
        since: new Date(Date.now() - late).toISOString(),
      };
    },
    start() {
      if (timer) return;
      timer = setInterval(() => void renew().catch(onError), renewMs);
      timer.unref();
    },
    stop() {
      clearInterval(timer);
      timer = undefined;
    },
    sweep() {
      return db.transaction("sweeping lost instances", async (client) => {
        // SKIP LOCKED: a renewal in progress holds the row, and two sweepers never both free it.
        const expired = await client.query<{ instance_id: string }>(
          `DELETE FROM ${instances} WHERE instance_id IN (
             SELECT instance_id FROM ${instances} WHERE lease_until < now() FOR UPDATE SKIP LOCKED
           ) RETURNING instance_id`,
        );
        const dead = expired.rows.map((row) => row.instance_id);
        const freed = await free(client, dead);
        if (dead.length > 0 || freed.requeued.length + freed.failed.length > 0) {
          logger.warn(
            { lostInstances: dead, requeued: freed.requeued.length, failed: freed.failed.length },
            "lost gateway instances swept",
          );
        }
        return { lostInstances: dead, ...freed };
      });
    },
    async alive() {
      const found = await db.read<{ instance_id: string }>(
        "listing live instances",
        `SELECT instance_id FROM ${instances} WHERE lease_until >= now() ORDER BY instance_id`,
      );
      return found.rows.map((row) => row.instance_id);
    },
    async leave() {
      clearInterval(timer);
      timer = undefined;
      await db.query("leaving the cluster", `DELETE FROM ${instances} WHERE instance_id = $1`, [instanceId]);
      registered = false;
    },
  };
}
