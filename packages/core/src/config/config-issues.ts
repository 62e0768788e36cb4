import { z } from "zod";
import { formatPath, formatZodIssues, SwitchboardError } from "../errors";
import { closestName } from "./schema-helpers";

/** One problem of a config (or rules file): where, and what is wrong, in user words. */
export interface ConfigIssue {
  path: string;
  message: string;
}

type RawIssue = z.core.$ZodRawIssue;

const TYPE_WORDS: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "an integer",
  boolean: "true or false",
  object: "an object",
  record: "an object",
  array: "a list",
  null: "null",
};

/**
 * Parses `input` with `schema`, or throws an INVALID_REQUEST `SwitchboardError` whose message has one
 * `path: reason` line per problem and whose `details.issues` holds `{path, message}` for each.
 */
export function parseWithIssues<T extends z.ZodType>(
  schema: T,
  input: unknown,
  what: string,
  /** Rewrites an issue's message given its path, e.g. to name the rule an issue is in. */
  annotate?: (path: readonly PropertyKey[], message: string) => string,
): z.output<T> {
  // Known keys of each strict object that reported unknown keys, for did-you-mean suggestions. Keyed by
  // the issue's `keys` array, which zod carries unchanged from the raw issue into the final one.
  const knownKeys = new WeakMap<object, string[]>();
  const errorMap = (iss: RawIssue): string | undefined => {
    if (iss.code === "unrecognized_keys") {
      const shape = (iss.inst as { _zod?: { def?: { shape?: Record<string, unknown> } } } | undefined)?._zod
        ?.def?.shape;
      if (shape) knownKeys.set(iss.keys, Object.keys(shape));
      return "unknown key";
    }
    return friendlyMessage(iss);
  };
  const result = schema.safeParse(input, { error: errorMap });
  if (result.success) return result.data;

  const issues = normaliseIssues(result.error.issues, [], knownKeys).map((issue) =>
    annotate ? { ...issue, message: annotate(issue.path, issue.message) } : issue,
  );
  const lines = formatZodIssues(new z.ZodError(issues));
  throw new SwitchboardError("INVALID_REQUEST", `invalid ${what}:\n  ${lines.join("\n  ")}`, {
    details: {
      issues: issues.map((i): ConfigIssue => ({ path: formatPath(i.path), message: i.message })),
    },
  });
}

function friendlyMessage(iss: RawIssue): string | undefined {
  switch (iss.code) {
    case "invalid_type":
      if (iss.input === undefined) return "is required";
      return `must be ${TYPE_WORDS[iss.expected] ?? iss.expected}`;
    case "invalid_value":
      return iss.values.length === 1
        ? `must be ${JSON.stringify(iss.values[0])}`
        : `must be one of ${iss.values.map((value) => JSON.stringify(value)).join(", ")}`;
    case "too_small":
      if (iss.origin === "string") {
        return Number(iss.minimum) <= 1 ? "must not be empty" : `must be at least ${iss.minimum} characters`;
      }
      if (iss.origin === "array" || iss.origin === "set") return `must have at least ${iss.minimum} item(s)`;
      return `must be ${iss.inclusive ? ">=" : ">"} ${iss.minimum}`;
    case "too_big":
      if (iss.origin === "string") return `must be at most ${iss.maximum} characters`;
      if (iss.origin === "array" || iss.origin === "set") return `must have at most ${iss.maximum} item(s)`;
      return `must be ${iss.inclusive ? "<=" : "<"} ${iss.maximum}`;
    case "invalid_format":
      if (iss.format === "regex" && "pattern" in iss) return `must match ${String(iss.pattern)}`;
      return `must be a valid ${iss.format}`;
    case "invalid_union":
      return "does not match any allowed form";
    case "invalid_key":
      return "invalid key";
    default:
      return undefined;
  }
}

type Issue = z.core.$ZodIssue;

/**
 * Turns zod's issues into one issue per problem at the most precise path: an unknown-keys issue becomes
 * one issue per key (with a did-you-mean when a known key is close), and a union whose input clearly
 * meant one branch reports that branch's problems instead of "does not match any allowed form".
 */
function normaliseIssues(
  issues: readonly Issue[],
  prefix: PropertyKey[],
  knownKeys: WeakMap<object, string[]>,
) {
  const out: { path: PropertyKey[]; message: string; code: "custom" }[] = [];
  for (const issue of issues) {
    const path = [...prefix, ...issue.path];
    if (issue.code === "unrecognized_keys") {
      const known = knownKeys.get(issue.keys) ?? [];
      const candidates = known.filter((name) => !issue.keys.includes(name));
      for (const key of issue.keys) {
        const suggestion = closestName(key, candidates);
        out.push({
          code: "custom",
          path: [...path, key],
          message: suggestion ? `unknown key (did you mean "${suggestion}"?)` : "unknown key",
        });
      }
    } else if (issue.code === "invalid_union" && issue.errors.length > 0) {
      // A branch "fits" when its problems are inside the value rather than the value's type itself.
      const fitting = issue.errors.filter(
        (branch) => !branch.some((inner) => inner.code === "invalid_type" && inner.path.length === 0),
      );
      if (fitting.length === 1) {
        out.push(...normaliseIssues(fitting[0]!, path, knownKeys));
      } else {
        out.push({ code: "custom", path, message: unionMessage(issue) });
      }
    } else if (issue.code === "invalid_key" && issue.issues.length > 0) {
      out.push({ code: "custom", path, message: `invalid key: ${issue.issues[0]!.message}` });
    } else {
      out.push({ code: "custom", path, message: issue.message });
    }
  }
  return out;
}

function unionMessage(issue: Extract<Issue, { code: "invalid_union" }>): string {
  if (issue.message !== "does not match any allowed form") return issue.message;
  const expected = issue.errors.flatMap((branch) =>
    branch.flatMap((inner) =>
      inner.code === "invalid_type" && inner.path.length === 0 ? [inner.expected] : [],
    ),
  );
  if (expected.length !== issue.errors.length) return issue.message;
  const words = [...new Set(expected.map((type) => TYPE_WORDS[type] ?? type))];
  return `must be ${words.length === 1 ? words[0] : `${words.slice(0, -1).join(", ")} or ${words.at(-1)}`}`;
}
