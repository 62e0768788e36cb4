import { z } from "zod";

/** A schema error that says "is required" for a missing value and `message` for a wrong one. */
export function requiredOr(message: string) {
  return (issue: { input?: unknown }) => (issue.input === undefined ? "is required" : message);
}

/** An integer within [min, max]; every failure (type or range) reads the same, naming the range. */
export function intRange(min: number, max: number) {
  const message = `must be an integer from ${min} to ${max}`;
  return z
    .int({ error: requiredOr(message) })
    .min(min, { error: message })
    .max(max, { error: message });
}

/** An integer >= min. */
export function intAtLeast(min: number) {
  const message = `must be an integer >= ${min}`;
  return z.int({ error: requiredOr(message) }).min(min, { error: message });
}

export function nonEmptyString(what = "a non-empty string") {
  const message = `must be ${what}`;
  return z.string({ error: requiredOr(message) }).min(1, { error: message });
}

/**
 * A regular expression source, compiled once here so a typo fails at config load (naming the path)
 * instead of at the first message that reaches the rule. Stays a string: the config is plain data.
 */
export function regexString() {
  return z
    .string({ error: requiredOr("must be a regular expression (a string)") })
    .superRefine((source, ctx) => {
      const problem = regexProblem(source);
      if (problem)
        ctx.addIssue({ code: "custom", message: `invalid regular expression: ${problem}`, input: source });
    });
}

/** Why `new RegExp(source)` fails, or undefined when it compiles. */
export function regexProblem(source: string): string | undefined {
  try {
    new RegExp(source);
    return undefined;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    // V8 repeats the pattern ("Invalid regular expression: /(/: Unterminated group"); keep the reason.
    return message.replace(/^Invalid regular expression: \/.*\/[a-z]*: /s, "");
  }
}

/** Agent ids (keys.md): case-insensitive, normalised to lower case. */
export const AGENT_ID_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/i;

export const AGENT_ID_RULE =
  "must be an agent id: 1-64 characters a-z, 0-9, _ or -, starting with a letter or digit";

export function agentIdString() {
  // Spelled out in both cases (not with the `i` flag) so the exported JSON Schema pattern is right.
  return z
    .string({ error: requiredOr(AGENT_ID_RULE) })
    .regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/, { error: AGENT_ID_RULE })
    .toLowerCase();
}

const AGENT_PATTERN_RULE = 'must be an agent id or a pattern with * and ? (e.g. "research", "res*", "*")';

/** An agent id or a glob over agent ids (`*` any run, `?` one character); lower-cased. */
export function agentPatternString() {
  return z
    .string({ error: requiredOr(AGENT_PATTERN_RULE) })
    .regex(/^[A-Za-z0-9_*?-]{1,64}$/, { error: AGENT_PATTERN_RULE })
    .toLowerCase();
}

export function isAgentPattern(value: string): boolean {
  return value.includes("*") || value.includes("?");
}

/**
 * Edit distance counting a swap of two neighbouring characters as one edit (optimal string
 * alignment), since `prot` for `port` is the typical typo.
 */
export function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, rows[i - 2]![j - 2]! + 1);
      }
      rows[i]![j] = best;
    }
  }
  return rows[a.length]![b.length]!;
}

/** The known name closest to `name`, if it is close enough to be a plausible typo. */
export function closestName(name: string, known: readonly string[]): string | undefined {
  const lowered = name.toLowerCase();
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const distance = editDistance(lowered, candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  const tolerance = Math.max(1, Math.floor(name.length / 3));
  return bestDistance <= tolerance ? best : undefined;
}
