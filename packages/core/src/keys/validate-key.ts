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
  // keys.md counts characters, and a JS string's length counts UTF-16 units: a key in a script
  // outside the BMP would be refused at half the limit. Only a long key pays for the count.
  if (key.length > MAX_KEY_LENGTH) {
    const characters = codePoints(key);
    if (characters > MAX_KEY_LENGTH)
      fail(`must be at most ${MAX_KEY_LENGTH} characters in canonical form (got ${characters})`);
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

/** Characters (code points) of `text`; a lone surrogate counts as one. */
function codePoints(text: string): number {
  let count = 0;
  for (let index = 0; index < text.length; index++) {
    const unit = text.charCodeAt(index);
    // A high surrogate followed by a low one is one character.
    if (unit >= 0xd800 && unit <= 0xdbff && index + 1 < text.length) {
      const next = text.charCodeAt(index + 1);
      if (next >= 0xdc00 && next <= 0xdfff) index++;
    }
    count++;
  }
  return count;
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
