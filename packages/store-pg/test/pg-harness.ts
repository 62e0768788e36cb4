import { randomUUID } from "node:crypto";
import pg from "pg";
import { describe, it } from "vitest";

/** The server the PostgreSQL suites use (spec: SWITCHBOARD_TEST_PG_URL, this default otherwise). */
export const TEST_PG_URL = process.env.SWITCHBOARD_TEST_PG_URL || "postgres://postgres@127.0.0.1:5432/test";

let probe: Promise<string | undefined> | undefined;

/** Undefined when the server answers; else why not. Asked once per test file. */
export function pgUnavailableReason(): Promise<string | undefined> {
  probe ??= (async () => {
    const client = new pg.Client({ connectionString: TEST_PG_URL, connectionTimeoutMillis: 3000 });
    client.on("error", () => undefined);
    try {
      await client.connect();
      await client.query("SELECT 1");
      return undefined;
    } catch (error) {
      return (error as Error).message || String(error);
    } finally {
      await client.end().catch(() => undefined);
    }
  })();
  return probe;
}

/**
 * Registers `body` when PostgreSQL is reachable. Without a server the suite is skipped with a
 * printed notice, unless SWITCHBOARD_REQUIRE_PG=1 (CI), which turns the missing server into a
 * failing test.
 */
export async function describeWithPg(name: string, body: () => void): Promise<void> {
  const reason = await pgUnavailableReason();
  if (reason === undefined) {
    body();
    return;
  }
  const notice = `PostgreSQL not reachable at ${TEST_PG_URL.replace(/:[^:@/]*@/, ":***@")} (${reason})`;
  if (process.env.SWITCHBOARD_REQUIRE_PG === "1") {
    describe(name, () => {
      it("needs PostgreSQL (SWITCHBOARD_REQUIRE_PG=1)", () => {
        throw new Error(`${notice}; set SWITCHBOARD_TEST_PG_URL or start a server`);
      });
    });
    return;
  }
  console.warn(`[store-pg] skipping "${name}": ${notice}; set SWITCHBOARD_TEST_PG_URL to run it`);
  describe.skip(name, () => {
    it("needs PostgreSQL", () => undefined);
  });
}

/** A schema name of its own for one test (dropped by `dropSchema`). */
export function testSchemaName(): string {
  return `sbtest_${process.pid}_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

/** Runs one statement on a short-lived connection of its own (setup, inspection, fault injection). */
export async function adminQuery<R extends pg.QueryResultRow = pg.QueryResultRow>(
  text: string,
  values?: unknown[],
): Promise<pg.QueryResult<R>> {
  const client = new pg.Client({ connectionString: TEST_PG_URL, connectionTimeoutMillis: 5000 });
  client.on("error", () => undefined);
  await client.connect();
  try {
    return await client.query<R>(text, values);
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function dropSchema(schema: string): Promise<void> {
  await adminQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}
