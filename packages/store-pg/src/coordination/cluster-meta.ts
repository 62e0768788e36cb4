import type { Coordination } from "./context";

/** First key of the lock that serialises creating cluster values; the second is the schema's hash. */
const META_LOCK_CLASS = 0x5357_424d; // "SWBM"

/**
 * A value created once per schema and the same for every instance afterwards. The common case is
 * one read; when the value is missing, creation runs under a transaction-level advisory lock, so of
 * several instances starting at once exactly one creates it and the others read what it wrote.
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
  return coordination.db.transaction(`creating cluster value ${name}`, async (client) => {
    await client.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", [
      META_LOCK_CLASS,
      `${coordination.schema}.cluster_meta`,
    ]);
    const again = await client.query<{ value: string }>(`SELECT value FROM ${table} WHERE name = $1`, [name]);
    if (again.rows[0]) return again.rows[0].value;
    const value = create();
    await client.query(`INSERT INTO ${table} (name, value) VALUES ($1, $2)`, [name, value]);
    return value;
  });
}
