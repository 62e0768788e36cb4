import { randomUUID } from "node:crypto";
import pg from "pg";

/**
 * Helpers for test suites that run against a real PostgreSQL server (this package's and the
 * gateway's). Not for production use: `dropTestSchema` erases a schema.
 */

/** The server test suites use: SWITCHBOARD_TEST_PG_URL, else the local default. */
export function testPgUrl(): string {
  return process.env.SWITCHBOARD_TEST_PG_URL || "postgres://postgres@127.0.0.1:5432/test";
}

let probe: Promise<string | undefined> | undefined;

/** Undefined when the test server answers; else why not. Asked once per process. */
export function pgUnavailableReason(): Promise<string | undefined> {
  probe ??= (async () => {
    const client = new pg.Client({ connectionString: testPgUrl(), connectionTimeoutMillis: 3000 });
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

/** A schema name of its own for one test (`<prefix>_<pid>_<random>`), to drop afterwards. */
export function testSchemaName(prefix = "sbtest"): string {
  return `${prefix}_${process.pid}_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

/** Runs one statement on a short-lived connection of its own (setup, inspection, fault injection). */
export async function adminQuery<R extends pg.QueryResultRow = pg.QueryResultRow>(
  text: string,
  values?: unknown[],
  url = testPgUrl(),
): Promise<pg.QueryResult<R>> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on("error", () => undefined);
  await client.connect();
  try {
    return await client.query<R>(text, values);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Drops a test schema and everything in it. */
export async function dropTestSchema(schema: string, url = testPgUrl()): Promise<void> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) throw new Error(`not a schema name: ${schema}`);
  await adminQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`, [], url);
}

export { closedPort, TcpProxy } from "./tcp-proxy";
