import { createHash } from "node:crypto";
import { warnThrottle } from "@switchboard/core";
import type { Coordination } from "./context";

/**
 * Cancellations of calls that may run on another instance: an MCP client's `notifications/cancelled`
 * arrives in a request of its own, which a load balancer may send to any instance.
 *
 * Each instance records its calls in flight (`cancellable_calls`), so the instance that receives a
 * cancellation counts the calls its key names in the whole cluster with one statement and, only when
 * there is exactly one, has it cancelled: here, or by a NOTIFY addressed to the instance holding it.
 * An ambiguous key cancels nothing wherever its calls run (a wrong cancellation would end another
 * client's call), and a key naming no call costs one indexed read and no NOTIFY.
 *
 * Best effort by nature, like the notification itself: a cancellation arriving before its call's row
 * is written (a millisecond or so, see `track`), or a NOTIFY sent while the holder's listener is
 * reconnecting, is lost, and that call then runs to its own timeout (never worse than before).
 * Cancellations are also the cheapest thing a client can send in bulk, so their lookups are bounded
 * per instance (`maxLookups` at once, `maxWaiting` more queued, the rest dropped): they share the
 * coordination pool with the lease renewals, which must never queue behind them.
 */
export interface ClusterCancellations {
  /**
   * Records a call of this instance that `key` names (its meaning is the caller's) until the
   * returned function is called. Never delays the call: rows are written in the background, one
   * statement at a time for everything started or ended meanwhile.
   */
  track(key: string): () => void;
  /** Has the one call `key` names in the cluster cancelled, if there is exactly one. Never rejects. */
  cancel(key: string): Promise<CancellationOutcome>;
  /** Hears the cancellations of this instance's calls decided elsewhere, until the returned function is called. */
  listen(handler: (key: string) => void): Promise<() => Promise<void>>;
}

/**
 * - `here`: the one call runs on this instance; the caller cancels it.
 * - `sent`: the one call runs on another instance, which was told.
 * - `none`: no call of that key is in flight (that any instance has recorded yet).
 * - `ambiguous`: more than one is; none is cancelled.
 * - `dropped`: too many cancellations were waiting for a lookup; this one was not looked up.
 * - `failed`: the lookup failed (logged, at most once per `reportEveryMs`).
 */
export type CancellationOutcome = "here" | "sent" | "none" | "ambiguous" | "dropped" | "failed";

export interface ClusterCancellationsOptions {
  /** Lookups on the coordination pool at once. Default 2 (the pool has at least 4 connections). */
  maxLookups?: number;
  /** Cancellations queued for a lookup beyond those; more are dropped. Default 64. */
  maxWaiting?: number;
  /** Drops and failures are logged at most once per this period (ms). Default 10 000. */
  reportEveryMs?: number;
}

/** The LISTEN channel of a schema's cancellations (identifiers are at most 63 bytes). */
export function cancellationChannel(schema: string): string {
  return `sb_cancel_${createHash("sha256").update(schema).digest("hex").slice(0, 24)}`;
}

/** Rows written or removed per statement; more wait for the next one. */
const WRITE_BATCH = 1000;
/** Pause after a failed write before the next attempt (the database is likely down). */
const WRITE_RETRY_MS = 1000;

const hashOf = (key: string) => createHash("sha256").update(key).digest("hex");

export function openClusterCancellations(
  coordination: Coordination,
  options: ClusterCancellationsOptions = {},
): ClusterCancellations {
  const { db, q, instanceId, logger } = coordination;
  const { maxLookups = 2, maxWaiting = 64, reportEveryMs = 10_000 } = options;
  const channel = cancellationChannel(coordination.schema);
  const calls = q("cancellable_calls");

  /** This instance's calls by key hash: the count decides here, the key answers a NOTIFY. */
  const local = new Map<string, { key: string; count: number }>();

  // Rows to write: inserts not sent yet (a call ending before its insert is sent costs no statement),
  // and calls ended whose insert was sent (or may have been: deleting a missing row is harmless).
  let nextCallId = 0;
  const toInsert = new Map<number, string>();
  const toDelete = new Set<number>();
  let writing = false;
  const warnWrite = warnThrottle(logger, reportEveryMs);
  const writeFailed = (error: unknown) =>
    warnWrite(
      { error: (error as Error).message },
      "could not record the calls in flight: cancellations from other instances may miss them",
    );

  // Transient state, not data: committed without waiting for the WAL flush (as `try_wait`), the
  // setting made by the gating filter, which runs once whether or not there are rows to insert.
  const write = `WITH ended AS (
      DELETE FROM ${calls} WHERE instance_id = $1 AND call_id = ANY($2::bigint[])
    )
    INSERT INTO ${calls} (instance_id, call_id, key_hash)
    SELECT $1, t.call_id, decode(t.key_hash, 'hex') FROM unnest($3::bigint[], $4::text[]) AS t(call_id, key_hash)
    WHERE (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
    ON CONFLICT DO NOTHING`;

  const flush = async () => {
    if (writing) return;
    writing = true;
    try {
      while ((toInsert.size > 0 || toDelete.size > 0) && !db.isClosed) {
        const inserts = [...toInsert].slice(0, WRITE_BATCH);
        const deletes = [...toDelete].slice(0, WRITE_BATCH);
        for (const [callId] of inserts) toInsert.delete(callId);
        for (const callId of deletes) toDelete.delete(callId);
        try {
          await db.query("recording the calls in flight", write, [
            instanceId,
            deletes,
            inserts.map(([callId]) => callId),
            inserts.map(([, hash]) => hash),
          ]);
        } catch (error) {
          if (db.isClosed) break; // shutting down: the rows go with the instance's
          writeFailed(error);
          // Nothing of the statement applied (or all of it: both are safe to repeat). A call that
          // ended meanwhile is in `toDelete` already.
          for (const callId of deletes) toDelete.add(callId);
          for (const [callId, hash] of inserts) if (!toDelete.has(callId)) toInsert.set(callId, hash);
          await new Promise((resolve) => setTimeout(resolve, WRITE_RETRY_MS).unref());
        }
      }
    } finally {
      writing = false;
    }
  };

  // At most `maxLookups` lookups at once; a finished one hands its slot to the next waiting.
  let lookups = 0;
  const waiting: Array<() => void> = [];
  const warnDropped = warnThrottle(logger, reportEveryMs);
  const dropped = () =>
    warnDropped(
      { maxLookups, maxWaiting },
      "mcp cancellations dropped: more arrived than this instance looks up (a client flooding them?)",
    );
  const warnLookup = warnThrottle(logger, reportEveryMs);
  const lookupFailed = (error: unknown) =>
    warnLookup({ error: (error as Error).message }, "could not look up a cancelled call");

  // Other instances' calls only: this instance's own count is `local`, which is never behind.
  const lookup = `SELECT count(*)::int AS others,
      CASE WHEN $4::boolean AND count(*) = 1
        THEN pg_notify($3, json_build_object('to', min(h.instance_id), 'key', $2::text)::text)::text END AS notified
    FROM (SELECT instance_id FROM ${calls}
          WHERE key_hash = decode($2, 'hex') AND instance_id <> $1 LIMIT 2) AS h`;

  const decide = async (hash: string): Promise<CancellationOutcome> => {
    const here = local.get(hash)?.count ?? 0;
    if (here > 1) return "ambiguous";
    // Not `read`: its retry could send the NOTIFY twice (harmless, but not a read).
    const found = await db.query<{ others: number }>("looking up a cancelled call", lookup, [
      instanceId,
      hash,
      channel,
      here === 0,
    ]);
    const others = found.rows[0]?.others ?? 0;
    if (here + others > 1) return "ambiguous";
    if (here === 1) return "here";
    return others === 1 ? "sent" : "none";
  };

  return {
    track(key) {
      const hash = hashOf(key);
      const entry = local.get(hash) ?? { key, count: 0 };
      entry.count += 1;
      local.set(hash, entry);
      const callId = ++nextCallId;
      toInsert.set(callId, hash);
      void flush();
      let ended = false;
      return () => {
        if (ended) return;
        ended = true;
        entry.count -= 1;
        if (entry.count === 0 && local.get(hash) === entry) local.delete(hash);
        if (toInsert.delete(callId)) return;
        toDelete.add(callId);
        void flush();
      };
    },
    async cancel(key) {
      const hash = hashOf(key);
      if ((local.get(hash)?.count ?? 0) > 1) return "ambiguous";
      if (lookups < maxLookups) lookups += 1;
      else if (waiting.length < maxWaiting) await new Promise<void>((resolve) => waiting.push(resolve));
      else {
        dropped();
        return "dropped";
      }
      try {
        return await decide(hash);
      } catch (error) {
        lookupFailed(error);
        return "failed";
      } finally {
        const next = waiting.shift();
        if (next) next();
        else lookups -= 1;
      }
    },
    listen(handler) {
      return coordination.listener.listen(channel, {
        notify(payload) {
          let message: { to?: unknown; key?: unknown };
          try {
            message = JSON.parse(payload) as typeof message;
          } catch {
            return;
          }
          if (message.to !== instanceId || typeof message.key !== "string") return;
          // Gone when the call ended meanwhile.
          const call = local.get(message.key);
          if (call) handler(call.key);
        },
      });
    },
  };
}
