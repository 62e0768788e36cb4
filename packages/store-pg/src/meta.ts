import { type MetaStore, validateMetaName, validateMetaValue } from "@switchboard/core";
import type { Db } from "./db";
import type { KeyedSerializer } from "./serial";
import { pgText } from "./versions";

/** `inOrder` orders writes per name. */
export function createMetaStore(db: Db, q: (table: string) => string, inOrder: KeyedSerializer): MetaStore {
  const table = q("meta");
  return {
    async get(name) {
      const found = await db.read<{ value: string }>(
        "reading meta",
        `SELECT value FROM ${table} WHERE name = $1`,
        [pgText(validateMetaName(name))],
      );
      return found.rows[0]?.value;
    },
    async set(name, value) {
      const key = pgText(validateMetaName(name));
      const stored = JSON.stringify(validateMetaValue(value));
      await inOrder.run(key, () =>
        db.query(
          `writing meta ${key}`,
          `INSERT INTO ${table} (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`,
          [key, stored],
        ),
      );
    },
  };
}
