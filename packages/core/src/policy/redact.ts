import { DEFAULT_REDACTION } from "./rule-schema";
import { compileSafeRegex, type SafeRegex } from "./safe-regex";

export interface RedactionResult {
  text: string;
  count: number;
}

/** Compiles redaction patterns once (RE2: linear time, see `safe-regex.ts`). */
export function compileRedactions(patterns: readonly string[]): SafeRegex[] {
  return patterns.map((pattern) => compileSafeRegex(pattern));
}

/**
 * Rewrites every match of every pattern (in order) with `replacement`, inserted literally so a
 * `$1` in the config cannot splice matched secrets back in. A zero-width match (`\b`) removes
 * nothing: it is not a redaction, and counting it would report the text rewritten while the secret
 * goes out whole.
 */
export function redactText(
  text: string,
  patterns: readonly SafeRegex[],
  replacement = DEFAULT_REDACTION,
): RedactionResult {
  let count = 0;
  let current = text;
  for (const pattern of patterns) {
    const matcher = pattern.matcher(current);
    let out = "";
    let last = 0;
    while (matcher.find()) {
      const start = matcher.start();
      const end = matcher.end();
      if (end === start) continue;
      out += current.slice(last, start) + replacement;
      last = end;
      count++;
    }
    current = out + current.slice(last);
  }
  return { text: current, count };
}
