import type { Coordination } from "./context";

/**
 * Exactly-once flow steps across instances (announces): an instance claims a step before it
 * performs it and releases the claim once the step's outcome is stored. A claim holds while its
 * instance is alive in its current registration; a claim of an instance that is gone (its lease
 * ran out and the sweep removed it, or it restarted under the same id) may be taken over. So two
 * instances trying at once never both perform a step, and a step its instance died in the middle
 * of is performed by another — which must then find what the dead one already did (idempotency
 * keys) instead of doing it again.
 */
export interface ClusterFlowClaims {
  /** True when this instance now holds `key` (no claim, or the claimer is gone). */
  claim(key: string, kind: string, runId: string): Promise<boolean>;
  release(key: string): Promise<void>;
  /** Claims of `kind` whose instance is gone: steps left half-done, for a live instance to take over. */
  orphaned(kind: string, limit?: number): Promise<Array<{ key: string; runId: string }>>;
}

export function openClusterFlowClaims(coordination: Coordination): ClusterFlowClaims {
  const { db, q, instanceId } = coordination;
  const claims = q("flow_claims");
  // Alive in the registration that made the claim (a restart under the same id does not hold it).
  const holderAlive = (claim: string) =>
    `EXISTS (SELECT 1 FROM ${q("cluster_instances")} i
       WHERE i.instance_id = ${claim}.instance_id AND i.started_at <= ${claim}.claimed_at)`;
  return {
    async claim(key, kind, runId) {
      const claimed = await db.query(
        "claiming a flow step",
        `INSERT INTO ${claims} AS c (key, kind, run_id, instance_id, claimed_at)
         VALUES ($1, $2, $3, $4, clock_timestamp())
         ON CONFLICT (key) DO UPDATE
           SET instance_id = EXCLUDED.instance_id, claimed_at = EXCLUDED.claimed_at
           WHERE NOT ${holderAlive("c")}
         RETURNING key`,
        [key, kind, runId, instanceId],
      );
      return (claimed.rowCount ?? 0) > 0;
    },
    async release(key) {
      await db.query("releasing a flow step", `DELETE FROM ${claims} WHERE key = $1 AND instance_id = $2`, [
        key,
        instanceId,
      ]);
    },
    async orphaned(kind, limit = 100) {
      const found = await db.read<{ key: string; run_id: string }>(
        "listing orphaned flow steps",
        `SELECT key, run_id FROM ${claims} c WHERE kind = $1 AND NOT ${holderAlive("c")}
         ORDER BY claimed_at LIMIT $2`,
        [kind, limit],
      );
      return found.rows.map((row) => ({ key: row.key, runId: row.run_id }));
    },
  };
}
