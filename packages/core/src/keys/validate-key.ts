import { SwitchboardError } from "../errors";

/** Longest key accepted, measured on the canonical form. */
export const MAX_KEY_LENGTH = 256;

// \p{C} covers control, format (zero-width, bidi overrides), surrogate, private-use and unassigned
// code points: anything a person could not read back from a log line.
const NON_PRINTABLE = /\p{C}/u;
const WHITESPACE = /[\s\p{Z}]/u;

/**
 * Rejects keys that are unsafe or ambiguous to store and display. Keys end up in file names and
 * log lines, so path-like input (`../x`, `agent:main:..`) must never pass. The message names the
 * field and the rule broken, e.g. `sessionKey: must not contain whitespace`.
 */
export function validateKey(key: string, field = "sessionKey"): void {
  const fail = (rule: string): never => {
    throw new SwitchboardError("INVALID_REQUEST", `${field}: ${rule}`, { details: { field, key } });
  };
  if (typeof key !== "string") fail("must be a string");
  if (key.length === 0) fail("must not be empty");
  if (key.length > MAX_KEY_LENGTH) {
    fail(`must be at most ${MAX_KEY_LENGTH} characters in canonical form (got ${key.length})`);
  }
  if (WHITESPACE.test(key)) fail("must not contain whitespace");
  if (NON_PRINTABLE.test(key)) fail("must contain only printable characters");
  if (key.includes("/") || key.includes("\\")) fail("must not contain '/' or '\\'");
  const segments = key.split(":");
  if (segments.some((segment) => segment === "")) {
    fail("must not contain empty segments (no leading, trailing or doubled ':')");
  }
  if (segments.some((segment) => segment === "." || segment === "..")) {
    fail("must not contain '.' or '..' segments");
  }
}

/** Non-throwing form of {@link validateKey}: the reason, or undefined when the key is valid. */
export function keyProblem(key: string, field = "sessionKey"): string | undefined {
  try {
    validateKey(key, field);
    return undefined;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}
