import { isSwitchboardError, SwitchboardError } from "@switchboard/core";

/** Node socket errors that mean "the server cannot be reached right now". */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
]);

/**
 * SQLSTATEs that say nothing about the request, only about the server right now (it restarts, is
 * full, refuses connections): the same request can succeed later. Class 08 is "connection
 * exception" as a whole.
 */
const TRANSIENT_SQLSTATES: Record<string, string> = {
  "57P01": "the server terminated the connection (admin shutdown or pg_terminate_backend)",
  "57P02": "the server crashed",
  "57P03": "the server is starting up or shutting down",
  "57P05": "the connection was idle too long",
  "53300": "too many connections",
  "53100": "the server's disk is full",
  "53200": "the server is out of memory",
  "57014": "the statement timed out (statementTimeoutMs) or was cancelled",
  "40001": "a serialization failure",
  "40P01": "a deadlock",
  "28P01": "password authentication failed",
  "28000": "the server refused the login",
  "3D000": "the database does not exist",
};

/** Messages node-postgres gives a dead or unusable connection (it sets no code for these). */
const CONNECTION_MESSAGES = [
  /Connection terminated/i,
  /timeout exceeded when trying to connect/i,
  /Query read timeout/i,
  /Client has encountered a connection error/i,
  /Client was closed and is not queryable/i,
  /Cannot use a pool after calling end/i,
  /connection (?:is )?(?:closed|lost)/i,
  /socket hang up/i,
];

interface PgLikeError {
  code?: string;
  message?: string;
}

/** Why the database is unreachable, or undefined when the error is about the request itself. */
export function connectionFault(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const { code, message = "" } = error as PgLikeError;
  if (code !== undefined) {
    if (NETWORK_CODES.has(code))
      return message.includes(code) ? message : `${message || "network error"} (${code})`;
    const known = TRANSIENT_SQLSTATES[code];
    if (known !== undefined) return `${known} (SQLSTATE ${code})`;
    if (code.startsWith("08")) return `${message || "connection exception"} (SQLSTATE ${code})`;
  }
  if (CONNECTION_MESSAGES.some((pattern) => pattern.test(message))) return message;
  // AggregateError from a host with several addresses: the first cause tells.
  const nested = (error as { errors?: unknown[] }).errors;
  if (Array.isArray(nested) && nested.length > 0) return connectionFault(nested[0]);
  return undefined;
}

export interface ErrorContext {
  /** What the store was doing, e.g. "appending to transcript 1b4e…". */
  action: string;
  /** `host:port/database` (never the URL: it may hold the password). */
  target: string;
  /** Scrubbed from any text that ends up in a message. */
  password: string;
  /** What to do about an unreachable database (default: retry once it is back). */
  hint?: string;
}

function scrub(text: string, password: string): string {
  return password === "" ? text : text.split(password).join("***");
}

/**
 * Turns a driver error into core's error: the database being unreachable or restarting becomes
 * UNAVAILABLE (retryable) naming the cause and where; a bug in our SQL or an unexpected server
 * error becomes INTERNAL with its SQLSTATE. SwitchboardErrors pass through.
 */
export function toStoreError(error: unknown, context: ErrorContext): SwitchboardError {
  if (isSwitchboardError(error)) return error;
  const fault = connectionFault(error);
  if (fault !== undefined) {
    return new SwitchboardError(
      "UNAVAILABLE",
      scrub(
        `PostgreSQL at ${context.target} is unavailable (${fault}) ${context.action}; ${context.hint ?? "the request was not completed, retry once the database is back"}`,
        context.password,
      ),
      { cause: error, retryable: true, details: { cause: fault, target: context.target } },
    );
  }
  const { code, message = String(error) } = (error ?? {}) as PgLikeError;
  return new SwitchboardError(
    "INTERNAL",
    scrub(
      `PostgreSQL error ${context.action}: ${message}${code ? ` (SQLSTATE ${code})` : ""}`,
      context.password,
    ),
    { cause: error, details: code ? { sqlstate: code } : undefined },
  );
}

/**
 * Whether a statement failed because its connection was dropped (not because the server is slow):
 * only then is a read worth trying again at once, on a new connection. A timeout is not retried, or
 * a hung server would cost the caller twice the timeout.
 */
export function isDroppedConnection(error: unknown): boolean {
  if (connectionFault(error) === undefined) return false;
  const { code, message = "" } = (error ?? {}) as PgLikeError;
  if (code === "57014" || code === "ETIMEDOUT") return false;
  return !/timeout/i.test(message);
}

/** A unique-index violation (SQLSTATE 23505), optionally of one constraint. */
export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const pg = error as { code?: string; constraint?: string } | undefined;
  return pg?.code === "23505" && (constraint === undefined || pg.constraint === constraint);
}
