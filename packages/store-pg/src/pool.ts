import type { Logger } from "@switchboard/core";
import pg from "pg";
import { type ErrorContext, toStoreError } from "./errors";

/** What the store's pool and the cluster coordination's pool are opened with. */
export interface PoolSettings {
  url: string;
  max: number;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  /** The server ends a transaction left idle this long (unset: never). */
  idleInTransactionTimeoutMs?: number;
  applicationName: string;
  /**
   * Server settings of every connection, sent with the connection's start-up (`-c name=value`, after
   * any `PGOPTIONS`). An `options` parameter in the URL replaces them (node-postgres lets it win).
   */
  sessionSettings?: Record<string, string>;
}

/** Settings of any connection, pooled or dedicated (migrations, LISTEN, session locks). */
export function connectionConfig(settings: PoolSettings): pg.ClientConfig {
  return {
    connectionString: settings.url,
    connectionTimeoutMillis: settings.connectTimeoutMs,
    keepAlive: true,
    application_name: settings.applicationName,
    ...startupOptions(settings.sessionSettings),
  };
}

function startupOptions(sessionSettings: Record<string, string> | undefined): { options?: string } {
  const own = Object.entries(sessionSettings ?? {}).map(([name, value]) => `-c ${name}=${value}`);
  if (own.length === 0) return {};
  return { options: [process.env.PGOPTIONS, ...own].filter(Boolean).join(" ") };
}

/**
 * A pool whose lost connections are logged instead of crashing the process: an idle connection the
 * server drops (restart, `pg_terminate_backend`) emits `error` on the pool, a checked-out one (inside
 * a transaction, between its statements) on the client, where the pool's listener is not. The
 * statement in flight, or the next one, fails with UNAVAILABLE and the pool drops the client.
 */
export function openPool(
  settings: PoolSettings,
  where: Omit<ErrorContext, "action">,
  logger: Logger,
): pg.Pool {
  const pool = new pg.Pool({
    ...connectionConfig(settings),
    max: settings.max,
    // The server stops the statement; the client-side timeout also covers a server that stopped answering.
    statement_timeout: settings.statementTimeoutMs,
    query_timeout: settings.statementTimeoutMs + 5_000,
    ...(settings.idleInTransactionTimeoutMs !== undefined
      ? { idle_in_transaction_session_timeout: settings.idleInTransactionTimeoutMs }
      : {}),
    idleTimeoutMillis: 30_000,
  });
  const lost = (error: Error, action: string) =>
    logger.warn(
      { target: where.target, error: toStoreError(error, { ...where, action }).message },
      "PostgreSQL connection lost",
    );
  pool.on("error", (error) => lost(error, "while idle"));
  pool.on("connect", (client) => {
    client.on("error", (error) => lost(error, "while in use"));
  });
  return pool;
}
