import { DEFAULT_REDACTION } from "./rule-schema";

export interface RedactionResult {
  text: string;
  count: number;
}

/** Compiles redaction patterns once; `g` so every occurrence is replaced. */
export function compileRedactions(patterns: readonly string[]): RegExp[] {
  return patterns.map((pattern) => new RegExp(pattern, "gu"));
}

/**
 * Rewrites every match of every pattern (in order) with `replacement`, inserted literally so a
 * `$1` in the config cannot splice matched secrets back in. `replace` restarts a `g` regex at 0,
 * so a shared compiled pattern carries no state between calls.
 */
export function redactText(
  text: string,
  patterns: readonly RegExp[],
  replacement = DEFAULT_REDACTION,
): RedactionResult {
  let count = 0;
  let current = text;
  for (const pattern of patterns) {
    current = current.replace(pattern, (match: string) => {
      // A zero-width match (a lookahead, `\b`) removes nothing: it is not a redaction, and
      // counting it would report the text rewritten while the secret goes out whole.
      if (match === "") return "";
      count++;
      return replacement;
    });
  }
  return { text: current, count };
}
