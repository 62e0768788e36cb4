/**
 * Exit codes of the `switchboard` CLI: one table for every Switchboard binary, defined once with
 * `switchboard-agent` (0 ok; 1 unreachable gateway, timeout, failed run, damaged data, anything
 * else; 2 unknown command or flag, malformed argument, invalid config; 3 refused: FORBIDDEN,
 * UNAUTHORIZED, or a tool result with status `forbidden`).
 */
import { EXIT, exitCodeFor as protocolExitCode } from "@switchboard/agent/exit-codes";

export { EXIT };

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
    /** Extra fields for the `--json` error object (e.g. a config's `issues`). */
    readonly details?: Record<string, unknown>,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "CliError";
  }
}

/** `code` of the `--json` error object for a bad command line. */
export const USAGE_CODE = "USAGE";
/** `code` of the `--json` error object for a config file that does not load or validate. */
export const INVALID_CONFIG_CODE = "INVALID_CONFIG";

/** The protocol error code of an error, if it has one (works across module copies of core). */
export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

export function exitCodeFor(error: unknown): number {
  if (error instanceof UsageError) return EXIT.usage;
  if (error instanceof CliError) return error.exitCode;
  // A protocol error by the table every binary shares: the gateway's INVALID_REQUEST names an
  // argument the user gave (2), FORBIDDEN/UNAUTHORIZED is a refusal (3), anything else 1.
  return protocolExitCode(error);
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}
