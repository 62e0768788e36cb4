import { SwitchboardError } from "@switchboard/core";

/** Checks a caller's `expectedVersion` (absent, or an integer >= 0), as core's memory store does. */
export function checkExpectedVersion(expected: number | undefined): void {
  if (expected === undefined) return;
  if (!Number.isInteger(expected) || expected < 0) {
    throw new SwitchboardError("INVALID_REQUEST", "expectedVersion: must be an integer >= 0", {
      details: { field: "expectedVersion" },
    });
  }
}

/** The CONFLICT of a failed compare-and-set, worded like core's `RowVersions` (0: no such row). */
export function versionConflict(
  table: string,
  key: string,
  expected: number,
  actual: number,
): SwitchboardError {
  const now = actual === 0 ? "does not exist" : `is at version ${actual}`;
  return new SwitchboardError(
    "CONFLICT",
    `${table} ${key} changed meanwhile: expected version ${expected}, but it ${now}; read it again and retry`,
    { details: { key, expectedVersion: expected, actualVersion: actual } },
  );
}

/** PostgreSQL returns bigint as a string; versions and counters stay far below 2^53. */
export function toNumber(value: string | number | null | undefined): number {
  return value === null || value === undefined ? 0 : Number(value);
}

/** PostgreSQL text cannot hold NUL; derived filter columns (never the stored row) replace it. */
export function pgText(value: string): string;
export function pgText(value: string | undefined): string | null;
export function pgText(value: string | undefined): string | null {
  if (value === undefined) return null;
  return value.includes("\u0000") ? value.replaceAll("\u0000", "\uFFFD") : value;
}

/** `value` as a LIKE pattern matching it literally (backslash is LIKE's default escape). */
export function escapeLike(value: string): string {
  return value.replace(/[\\%_]/g, "\\$&");
}
