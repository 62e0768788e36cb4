import pg from "pg";
import { connectionFault, toStoreError } from "./errors";
import { quoteIdent, SCHEMA_VERSION } from "./migrations";
import { describeTarget, passwordOf } from "./url";

export interface PostgresIssue {
  /** `error`: the gateway will not start on it; `warning`: it starts, something is missing; `info`: worth knowing. */
  severity: "error" | "warning" | "info";
  code: "postgres-unreachable" | "schema-missing" | "schema-newer" | "schema-older" | "search-index-missing";
  message: string;
  fix?: string;
}

export interface PostgresCheck {
  /** `host:port/database` (never the URL: it may hold the password). */
  target: string;
  schema: string;
  reachable: boolean;
  /** The schema's version; undefined when the schema does not exist yet (or the server is unreachable). */
  version?: number;
  /** The version this build writes. */
  supported: number;
  /** Row counts as the planner estimates them (cheap at any size; exact after ANALYZE). */
  estimatedRows?: { sessions: number; transcriptEntries: number; runs: number; auditRecords: number };
  issues: PostgresIssue[];
}

/**
 * Read-only health check of a PostgreSQL store for `switchboard doctor`: the connection, the
 * schema and its version against this build's, the optional search index. Changes nothing (a
 * missing or older schema is what the next start creates or migrates).
 */
export async function checkPostgresStore(options: {
  url: string;
  schema: string;
  connectTimeoutMs?: number;
}): Promise<PostgresCheck> {
  const target = describeTarget(options.url);
  const check: PostgresCheck = {
    target,
    schema: options.schema,
    reachable: false,
    supported: SCHEMA_VERSION,
    issues: [],
  };
  const client = new pg.Client({
    connectionString: options.url,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
    application_name: "switchboard-doctor",
  });
  client.on("error", () => undefined);
  try {
    await client.connect();
    check.reachable = true;
    const q = (table: string) => `${quoteIdent(options.schema)}.${table}`;
    const tables = await client.query<{ name: string }>(
      "SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1",
      [options.schema],
    );
    const names = new Set(tables.rows.map((row) => row.name));
    if (!names.has("schema_migrations")) {
      check.issues.push({
        severity: "info",
        code: "schema-missing",
        message: `schema "${options.schema}" has no Switchboard tables yet; the gateway creates them at start`,
      });
      return check;
    }
    const found = await client.query<{ version: number }>(
      `SELECT coalesce(max(version), 0)::int AS version FROM ${q("schema_migrations")}`,
    );
    check.version = found.rows[0]?.version ?? 0;
    if (check.version > SCHEMA_VERSION) {
      check.issues.push({
        severity: "error",
        code: "schema-newer",
        message: `schema "${options.schema}" is at version ${check.version}, newer than this Switchboard supports (${SCHEMA_VERSION}); the gateway refuses to start on it`,
        fix: "upgrade Switchboard, or configure another store.schema",
      });
    } else if (check.version < SCHEMA_VERSION) {
      check.issues.push({
        severity: "info",
        code: "schema-older",
        message: `schema "${options.schema}" is at version ${check.version}; the gateway migrates it to ${SCHEMA_VERSION} at start`,
      });
    }
    if (names.has("session_search") && !names.has("session_search_trgm")) {
      check.issues.push({
        severity: "warning",
        code: "search-index-missing",
        message:
          "the trigram index for sessions.list search is missing (pg_trgm not installed): search scans newest first",
        fix: "as a database owner: CREATE EXTENSION pg_trgm; the gateway adds the index at its next start",
      });
    }
    const estimates = await client.query<{ name: string; rows: number }>(
      `SELECT c.relname AS name, greatest(c.reltuples, 0)::float8 AS rows FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relname IN ('sessions', 'transcript_entries', 'runs', 'audit_records')`,
      [options.schema],
    );
    const rows = new Map(estimates.rows.map((row) => [row.name, Math.round(row.rows)]));
    check.estimatedRows = {
      sessions: rows.get("sessions") ?? 0,
      transcriptEntries: rows.get("transcript_entries") ?? 0,
      runs: rows.get("runs") ?? 0,
      auditRecords: rows.get("audit_records") ?? 0,
    };
  } catch (error) {
    const message = toStoreError(error, {
      action: `checking schema ${options.schema}`,
      target,
      password: passwordOf(options.url),
    }).message;
    check.issues.push({
      severity: "error",
      code: "postgres-unreachable",
      message:
        connectionFault(error) !== undefined || !check.reachable
          ? message
          : `cannot read the schema: ${message}`,
      fix: `check that PostgreSQL runs at ${target} and that store.url (or the variable store.urlEnv names) is right`,
    });
  } finally {
    await client.end().catch(() => undefined);
  }
  return check;
}
