import { RE2JS } from "re2js";

/**
 * Policy rules' regular expressions (`matches` conditions, redact patterns) run on text from outside
 * channels, so they run on RE2 (re2js): matching takes time linear in the text, whatever the
 * pattern. A backtracking engine let a pattern like `^(a+)+$` freeze the gateway's event loop on
 * forty characters, which no time budget can interrupt. The price is RE2 syntax: no lookaround and
 * no backreferences (refused at load, naming the rule).
 */
export type SafeRegex = RE2JS;

/** Compiles `source` (RE2 syntax); throws when it is not one. */
export function compileSafeRegex(source: string): SafeRegex {
  return RE2JS.compile(source);
}

/** Why `source` is not a usable pattern, or undefined. */
export function safeRegexProblem(source: string): string | undefined {
  try {
    RE2JS.compile(source);
    return undefined;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return `invalid regular expression (RE2 syntax: no lookaround or backreferences): ${message}`;
  }
}
