import { recordingLogger, silentLogger } from "@switchboard/core";
import { sampleSession } from "@switchboard/core/testing";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { adminQuery, describeWithPg, dropSchema, TEST_PG_URL, testSchemaName } from "../test/pg-harness";
import { MIGRATIONS, migrate, SCHEMA_VERSION } from "./migrations";
import { openPostgresStore, type PostgresStore } from "./pg-store";

const schemas: string[] = [];
const stores: PostgresStore[] = [];
const freshSchema = () => {
  const schema = testSchemaName();
  schemas.push(schema);
  return schema;
};
const open = async (schema: string, extra: Partial<Parameters<typeof openPostgresStore>[0]> = {}) => {
  const store = await openPostgresStore({ url: TEST_PG_URL, schema, pool: { max: 2 }, ...extra });
  stores.push(store);
  return store;
};

afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close().catch(() => undefined)));
  await Promise.all(schemas.splice(0).map(dropSchema));
});

/** The URL with a password in it (the test server trusts every login, so any password works). */
function withPassword(url: string, password: string): string {
  const parsed = new URL(url);
  parsed.password = password;
  return parsed.toString();
}

await describeWithPg("PostgreSQL schema migrations", () => {
  describe("schema versions", () => {
    it("creates the schema at the current version and records it; a reopen migrates nothing", async () => {
      const schema = freshSchema();
      const first = await open(schema);
      expect(first.migration).toMatchObject({ from: 0, to: SCHEMA_VERSION });
      const recorded = await adminQuery<{ version: number; name: string }>(
        `SELECT version, name FROM "${schema}".schema_migrations ORDER BY version`,
      );
      expect(recorded.rows).toEqual(MIGRATIONS.map(({ version, name }) => ({ version, name })));
      await first.close();
      const again = await open(schema);
      expect(again.migration).toMatchObject({ from: SCHEMA_VERSION, to: SCHEMA_VERSION });
    });

    it("refuses a schema newer than it knows, naming both versions, and changes nothing", async () => {
      const schema = freshSchema();
      await (await open(schema)).close();
      const newer = SCHEMA_VERSION + 41;
      await adminQuery(
        `INSERT INTO "${schema}".schema_migrations (version, name) VALUES ($1, 'from the future')`,
        [newer],
      );
      const refused = open(schema);
      await expect(refused).rejects.toMatchObject({ code: "UNAVAILABLE" });
      await refused.catch((error: Error) => {
        expect(error.message).toContain(`version ${newer}`);
        expect(error.message).toContain(`(${SCHEMA_VERSION})`);
        expect(error.message).toContain(schema);
      });
      const recorded = await adminQuery(`SELECT count(*)::int AS n FROM "${schema}".schema_migrations`);
      expect(recorded.rows[0]).toEqual({ n: MIGRATIONS.length + 1 });
    });

    it("lets several instances open a new schema at once: one migrates, all work", async () => {
      const schema = freshSchema();
      const opened = await Promise.all(Array.from({ length: 4 }, () => open(schema)));
      expect(opened.filter((store) => store.migration.from === 0)).toHaveLength(1);
      const recorded = await adminQuery(`SELECT count(*)::int AS n FROM "${schema}".schema_migrations`);
      expect(recorded.rows[0]).toEqual({ n: MIGRATIONS.length });
      await opened[0]!.meta.set("probe", "from the first");
      expect(await opened[3]!.meta.get("probe")).toBe("from the first");
    });

    it("upgrades a version-1 schema with data in it: exact count from its rows, search text moved", async () => {
      const fresh = freshSchema();
      const old = new pg.Client({ connectionString: TEST_PG_URL });
      await old.connect();
      try {
        expect(await migrate(old, fresh, silentLogger, MIGRATIONS.slice(0, 1))).toMatchObject({
          from: 0,
          to: 1,
        });
      } finally {
        await old.end();
      }
      // Rows a version-1 store wrote.
      await adminQuery(
        `INSERT INTO "${fresh}".sessions (key, session_id, agent_id, updated_at, taint_rank, rest, kind_base, key_lc, version, row)
         SELECT 'agent:main:s' || i, gen_random_uuid(), 'main', i, 0, 's' || i, 'other', 'agent:main:s' || i, i, '{}'
         FROM generate_series(1, 3) AS i`,
      );
      const store = await open(fresh);
      expect(store.migration).toMatchObject({ from: 1, to: SCHEMA_VERSION });
      expect(await store.sessions.count()).toBe(3);
      // Their search text moved to the side table (migration 3).
      expect((await store.sessions.list({ limit: 5, search: "MAIN:S2" })).entries).toHaveLength(1);
      const row = sampleSession();
      await store.sessions.put(row);
      await store.sessions.put({ ...row, label: "again" });
      expect(await store.sessions.count()).toBe(4);
      await store.sessions.delete("agent:main:s1");
      await store.sessions.delete("agent:main:absent");
      expect(await store.sessions.count()).toBe(3);
    });

    it("keeps instances on different schemas apart", async () => {
      const [a, b] = [freshSchema(), freshSchema()];
      const first = await open(a);
      const second = await open(b);
      await first.meta.set("who", "a");
      expect(await second.meta.get("who")).toBeUndefined();
    });
  });

  describe("options and secrets", () => {
    it("never logs the password of the URL", async () => {
      const password = "pw-never-in-logs-7f3a";
      const { logger, entries } = recordingLogger();
      const store = await open(freshSchema(), { url: withPassword(TEST_PG_URL, password), logger });
      await store.meta.set("x", "1");
      await store.close();
      expect(entries.length).toBeGreaterThan(0);
      const logged = JSON.stringify(entries);
      expect(logged).not.toContain(password);
      expect(logged).toContain("***");
    });

    it("refuses bad options naming the field", async () => {
      await expect(openPostgresStore({ url: "mysql://x", schema: "s" })).rejects.toThrow(
        /store\.url: must start with postgres:\/\//,
      );
      await expect(openPostgresStore({ url: TEST_PG_URL, schema: "Bad-Name" })).rejects.toMatchObject({
        code: "INVALID_REQUEST",
        message: expect.stringMatching(/store\.schema: must be a schema name/),
      });
      await expect(openPostgresStore({ url: TEST_PG_URL, pool: { max: 0 } })).rejects.toThrow(
        /store\.pool\.max/,
      );
    });
  });

  describe("indexes", () => {
    it("plans the list and tail-read queries on their indexes", async () => {
      const schema = freshSchema();
      const store = await open(schema);
      expect(store.migration.searchIndex).toBe(true);
      // Enough rows that the planner prefers an index to a scan of the whole table.
      await adminQuery(
        `INSERT INTO "${schema}".sessions (key, session_id, agent_id, updated_at, taint_rank, rest, kind_base, key_lc, version, row, spawned_by)
         SELECT 'agent:a' || (i % 50) || ':s' || i, gen_random_uuid(), 'a' || (i % 50), i, 0, 's' || i, 'other', 'agent:a' || (i % 50) || ':s' || i, i, '{}',
           CASE WHEN i % 100 = 0 THEN 'agent:a0:main' END
         FROM generate_series(1, 20000) AS i`,
      );
      await adminQuery(`ANALYZE "${schema}".sessions`);
      await adminQuery(`ANALYZE "${schema}".session_search`);
      const plan = async (sql: string) =>
        JSON.stringify((await adminQuery(`EXPLAIN (FORMAT JSON) ${sql}`)).rows[0]);
      const list = (where: string) =>
        `SELECT row FROM "${schema}".sessions WHERE archived_at IS NULL ${where} ORDER BY updated_at DESC, key LIMIT 50`;
      expect(await plan(list(""))).toContain("sessions_recent");
      expect(await plan(list("AND agent_id = 'a7'"))).toContain("sessions_agent_recent");
      expect(await plan(list("AND spawned_by = 'agent:a0:main'"))).toContain("sessions_spawned_by_recent");
      expect(await plan(list("AND updated_at >= 19000"))).toContain("sessions_recent");
      // A substring search: at this size a scan is cheaper, so ask whether the index *can* serve the
      // condition's shape (at 200k rows the planner picks it by itself for a rare term).
      const search = `SET enable_seqscan = off; SET enable_indexscan = off; EXPLAIN (FORMAT JSON) ${list(`AND EXISTS (SELECT 1 FROM "${schema}".session_search s WHERE s.key = "${schema}".sessions.key AND (s.key_lc LIKE '%s1234%' OR s.name_lc LIKE '%s1234%' OR s.label_lc LIKE '%s1234%'))`)}`;
      const results = (await adminQuery(search)) as unknown as { rows: unknown[] }[];
      expect(JSON.stringify(results[2]!.rows[0])).toContain("session_search_trgm");
      expect(
        await plan(
          `SELECT seq, bytes, entry FROM "${schema}".transcript_entries WHERE transcript_id = 1 AND seq < 100 ORDER BY seq DESC LIMIT 50`,
        ),
      ).toContain("transcript_entries_pkey");
    });
  });
});
