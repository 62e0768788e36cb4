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

/**
 * The largest count a `{n}`, `{n,}` or `{n,m}` may give. Linear in the text is not cheap in re2js:
 * a counted repeat costs about its count per character that starts a partial match (`\w{1000}\d`
 * took 8.9 s over 500 000 letters, `\w{100}\d` 0.9 s), synchronously, so no time budget can
 * interrupt it. 100 covers the secrets patterns are written for (keys, tokens, card numbers).
 */
export const MAX_REGEX_REPEAT = 100;

/** Why `source` is not a usable pattern, or undefined. */
export function safeRegexProblem(source: string): string | undefined {
  try {
    RE2JS.compile(source);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return `invalid regular expression (RE2 syntax: no lookaround or backreferences): ${message}`;
  }
  return repeatProblem(source);
}

/**
 * A counted repeat whose count — times the counts of the repeats inside the group it applies to,
 * which multiply — is over `MAX_REGEX_REPEAT`, named; undefined when there is none. Reads the
 * pattern's text: escapes and character classes are skipped, groups are tracked for nesting.
 */
function repeatProblem(source: string): string | undefined {
  /** Per open group: the largest count product of the repeats inside it. */
  const groups: number[] = [];
  /** The product of the group that just closed, for a repeat right after it. */
  let closed = 1;
  for (let i = 0; i < source.length; i++) {
    const char = source[i];
    const afterGroup = source[i - 1] === ")" ? closed : 1;
    if (char === "\\") {
      i++;
      continue;
    }
    if (char === "[") {
      // To the class's end: `]` right after `[` or `[^` is a member, not the end.
      i += source[i + 1] === "^" ? 2 : 1;
      if (source[i] === "]") i++;
      while (i < source.length && source[i] !== "]") i += source[i] === "\\" ? 2 : 1;
      continue;
    }
    if (char === "(") {
      groups.push(1);
      continue;
    }
    if (char === ")") {
      closed = groups.pop() ?? 1;
      if (groups.length > 0) groups[groups.length - 1] = Math.max(groups.at(-1)!, closed);
      continue;
    }
    const counted = char === "{" ? /^\{(\d+)(?:,(\d*))?\}/.exec(source.slice(i)) : null;
    if (!counted) continue;
    const count = Math.max(Number(counted[1]), Number(counted[2] || 0)) * afterGroup;
    if (count > MAX_REGEX_REPEAT) {
      return afterGroup > 1
        ? `repeat ${counted[0]} of a group holding repeats counts ${count} (over ${MAX_REGEX_REPEAT}: the counts multiply, and each costs that much per character matched)`
        : `repeat ${counted[0]} is over ${MAX_REGEX_REPEAT} (a large count costs that much per character matched)`;
    }
    if (groups.length > 0) groups[groups.length - 1] = Math.max(groups.at(-1)!, count);
    i += counted[0].length - 1;
  }
  return undefined;
}
