/**
 * Exit codes of every Switchboard binary: `switchboard-agent` here, and the `switchboard` CLI
 * imports this table (apps/gateway/src/cli/cli-errors.ts), so scripts read them the same way.
 */
export const EXIT = {
  ok: 0,
  /** The gateway could not be reached, the connection ended for good, anything else. */
  failure: 1,
  /** A bad flag, an unreadable or invalid config file, an unknown agent id or a bad model config. */
  usage: 2,
  /** The gateway refused the worker: wrong token (UNAUTHORIZED) or a role that may not serve (FORBIDDEN). */
  refused: 3,
} as const;

/** A second SIGINT/SIGTERM while stopping: exit at once, as a shell reports an interrupt. */
export const EXIT_INTERRUPTED = 130;

const REFUSED_CODES: ReadonlySet<string> = new Set(["UNAUTHORIZED", "FORBIDDEN"]);

/** The exit code for why the worker could not start or had to stop. */
export function exitCodeFor(error: unknown): number {
  const code = (error as { code?: unknown } | null)?.code;
  if (code === "INVALID_REQUEST") return EXIT.usage;
  return typeof code === "string" && REFUSED_CODES.has(code) ? EXIT.refused : EXIT.failure;
}
