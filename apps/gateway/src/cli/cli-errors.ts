import type { ErrorCode } from "@switchboard/core";

/** Exit codes of the `switchboard` CLI. */
export const EXIT = {
  ok: 0,
  /** Unreachable gateway, timeout, failed run, damaged data, anything else. */
  failure: 1,
  /** Unknown command or flag, missing or malformed argument. */
  usage: 2,
  /** The gateway refused: FORBIDDEN, UNAUTHORIZED, or a tool result with status `forbidden`. */
  refused: 3,
} as const;

/** Bad command line: printed with the command's usage line, exit 2. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly usage?: string,
    readonly command?: string,
  ) {
    super(message);
    this.name = "UsageError";
  }
}

/** A failure the CLI already put in words, with its exit code (e.g. a tool's `forbidden` result). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
    readonly code?: string,
  ) {
    super(message);
    this.name = "CliError";
  }
}

const REFUSED_CODES: ReadonlySet<string> = new Set<ErrorCode>(["FORBIDDEN", "UNAUTHORIZED"]);

/** The protocol error code of an error, if it has one (works across module copies of core). */
export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

export function exitCodeFor(error: unknown): number {
  if (error instanceof UsageError) return EXIT.usage;
  if (error instanceof CliError) return error.exitCode;
  const code = errorCode(error);
  return code !== undefined && REFUSED_CODES.has(code) ? EXIT.refused : EXIT.failure;
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}
