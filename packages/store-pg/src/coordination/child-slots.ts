import type { Coordination } from "./context";

/**
 * Backs `maxChildren` across instances. A requester's children not ended yet are its spawned runs
 * stored `queued` or `running` (the store's `runs` table, in the same schema) plus the spawns
 * allowed whose child run is not stored yet (rows of `child_slots`). `take` counts both and adds a
 * slot in one step under a lock per requester, so two instances spawning for one requester at the
 * same moment see each other: the second sees the first's slot.
 *
 * A slot ends when the child's run is stored (`settle`; from then on the run counts) or with its
 * instance (an instance without a membership row holds none); rows older than `staleMs` are dropped
 * as the requester spawns again, so a crash between the two never blocks a requester for long.
 */
export interface ClusterChildSlots {
  /**
   * Counts the requester's children not ended yet (`active`, this spawn not included) and takes a
   * slot for this spawn. `settle` gives the slot back: once the child's run is stored, or when the
   * spawn is refused or fails.
   */
  take(requesterKey: string, childKey: string): Promise<{ active: number; settle: () => Promise<void> }>;
}

const CHILD_LOCK_CLASS = 0x5357_4348; // "SWCH"

export function openClusterChildSlots(
  coordination: Coordination,
  options: { staleMs?: number } = {},
): ClusterChildSlots {
  const staleMs = options.staleMs ?? 10 * 60_000;
  const { db, q, schema, instanceId } = coordination;
  const slots = q("child_slots");
  return {
    async take(requesterKey, childKey) {
      const id = await db.transaction("taking a child slot", async (client) => {
        await client.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", [
          CHILD_LOCK_CLASS,
          JSON.stringify([schema, requesterKey]),
        ]);
        await client.query(
          `DELETE FROM ${slots} WHERE requester_key = $1
             AND taken_at < now() - make_interval(secs => $2::double precision / 1000)`,
          [requesterKey, staleMs],
        );
        // A child whose run is stored while its slot is not settled yet counts once.
        const counted = await client.query<{ stored: string; pending: string }>(
          `WITH pending AS (
             SELECT s.child_key FROM ${slots} s WHERE s.requester_key = $1
               AND EXISTS (SELECT 1 FROM ${q("cluster_instances")} i WHERE i.instance_id = s.instance_id)
           )
           SELECT
             (SELECT count(*) FROM ${q("runs")} r
               WHERE r.status IN ('queued', 'running') AND r.row->'spawn'->>'requesterKey' = $1
                 AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.child_key = r.row->'spawn'->>'childKey')) AS stored,
             (SELECT count(*) FROM pending) AS pending`,
          [requesterKey],
        );
        const row = counted.rows[0];
        const inserted = await client.query<{ id: string }>(
          `INSERT INTO ${slots} (requester_key, child_key, instance_id) VALUES ($1, $2, $3) RETURNING id`,
          [requesterKey, childKey, instanceId],
        );
        return { active: Number(row?.stored ?? 0) + Number(row?.pending ?? 0), id: inserted.rows[0]!.id };
      });
      let settled: Promise<void> | undefined;
      return {
        active: id.active,
        settle: () => {
          settled ??= db
            .query("settling a child slot", `DELETE FROM ${slots} WHERE id = $1`, [id.id])
            .then(() => undefined);
          return settled;
        },
      };
    },
  };
}
