import { SwitchboardError } from "@switchboard/core";
import type { Coordination } from "./context";

/**
 * Backs the gateway's `WaitGraph` port across instances: current agent-to-agent waits are rows of
 * `waits`, each owned by the instance whose flow waits. A wait lives as long as that instance's
 * membership lease: the sweep that declares an instance dead removes its waits, so a crash never
 * leaves a phantom edge that would refuse later sends as cycles.
 *
 * What changes for callers: async; and `tryWait` checks and records in one step under a
 * cluster-wide lock. With separate `cycleFor` + `wait`, two instances could each add one half of a
 * cycle (A waits on B here, B on A there) between the check and the insert; in one process that
 * cannot happen because nothing runs between the two calls.
 */
export interface ClusterWaitGraph {
  /** The wait cycle `waiter` waiting on `target` would close (e.g. `[A, B, A]`), or undefined. */
  cycleFor(waiter: string, target: string): Promise<string[] | undefined>;
  /** Records the wait unconditionally; the returned function ends it. */
  wait(waiter: string, target: string): Promise<() => Promise<void>>;
  /** Records the wait unless it closes a cycle (returned instead), atomically across instances. */
  tryWait(
    waiter: string,
    target: string,
  ): Promise<{ cycle: string[]; release?: undefined } | { cycle?: undefined; release: () => Promise<void> }>;
}

const WAIT_LOCK_CLASS = 0x5357_4257; // "SWBW"

export function openClusterWaitGraph(coordination: Coordination): ClusterWaitGraph {
  const { db, q, instanceId, schema } = coordination;
  const waits = q("waits");
  // From the target along current waits; reaching the waiter closes a cycle. `path` stops loops
  // among other sessions from walking forever. (`try_wait` in schema.ts walks the same way; a
  // released migration is never edited, so it keeps its own copy.)
  const cycleSql = `WITH RECURSIVE walk(node, path) AS (
      SELECT $2::text COLLATE "C", ARRAY[$2::text COLLATE "C"]
      UNION ALL
      SELECT w.target, walk.path || w.target FROM walk JOIN ${waits} w ON w.waiter = walk.node
      WHERE walk.node <> $1 AND NOT (w.target = ANY(walk.path))
    ) SELECT path FROM walk WHERE node = $1 LIMIT 1`;
  const insertSql = `INSERT INTO ${waits} (waiter, target, instance_id)
    SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM ${q("cluster_instances")} WHERE instance_id = $3)
    RETURNING id`;
  const notMember = () =>
    new SwitchboardError(
      "UNAVAILABLE",
      `gateway instance ${instanceId} holds no cluster lease (not registered, or declared dead): renew its membership before waiting`,
      { retryable: true },
    );
  const releaser = (id: string) => {
    let released: Promise<void> | undefined;
    return () => {
      released ??= db
        .query("ending an agent-to-agent wait", `DELETE FROM ${waits} WHERE id = $1`, [id])
        .then(() => undefined);
      return released;
    };
  };
  const cycleFor = async (waiter: string, target: string) => {
    if (waiter === target) return [waiter, target];
    const found = await db.read<{ path: string[] }>("checking for a wait cycle", cycleSql, [waiter, target]);
    const path = found.rows[0]?.path;
    return path ? [waiter, ...path] : undefined;
  };
  return {
    cycleFor,
    async wait(waiter, target) {
      const inserted = await db.query<{ id: string }>("recording an agent-to-agent wait", insertSql, [
        waiter,
        target,
        instanceId,
      ]);
      const id = inserted.rows[0]?.id;
      if (id === undefined) throw notMember();
      return releaser(id);
    },
    async tryWait(waiter, target) {
      if (waiter === target) return { cycle: [waiter, target] };
      // The lock, the walk and the insert in one round trip (see the function in schema.ts).
      const found = await db.query<{ cycle_path: string[] | null; wait_id: string | null }>(
        "checking and recording an agent-to-agent wait",
        `SELECT cycle_path, wait_id FROM ${q("try_wait")}($1, $2, $3, $4, $5)`,
        [waiter, target, instanceId, WAIT_LOCK_CLASS, `${schema}.waits`],
      );
      const path = found.rows[0]?.cycle_path;
      if (path) return { cycle: [waiter, ...path] };
      const id = found.rows[0]?.wait_id;
      if (id === null || id === undefined) throw notMember();
      return { release: releaser(id) };
    },
  };
}
