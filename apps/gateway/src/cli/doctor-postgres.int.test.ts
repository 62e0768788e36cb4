import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openPostgresStore } from "@switchboard/store-pg";
import {
  adminQuery,
  dropTestSchema,
  pgUnavailableReason,
  testPgUrl,
  testSchemaName,
} from "@switchboard/store-pg/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "./main";
import type { CliIo } from "./output";

async function run(argv: string[], env: Record<string, string> = {}) {
  let stdout = "";
  const io: CliIo = {
    out: (text) => {
      stdout += text.endsWith("\n") ? text : `${text}\n`;
    },
    err: () => undefined,
    interactive: false,
  };
  const code = await runCli(argv, io, env);
  return { code, stdout };
}

const unavailable = await pgUnavailableReason();
const requirePg = process.env.SWITCHBOARD_REQUIRE_PG === "1";
if (unavailable !== undefined && !requirePg)
  console.warn(
    `[doctor-postgres.int.test] skipped: no PostgreSQL (${unavailable}); set SWITCHBOARD_TEST_PG_URL`,
  );

describe.skipIf(unavailable !== undefined && !requirePg)("switchboard doctor on a postgres store", () => {
  let dir: string;
  const schema = testSchemaName("sbdoc");
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "switchboard-doctor-pg-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
    await dropTestSchema(schema);
  });

  it("checks the connection and the schema version, from urlEnv", async () => {
    if (unavailable !== undefined)
      throw new Error(`SWITCHBOARD_REQUIRE_PG=1 but no PostgreSQL: ${unavailable}`);
    const config = join(dir, "pg.json5");
    await writeFile(config, `{ store: { kind: "postgres", urlEnv: "DOCTOR_PG_URL", schema: "${schema}" } }`);
    const args = ["doctor", "--config", config, "--data-dir", join(dir, "data")];

    const unset = await run(args);
    expect(unset.code).toBe(1);
    expect(unset.stdout).toMatch(
      /invalid-config: store\.urlEnv: the environment variable DOCTOR_PG_URL is not set/,
    );

    const env = { DOCTOR_PG_URL: testPgUrl() };
    const before = await run(args, env);
    expect(before.stdout).toContain(`schema ${schema} — not created yet`);
    expect(before.stdout).toMatch(/schema-missing/);
    expect(before.code).toBe(0);

    await (await openPostgresStore({ url: testPgUrl(), schema })).close();
    const current = await run([...args, "--json"], env);
    expect(current.code).toBe(0);
    expect(JSON.parse(current.stdout).postgres).toMatchObject({ schema, reachable: true, issues: [] });

    await adminQuery(`INSERT INTO "${schema}".schema_migrations (version, name) VALUES (999, 'future')`);
    const newer = await run(args, env);
    expect(newer.code).toBe(1);
    expect(newer.stdout).toMatch(
      /✗ error\s+schema-newer: schema "[^"]+" is at version 999, newer than this Switchboard supports/,
    );
  });
});
