import { z } from "zod";

/** The protocol's error codes (protocol.md). Wire errors carry exactly these. */
export const ERROR_CODES = [
  "INVALID_REQUEST",
  "UNAUTHORIZED",
  "FORBIDDEN",
  "NOT_FOUND",
  "CONFLICT",
  "TIMEOUT",
  "UNAVAILABLE",
  "RATE_LIMITED",
  "PAYLOAD_TOO_LARGE",
  "INTERNAL",
] as const;

export const ErrorCodeSchema = z.enum(ERROR_CODES);
export type ErrorCode = z.infer<typeof ErrorCodeSchema>;

/** The error object inside a failed response frame. */
export const WireErrorSchema = z.object({
  code: ErrorCodeSchema,
  message: z.string(),
  details: z.unknown().optional(),
  retryable: z.boolean().optional(),
});
export type WireError = z.infer<typeof WireErrorSchema>;

export interface SwitchboardErrorOptions {
  details?: unknown;
  cause?: unknown;
  retryable?: boolean;
}

/**
 * Brand of every SwitchboardError. `Symbol.for` is shared by the whole realm, so an error thrown by
 * one copy of core (a bundled CLI, a second install in node_modules, dist next to sources in tests)
 * is still recognised by another copy, where a plain `instanceof` would say no.
 */
const SWITCHBOARD_ERROR_BRAND: unique symbol = Symbol.for("switchboard.error") as never;

/**
 * The one base error of the project. Local failures (bad config, bad key, store errors) and
 * failures that will cross the wire share it, so a caller can always switch on `code`.
 */
export class SwitchboardError extends Error {
  readonly code: ErrorCode;
  readonly details: unknown;
  readonly retryable: boolean | undefined;

  constructor(code: ErrorCode, message: string, options: SwitchboardErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SwitchboardError";
    this.code = code;
    this.details = options.details;
    this.retryable = options.retryable;
    // Non-enumerable so it never shows in logs, equality checks or spreads.
    Object.defineProperty(this, SWITCHBOARD_ERROR_BRAND, { value: true });
  }

  /**
   * `instanceof SwitchboardError` honours the brand, so it works across module copies. Subclasses
   * keep the ordinary prototype check: a brand says "some SwitchboardError", not which subclass.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this === SwitchboardError) return isSwitchboardError(value);
    return Function.prototype[Symbol.hasInstance].call(this, value);
  }

  /** The wire form; `cause` stays local so stack traces and internals never leave the process. */
  toWire(): WireError {
    const wire: WireError = { code: this.code, message: this.message };
    if (this.details !== undefined) wire.details = this.details;
    if (this.retryable !== undefined) wire.retryable = this.retryable;
    return wire;
  }

  static fromWire(wire: WireError): SwitchboardError {
    return new SwitchboardError(wire.code, wire.message, {
      details: wire.details,
      retryable: wire.retryable,
    });
  }
}

/** True for a SwitchboardError from any copy of core (see the brand above). */
export function isSwitchboardError(value: unknown): value is SwitchboardError {
  return (
    typeof value === "object" &&
    value !== null &&
    (value as { [SWITCHBOARD_ERROR_BRAND]?: unknown })[SWITCHBOARD_ERROR_BRAND] === true
  );
}

/** Turns a zod error into one readable line per issue: `path.to[1].field: reason`. */
export function formatZodIssues(error: z.ZodError, rootLabel = ""): string[] {
  return error.issues.map((issue) => {
    const path = formatPath(issue.path as PropertyKey[]);
    const where = path === "" ? rootLabel || "(root)" : rootLabel ? `${rootLabel}.${path}` : path;
    return `${where}: ${issue.message}`;
  });
}

export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += out === "" ? String(part) : `.${String(part)}`;
  }
  return out;
}

/**
 * Errors answering a request name at most this many issues, each cut to a bounded length: a hostile
 * request can carry hundreds of thousands (one per element of a huge array), and an issue's path
 * holds the sender's own keys, so an unbounded answer is many times the request's size.
 */
export const MAX_REPORTED_ISSUES = 8;
export const MAX_ISSUE_CHARS = 240;

function clipIssue(text: string): string {
  return text.length <= MAX_ISSUE_CHARS ? text : `${text.slice(0, MAX_ISSUE_CHARS - 1)}…`;
}

/** Issue lines joined for an answer: the first `MAX_REPORTED_ISSUES`, each clipped, then "and N more". */
export function boundedIssueText(lines: readonly string[]): string {
  const named = lines.slice(0, MAX_REPORTED_ISSUES).map(clipIssue).join("; ");
  return lines.length > MAX_REPORTED_ISSUES
    ? `${named}; and ${lines.length - MAX_REPORTED_ISSUES} more`
    : named;
}

/**
 * An INVALID_REQUEST error built from a zod failure, naming each bad field (the first
 * `MAX_REPORTED_ISSUES` of them; `details.omittedIssues` counts the rest).
 */
export function invalidRequestFromZod(error: z.ZodError, rootLabel = ""): SwitchboardError {
  const reported = error.issues.slice(0, MAX_REPORTED_ISSUES);
  const omitted = error.issues.length - reported.length;
  return new SwitchboardError("INVALID_REQUEST", boundedIssueText(formatZodIssues(error, rootLabel)), {
    details: {
      issues: reported.map((i) => ({
        path: clipIssue(formatPath(i.path as PropertyKey[])),
        message: clipIssue(i.message),
      })),
      ...(omitted > 0 ? { omittedIssues: omitted } : {}),
    },
  });
}
