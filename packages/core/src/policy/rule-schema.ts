import { z } from "zod";
import { SwitchboardError } from "../errors";
import { LEVELS, LevelSchema } from "../labels/level";
import { plainRecord } from "../plain-record";
import {
  CLOSED_CONDITION_FIELDS,
  conditionFieldProblem,
  hookFieldProblem,
  LEVEL_CONDITION_FIELDS,
  LOWER_CASE_CONDITION_FIELDS,
} from "./context";
import { type Hook, HookSchema } from "./hooks";
import { compileSafeRegex, safeRegexProblem } from "./safe-regex";

/** Ids of the built-in rules, in evaluation order. User rules may not reuse them. */
export const BUILTIN_RULE_IDS = [
  "a2a",
  "visibility",
  "flow.no-read-up",
  "flow.no-write-down",
  "send-policy",
  "a2a.hop-limit",
  "a2a.cycle",
  "a2a.budget",
  "spawn",
] as const;
export type BuiltinRuleId = (typeof BUILTIN_RULE_IDS)[number];

/** Id reported when a hook runs out of its time budget. */
export const BUDGET_RULE_ID = "budget";

const RESERVED_IDS: readonly string[] = [...BUILTIN_RULE_IDS, BUDGET_RULE_ID];

const ScalarSchema = z.union([z.string(), z.number(), z.boolean(), z.null()], {
  error: () => "must be a string, number, boolean or null",
});
export type ConditionScalar = z.infer<typeof ScalarSchema>;

const ComparableSchema = z.union([z.number(), LevelSchema], {
  error: () => `must be a number or a level (${LEVELS.join(", ")})`,
});

export const CONDITION_OPERATORS = ["in", "not", "gt", "gte", "lt", "lte", "matches", "prefix"] as const;

/** `{in|not|gt|gte|lt|lte|matches|prefix: …}`; several operators in one object must all hold. */
export const ConditionOperatorsSchema = z
  .strictObject(
    {
      in: z.array(ScalarSchema).optional(),
      not: z.union([ScalarSchema, z.array(ScalarSchema)]).optional(),
      gt: ComparableSchema.optional(),
      gte: ComparableSchema.optional(),
      lt: ComparableSchema.optional(),
      lte: ComparableSchema.optional(),
      matches: z.string().optional(),
      prefix: z.string().optional(),
    },
    {
      error: (issue) =>
        issue.code === "unrecognized_keys"
          ? `unknown operator ${issue.keys.map((key) => `"${key}"`).join(", ")}; use ${CONDITION_OPERATORS.join(", ")}`
          : undefined,
    },
  )
  .refine((value) => Object.keys(value).length > 0, {
    message: `needs at least one operator (${CONDITION_OPERATORS.join(", ")})`,
    // An unknown operator already explains the problem; do not add "needs at least one".
    when: (payload) => payload.issues.length === 0,
  });

const CONDITION_SHAPE_MESSAGE = `must be a string, number, boolean, null or an operator object {${CONDITION_OPERATORS.join("|")}: …}`;

/** A plain value means equality (`null` matches an absent field). */
export const ConditionSchema = z.union([ScalarSchema, ConditionOperatorsSchema], {
  // An object was clearly meant as operators: report what is wrong inside it, not "no option matched".
  error: (issue) => {
    const input: unknown = issue.input;
    const errors = issue.code === "invalid_union" ? issue.errors : undefined;
    const inner = errors?.[1];
    if (input !== null && typeof input === "object" && !Array.isArray(input) && inner && inner.length > 0) {
      return inner
        .map((problem) => {
          const where = problem.path.map(String).join(".");
          return where ? `${where}: ${problem.message}` : problem.message;
        })
        .join("; ");
    }
    return CONDITION_SHAPE_MESSAGE;
  },
});
export type Condition = z.infer<typeof ConditionSchema>;

export const RedactSpecSchema = z.strictObject({
  patterns: z.array(z.string().min(1, "must not be empty")).min(1, "needs at least one regular expression"),
  /** Inserted literally (no `$1` expansion); default `[REDACTED]`. */
  replacement: z.string().optional(),
});

export const DEFAULT_REDACTION = "[REDACTED]";

/**
 * Hooks whose step carries text that redaction rewrites: a message into a session, a spawn's task,
 * text out to a channel, and what a read of another session hands over (history, list previews,
 * a reply, a summary). A tool call's arguments are not rewritten, so a redact rule on PRE_TOOL_CALL
 * would be accepted and then silently do nothing: it is refused.
 */
export const TEXT_HOOKS: readonly Hook[] = ["PRE_SEND", "PRE_SPAWN", "PRE_OUTPUT", "PRE_HISTORY"];

/** Why `source` is not a usable regular expression, or undefined (RE2 syntax, see `safe-regex.ts`). */
const regexProblem = safeRegexProblem;

/**
 * One user policy rule (config `policy.rules[]`). A plain zod object so the config schema can
 * embed it; the semantic checks (regexes compile, known condition fields, redact rules have
 * patterns, ids are not reserved) run as refinements and name the path they reject.
 */
export const PolicyRuleSchema = z
  .strictObject({
    id: z
      .string()
      .regex(
        /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/,
        "must be 1-128 characters: letters, digits, '.', '_', ':' or '-', starting with a letter or digit",
      ),
    hook: HookSchema,
    priority: z.number().int("must be an integer").default(0),
    when: plainRecord(ConditionSchema).optional(),
    action: z.enum(["allow", "deny", "redact"], { error: () => "must be one of allow, deny, redact" }),
    message: z.string().max(500).optional(),
    redact: RedactSpecSchema.optional(),
  })
  .superRefine((rule, ctx) => {
    // Case-blind: `A2A` beside the built-in `a2a` would read as it in every audit record.
    const lower = rule.id.toLowerCase();
    if (RESERVED_IDS.includes(lower) || lower.startsWith("flow.")) {
      ctx.addIssue({ code: "custom", path: ["id"], message: `"${rule.id}" is reserved for a built-in rule` });
    }
    if (rule.action === "redact" && !rule.redact) {
      ctx.addIssue({
        code: "custom",
        path: ["redact"],
        message: "a redact rule needs redact.patterns (a non-empty list of regular expressions)",
      });
    }
    if (rule.action === "redact" && !TEXT_HOOKS.includes(rule.hook)) {
      ctx.addIssue({
        code: "custom",
        path: ["hook"],
        message: `a redact rule needs a hook that carries text (${TEXT_HOOKS.join(", ")}): on ${rule.hook} it would rewrite nothing`,
      });
    }
    if (rule.action !== "redact" && rule.redact) {
      ctx.addIssue({ code: "custom", path: ["redact"], message: "only allowed when action is redact" });
    }
    rule.redact?.patterns.forEach((pattern, index) => {
      const problem = regexProblem(pattern);
      if (problem) {
        ctx.addIssue({ code: "custom", path: ["redact", "patterns", index], message: problem });
      } else if (compileSafeRegex(pattern).test("")) {
        // Would "redact" the empty string between every character.
        ctx.addIssue({
          code: "custom",
          path: ["redact", "patterns", index],
          message: "must not match the empty string",
        });
      }
    });
    for (const [field, condition] of Object.entries(rule.when ?? {})) {
      const fieldProblem = conditionFieldProblem(field) ?? hookFieldProblem(rule.hook, field);
      if (fieldProblem) ctx.addIssue({ code: "custom", path: ["when", field], message: fieldProblem });
      if (LEVEL_CONDITION_FIELDS.has(field)) {
        for (const [where, problem] of levelConditionProblems(condition))
          ctx.addIssue({ code: "custom", path: ["when", field, ...where], message: problem });
      }
      if (condition !== null && typeof condition === "object" && condition.matches !== undefined) {
        const problem = regexProblem(condition.matches);
        if (problem) ctx.addIssue({ code: "custom", path: ["when", field, "matches"], message: problem });
      }
      for (const [where, problem] of valueProblems(field, condition))
        ctx.addIssue({ code: "custom", path: ["when", field, ...where], message: problem });
    }
  });
export type PolicyRule = z.output<typeof PolicyRuleSchema>;

const LEVEL_NAMES: readonly unknown[] = LEVELS;
const NOT_A_LEVEL = `must be a level (${LEVELS.join(", ")}): levels parse exactly, and nothing else ever matches this field`;

/**
 * What is wrong with a condition on a level field: a value that is not a level name (`confidential`,
 * `2`) can never equal or order against one, so the rule would silently never match (or, in `not`,
 * always). `null` stays allowed (an absent `dataLabel`).
 */
function levelConditionProblems(condition: Condition): Array<[Array<string | number>, string]> {
  const isLevel = (value: unknown) => value === null || LEVEL_NAMES.includes(value);
  if (condition === null || typeof condition !== "object")
    return isLevel(condition) ? [] : [[[], NOT_A_LEVEL]];
  const problems: Array<[Array<string | number>, string]> = [];
  const list = (operator: "in" | "not") => {
    const value = condition[operator];
    if (value === undefined) return;
    const values = Array.isArray(value) ? value : [value];
    values.forEach((item, index) => {
      if (!isLevel(item)) problems.push([Array.isArray(value) ? [operator, index] : [operator], NOT_A_LEVEL]);
    });
  };
  list("in");
  list("not");
  for (const operator of ["gt", "gte", "lt", "lte"] as const) {
    const value = condition[operator];
    if (value !== undefined && !LEVEL_NAMES.includes(value)) problems.push([[operator], NOT_A_LEVEL]);
  }
  return problems;
}

/**
 * Conditions that can never match, or always do, whatever the step: a value outside a closed set
 * of facts (a chat type `gruop`, the string `"false"` for a boolean), a capital in a channel
 * (channels are lower-cased before rules see them), and empty operators (`in: []` never matches;
 * `not: []`, `prefix: ""` and `matches: ""` always do). Before session 22 such rules loaded and
 * silently did nothing, or everything.
 */
function valueProblems(field: string, condition: Condition): Array<[Array<string | number>, string]> {
  const problems: Array<[Array<string | number>, string]> = [];
  const closed = CLOSED_CONDITION_FIELDS.get(field);
  const lowerCase = LOWER_CASE_CONDITION_FIELDS.has(field);
  const check = (value: unknown, where: Array<string | number>) => {
    if (value === null) return;
    if (closed && !closed.includes(value))
      problems.push([
        where,
        `must be one of ${closed.map((option) => JSON.stringify(option)).join(", ")} (or null): nothing else ever matches this field`,
      ]);
    else if (lowerCase && typeof value === "string" && value !== value.toLowerCase())
      problems.push([where, `channels are compared lower-cased: write "${value.toLowerCase()}"`]);
  };
  if (condition === null || typeof condition !== "object") {
    check(condition, []);
    return problems;
  }
  const list = (operator: "in" | "not") => {
    const value = condition[operator];
    if (value === undefined) return;
    if (!Array.isArray(value)) {
      check(value, [operator]);
      return;
    }
    for (const [index, item] of value.entries()) check(item, [operator, index]);
  };
  list("in");
  list("not");
  if (Array.isArray(condition.in) && condition.in.length === 0)
    problems.push([["in"], "an empty list never matches: the rule would never apply"]);
  if (Array.isArray(condition.not) && condition.not.length === 0)
    problems.push([["not"], "an empty list excludes nothing: drop it, or name what to exclude"]);
  if (condition.prefix === "") problems.push([["prefix"], "an empty prefix matches everything"]);
  if (condition.matches === "") problems.push([["matches"], "an empty pattern matches everything"]);
  if (
    lowerCase &&
    typeof condition.prefix === "string" &&
    condition.prefix !== condition.prefix.toLowerCase()
  )
    problems.push([
      ["prefix"],
      `channels are compared lower-cased: write "${condition.prefix.toLowerCase()}"`,
    ]);
  return problems;
}

export type PolicyRuleInput = z.input<typeof PolicyRuleSchema>;

/** A list of rules with unique ids (what `policy.rules` holds). */
export const PolicyRulesSchema = z.array(PolicyRuleSchema).superRefine((rules, ctx) => {
  const seen = new Map<string, number>();
  rules.forEach((rule, index) => {
    const first = seen.get(rule.id);
    if (first !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: [index, "id"],
        message: `duplicate rule id "${rule.id}" (first used by rules[${first}])`,
      });
    } else {
      seen.set(rule.id, index);
    }
  });
});

function ruleIdOf(raw: unknown): string | undefined {
  if (raw === null || typeof raw !== "object") return undefined;
  const id = (raw as { id?: unknown }).id;
  return typeof id === "string" ? id : undefined;
}

function issuePath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) out += typeof part === "number" ? `[${part}]` : `.${String(part)}`;
  return out;
}

/**
 * Validates user rules and returns them with defaults applied. Throws one INVALID_REQUEST error
 * listing every problem, each naming the rule (index and id) and the reason, e.g.
 * `policy.rules[0] (rule "no-keys-out").redact.patterns[0]: invalid regular expression: …`.
 */
export function validatePolicyRules(rules: unknown, path = "policy.rules"): PolicyRule[] {
  if (!Array.isArray(rules)) {
    throw new SwitchboardError("INVALID_REQUEST", `${path}: must be an array of rules`);
  }
  const problems: { ruleId?: string; index: number; message: string }[] = [];
  const valid: PolicyRule[] = [];
  const seen = new Map<string, number>();
  rules.forEach((raw, index) => {
    const ruleId = ruleIdOf(raw);
    const where = ruleId === undefined ? `${path}[${index}]` : `${path}[${index}] (rule "${ruleId}")`;
    const parsed = PolicyRuleSchema.safeParse(raw);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) {
        problems.push({
          ruleId,
          index,
          message: `${where}${issuePath(issue.path as PropertyKey[])}: ${issue.message}`,
        });
      }
      return;
    }
    const first = seen.get(parsed.data.id);
    if (first !== undefined) {
      problems.push({
        ruleId,
        index,
        message: `${where}.id: duplicate rule id (first used by ${path}[${first}])`,
      });
      return;
    }
    seen.set(parsed.data.id, index);
    valid.push(parsed.data);
  });
  if (problems.length > 0) {
    throw new SwitchboardError("INVALID_REQUEST", problems.map((problem) => problem.message).join("; "), {
      details: { problems },
    });
  }
  return valid;
}
