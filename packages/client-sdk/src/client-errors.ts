import {
  type ErrorCode,
  formatPath,
  formatZodIssues,
  isSwitchboardError,
  SwitchboardError,
} from "@switchboard/core";
import type { z } from "zod";

export function invalidParams(method: string, error: z.ZodError): SwitchboardError {
  return new SwitchboardError(
    "INVALID_REQUEST",
    `invalid params for ${method}: ${formatZodIssues(error).join("; ")}`,
    {
      details: {
        method,
        issues: error.issues.map((issue) => ({
          path: formatPath(issue.path as PropertyKey[]),
          message: issue.message,
        })),
      },
    },
  );
}

export function invalidResult(what: string, error: z.ZodError): SwitchboardError {
  return new SwitchboardError(
    "INTERNAL",
    `the gateway's ${what} does not match the protocol schema: ${formatZodIssues(error).join("; ")}`,
    {
      details: {
        issues: error.issues.map((issue) => ({
          path: formatPath(issue.path as PropertyKey[]),
          message: issue.message,
        })),
      },
    },
  );
}

export function timeoutError(method: string, timeoutMs: number): SwitchboardError {
  return new SwitchboardError("TIMEOUT", `${method} got no response within ${timeoutMs} ms`, {
    retryable: true,
    details: { method, timeoutMs },
  });
}

export function connectionLostError(method: string, reason: SwitchboardError): SwitchboardError {
  return new SwitchboardError(
    "UNAVAILABLE",
    `the connection was lost while ${method} was in flight, so it may or may not have taken effect (${reason.message})`,
    { retryable: true, cause: reason, details: { method } },
  );
}

/** What `fetch` does too: reject with the signal's reason, an `AbortError` DOMException by default. */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

export function isAbortError(error: unknown): boolean {
  return typeof error === "object" && error !== null && (error as { name?: unknown }).name === "AbortError";
}

export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}

export function toSwitchboardError(error: unknown, code: ErrorCode = "INTERNAL"): SwitchboardError {
  if (isSwitchboardError(error)) return error;
  return new SwitchboardError(code, describeError(error), { cause: error });
}

/** Handshake refusals that a retry cannot fix; reconnecting on them would only hammer the gateway. */
const FATAL_HANDSHAKE_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  "UNAUTHORIZED",
  "FORBIDDEN",
  "INVALID_REQUEST",
  "NOT_FOUND",
  "PAYLOAD_TOO_LARGE",
]);

export function isFatalHandshakeError(error: SwitchboardError): boolean {
  if (error.retryable !== undefined) return !error.retryable;
  return FATAL_HANDSHAKE_CODES.has(error.code);
}
