import type { Coordination } from "./context";

/**
 * A value created once per schema and the same for every instance afterwards: the first instance
 * to insert it wins (`ON CONFLICT DO NOTHING`), every other one reads what won. One statement, so
 * no lock is needed; `create` may run on several instances, only one result is kept.
 */
export async function clusterValue(
  coordination: Coordination,
  name: string,
  create: () => string,
): Promise<string> {
  const table = coordination.q("cluster_meta");
  const found = await coordination.db.read<{ value: string }>(
    `reading cluster value ${name}`,
    `SELECT value FROM ${table} WHERE name = $1`,
    [name],
  );
  if (found.rows[0]) return found.rows[0].value;
  const written = await coordination.db.query<{ value: string }>(
    `creating cluster value ${name}`,
    `WITH inserted AS (
       INSERT INTO ${table} (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING value
     )
     SELECT value FROM inserted UNION ALL SELECT value FROM ${table} WHERE name = $1`,
    [name, create()],
  );
  // The CTE's snapshot cannot see a row another instance committed during this statement; the
  // conflict still stops our insert, so read once more.
  if (written.rows[0]) return written.rows[0].value;
  const again = await coordination.db.read<{ value: string }>(
    `reading cluster value ${name}`,
    `SELECT value FROM ${table} WHERE name = $1`,
    [name],
  );
  return again.rows[0]!.value;
}
