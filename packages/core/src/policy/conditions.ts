import { recipientChain } from "../keys/classify";
import { isLevel, levelRank } from "../labels/level";
import type { Condition, ConditionScalar } from "./rule-schema";
import { compileSafeRegex } from "./safe-regex";

/** A condition ready to run: the path it reads and the test on the value found there. */
export interface CompiledCondition {
  field: string;
  path: readonly string[];
  test: (value: unknown) => boolean;
}

/**
 * Reads a dotted path from plain data. Only own properties are followed, so a rule can never
 * reach `__proto__`, `constructor` or anything inherited.
 */
export function readPath(root: unknown, path: readonly string[]): unknown {
  let current: unknown = root;
  for (const segment of path) {
    if (current === null || typeof current !== "object") return undefined;
    if (!Object.hasOwn(current, segment)) return undefined;
    current = (current as Record<string, unknown>)[segment];
  }
  return current;
}

function equals(value: unknown, operand: ConditionScalar): boolean {
  // `null` in a rule stands for "absent": the context omits optional fields rather than nulling them.
  if (operand === null) return value === null || value === undefined;
  return value === operand;
}

/** Levels compare by rank, numbers numerically; anything else is not comparable (→ no match). */
function compare(value: unknown, operand: number | string): number | undefined {
  if (typeof operand === "number") return typeof value === "number" ? value - operand : undefined;
  if (isLevel(operand) && isLevel(value)) return levelRank(value) - levelRank(operand);
  return undefined;
}

function asText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return undefined;
}

/**
 * Fields whose value names a chat the way labels and send policy read it: case-insensitively, and a
 * thread (`lobby:thread:42`) as part of its chat. A rule naming `lobby` then holds for `LOBBY` and
 * every thread of it, as a label or a send-policy rule on `lobby` does; a thread suffix or another
 * case is no way around it.
 */
const CHAT_FIELDS: ReadonlySet<string> = new Set(["recipient.to"]);

/** Each spelling of a chat value a condition is tested on: the chat and the chats it is a thread of. */
function chatSpellings(value: unknown): unknown[] {
  return typeof value === "string" ? recipientChain(value.toLowerCase()) : [value];
}

function lowerOperand<T>(operand: T): T {
  return (typeof operand === "string" ? operand.toLowerCase() : operand) as T;
}

export function compileCondition(field: string, condition: Condition): CompiledCondition {
  if (CHAT_FIELDS.has(field)) return compileChatCondition(field, condition);
  const path = field.split(".");
  if (condition === null || typeof condition !== "object") {
    return { field, path, test: (value) => equals(value, condition) };
  }
  const tests: ((value: unknown) => boolean)[] = [];
  const operators = condition;
  if (operators.in !== undefined) {
    const options = operators.in;
    tests.push((value) => options.some((option) => equals(value, option)));
  }
  if (operators.not !== undefined) {
    const excluded = Array.isArray(operators.not) ? operators.not : [operators.not];
    tests.push((value) => !excluded.some((option) => equals(value, option)));
  }
  const ordered: [number | string | undefined, (difference: number) => boolean][] = [
    [operators.gt, (d) => d > 0],
    [operators.gte, (d) => d >= 0],
    [operators.lt, (d) => d < 0],
    [operators.lte, (d) => d <= 0],
  ];
  for (const [operand, holds] of ordered) {
    if (operand === undefined) continue;
    tests.push((value) => {
      const difference = compare(value, operand);
      return difference !== undefined && holds(difference);
    });
  }
  if (operators.matches !== undefined) {
    // RE2: linear in the text whatever the pattern (see `safe-regex.ts`); `test` keeps no state.
    const pattern = compileSafeRegex(operators.matches);
    tests.push((value) => {
      const text = asText(value);
      return text !== undefined && pattern.test(text);
    });
  }
  if (operators.prefix !== undefined) {
    const prefix = operators.prefix;
    tests.push((value) => typeof value === "string" && value.startsWith(prefix));
  }
  return { field, path, test: (value) => tests.every((test) => test(value)) };
}

/**
 * A condition on a chat field: holds when it holds for the chat or a chat it is a thread of, case
 * aside; `not` holds when none of them is excluded.
 */
function compileChatCondition(field: string, condition: Condition): CompiledCondition {
  const lowered: Condition =
    condition === null || typeof condition !== "object"
      ? lowerOperand(condition)
      : {
          ...condition,
          ...(condition.in !== undefined ? { in: condition.in.map(lowerOperand) } : {}),
          ...(condition.not !== undefined
            ? {
                not: Array.isArray(condition.not)
                  ? condition.not.map(lowerOperand)
                  : lowerOperand(condition.not),
              }
            : {}),
          ...(condition.prefix !== undefined ? { prefix: condition.prefix.toLowerCase() } : {}),
        };
  const { not, ...positive } = typeof lowered === "object" && lowered !== null ? lowered : { not: undefined };
  const any =
    typeof lowered !== "object" || lowered === null
      ? compileCondition("value", lowered)
      : Object.keys(positive).length > 0
        ? compileCondition("value", positive as Condition)
        : undefined;
  const excluded =
    not === undefined ? undefined : compileCondition("value", { in: Array.isArray(not) ? not : [not] });
  return {
    field,
    path: field.split("."),
    test: (value) => {
      const spellings = chatSpellings(value);
      if (any && !spellings.some((spelling) => any.test(spelling))) return false;
      return !excluded || !spellings.some((spelling) => excluded.test(spelling));
    },
  };
}
