import { afterEach, expect, it } from "vitest";
import { adminQuery, describeWithPg, dropSchema, TEST_PG_URL, testSchemaName } from "../test/pg-harness";
import { checkPostgresStore } from "./doctor";
import { SCHEMA_VERSION } from "./migrations";
import { openPostgresStore } from "./pg-store";
import { closedPort } from "./tcp-proxy";

const schemas: string[] = [];
afterEach(async () => {
  await Promise.all(schemas.splice(0).map(dropSchema));
});
const fresh = () => {
  const schema = testSchemaName();
  schemas.push(schema);
  return schema;
};

await describeWithPg("PostgreSQL store doctor check", () => {
  it("reports a missing schema as info and a current one as healthy, changing nothing", async () => {
    const schema = fresh();
    const missing = await checkPostgresStore({ url: TEST_PG_URL, schema });
    expect(missing).toMatchObject({ reachable: true, supported: SCHEMA_VERSION });
    expect(missing.issues.map((issue) => [issue.severity, issue.code])).toEqual([["info", "schema-missing"]]);
    const exists = await adminQuery("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
    expect(exists.rowCount).toBe(0);

    const store = await openPostgresStore({ url: TEST_PG_URL, schema });
    await store.close();
    const healthy = await checkPostgresStore({ url: TEST_PG_URL, schema });
    expect(healthy).toMatchObject({ version: SCHEMA_VERSION, issues: [] });
    expect(healthy.estimatedRows).toBeDefined();
  });

  it("flags a schema newer than this build as an error naming both versions", async () => {
    const schema = fresh();
    await (await openPostgresStore({ url: TEST_PG_URL, schema })).close();
    await adminQuery(`INSERT INTO "${schema}".schema_migrations (version, name) VALUES ($1, 'future')`, [
      SCHEMA_VERSION + 5,
    ]);
    const newer = await checkPostgresStore({ url: TEST_PG_URL, schema });
    expect(newer.issues).toEqual([
      expect.objectContaining({
        severity: "error",
        code: "schema-newer",
        message: expect.stringContaining(
          `version ${SCHEMA_VERSION + 5}, newer than this Switchboard supports (${SCHEMA_VERSION})`,
        ),
      }),
    ]);
  });

  it("reports an unreachable server as an error without the password", async () => {
    const url = new URL(TEST_PG_URL);
    url.port = String(await closedPort());
    url.password = "doctor-secret";
    const down = await checkPostgresStore({
      url: url.toString(),
      schema: "switchboard",
      connectTimeoutMs: 1000,
    });
    expect(down.reachable).toBe(false);
    expect(down.issues).toHaveLength(1);
    expect(down.issues[0]).toMatchObject({ severity: "error", code: "postgres-unreachable" });
    expect(JSON.stringify(down)).not.toContain("doctor-secret");
  });
});
