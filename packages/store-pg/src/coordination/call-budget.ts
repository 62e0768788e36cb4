import { SwitchboardError } from "@switchboard/core";
import type { Coordination } from "./context";

export type ClusterBudgetKind = "send" | "spawn";

/**
 * Backs the gateway's `CallBudget` port across instances: one row per allowed send/spawn, counted
 * over a sliding window on the database's clock, so a session's budget is the same whichever
 * instances its calls arrive on.
 *
 * What changes for callers: async; and `take` checks and counts in one step (under a lock per
 * session and kind), because `used` then `record` lets two instances both see one call left and
 * both take it. Rows older than the window are deleted as the same key is counted again, and by
 * `prune` (the leader's timer) for keys that went quiet, so the table stays bounded by the calls of
 * one window.
 */
export interface ClusterCallBudget {
  /** Calls of `kind` by `sessionKey` in the window ending now. */
  used(sessionKey: string, kind: ClusterBudgetKind): Promise<number>;
  /** Counts one call that was allowed. */
  record(sessionKey: string, kind: ClusterBudgetKind): Promise<void>;
  /** Counts the call if fewer than `limit` were made in the window; `used` includes it when allowed. */
  take(
    sessionKey: string,
    kind: ClusterBudgetKind,
    limit: number,
  ): Promise<{ allowed: boolean; used: number }>;
  /**
   * Counts the call at once and says how many came before it in the window (`used`), in one step:
   * the caller decides on `used` (e.g. with the policy engine) and gives the call back with
   * `release` when it was refused, so a refusal costs nothing. Calls of one session reserved at the
   * same moment see distinct counts, so no more than the limit of them can be allowed.
   */
  reserve(
    sessionKey: string,
    kind: ClusterBudgetKind,
  ): Promise<{ used: number; release: () => Promise<void> }>;
  /** Deletes every row older than the window; returns how many. */
  prune(): Promise<number>;
}

const BUDGET_LOCK_CLASS = 0x5357_4243; // "SWBC"

export function openClusterCallBudget(
  coordination: Coordination,
  options: { windowMs?: number } = {},
): ClusterCallBudget {
  const windowMs = options.windowMs ?? 60_000;
  const { db, q, schema } = coordination;
  const table = q("call_budget");
  const since = "clock_timestamp() - make_interval(secs => $3::double precision / 1000)";
  const countSql = `SELECT count(*) AS count FROM ${table} WHERE session_key = $1 AND kind = $2 AND at > ${since}`;
  return {
    async used(sessionKey, kind) {
      const found = await db.read<{ count: string }>("counting a session's calls", countSql, [
        sessionKey,
        kind,
        windowMs,
      ]);
      return Number(found.rows[0]?.count ?? 0);
    },
    async record(sessionKey, kind) {
      await db.query(
        "counting a session's call",
        `INSERT INTO ${table} (session_key, kind) VALUES ($1, $2)`,
        [sessionKey, kind],
      );
    },
    async take(sessionKey, kind, limit) {
      if (!Number.isInteger(limit) || limit < 0) {
        throw new SwitchboardError("INVALID_REQUEST", "limit: must be an integer >= 0", {
          details: { field: "limit" },
        });
      }
      return db.transaction("taking from a session's call budget", async (client) => {
        await client.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", [
          BUDGET_LOCK_CLASS,
          JSON.stringify([schema, kind, sessionKey]),
        ]);
        await client.query(`DELETE FROM ${table} WHERE session_key = $1 AND kind = $2 AND at <= ${since}`, [
          sessionKey,
          kind,
          windowMs,
        ]);
        const found = await client.query<{ count: string }>(countSql, [sessionKey, kind, windowMs]);
        const used = Number(found.rows[0]?.count ?? 0);
        if (used >= limit) return { allowed: false, used };
        await client.query(`INSERT INTO ${table} (session_key, kind) VALUES ($1, $2)`, [sessionKey, kind]);
        return { allowed: true, used: used + 1 };
      });
    },
    async reserve(sessionKey, kind) {
      // Lock, count and insert in one round trip (see the function in schema.ts). Old rows are
      // left to `prune` (the count skips them). Rows have no id: the reservation is found again
      // by its timestamp, unique per session and kind since the lock serialises these inserts.
      const inserted = await db.query<{ used: string; reserved_at: string }>(
        "reserving from a session's call budget",
        `SELECT used, reserved_at FROM ${q("reserve_call")}($1, $2, $3, $4, $5)`,
        [sessionKey, kind, windowMs, BUDGET_LOCK_CLASS, JSON.stringify([schema, kind, sessionKey])],
      );
      const taken = { used: Number(inserted.rows[0]?.used ?? 0), at: inserted.rows[0]!.reserved_at };
      let released: Promise<void> | undefined;
      return {
        used: taken.used,
        release: () => {
          released ??= db
            .query(
              "giving back a refused call",
              `DELETE FROM ${table} WHERE ctid = (SELECT ctid FROM ${table}
                 WHERE session_key = $1 AND kind = $2 AND at = $3::timestamptz LIMIT 1)`,
              [sessionKey, kind, taken.at],
            )
            .then(() => undefined);
          return released;
        },
      };
    },
    async prune() {
      const removed = await db.query(
        "pruning the call budget",
        `DELETE FROM ${table} WHERE at <= clock_timestamp() - make_interval(secs => $1::double precision / 1000)`,
        [windowMs],
      );
      return removed.rowCount ?? 0;
    },
  };
}
