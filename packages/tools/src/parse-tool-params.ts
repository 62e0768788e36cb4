import { formatPath, TOOL_PARAM_SCHEMAS, type ToolName, type ToolParams } from "@switchboard/core";
import type { z } from "zod";

/** A bad argument. Its message names the parameter and is what the model sees as `error`. */
export class ToolParamError extends Error {
  override readonly name = "ToolParamError";
}

/**
 * Validates a model's arguments against the tool's zod schema. Unknown keys are dropped, `null` counts
 * as "not given" (models under strict schemas often send null for optional fields), and every type
 * error names its parameter: `limit: expected number, got string`.
 */
export function parseToolParams<N extends ToolName>(name: N, args: unknown): ToolParams<N> {
  const input = prepareArguments(name, args);
  const result = TOOL_PARAM_SCHEMAS[name].safeParse(input, { reportInput: true });
  if (!result.success) throw new ToolParamError(result.error.issues.map(describeIssue).join("; "));
  return result.data as ToolParams<N>;
}

function prepareArguments(name: ToolName, args: unknown): Record<string, unknown> {
  if (args === undefined || args === null) return {};
  if (!isPlainObject(args))
    throw new ToolParamError(`arguments: expected object, got ${describeValue(args)}`);
  const input: Record<string, unknown> = {};
  // An own `__proto__` key (JSON.parse makes one) assigned here would become the input's prototype,
  // and the schema would read parameters from it that a policy rule, looking at own keys, never saw.
  for (const [key, value] of Object.entries(args))
    if (value !== null && key !== "__proto__") input[key] = value;
  // tools.md: invalid `kinds` entries are ignored, so a stray number must not fail the whole call.
  if (name === "sessions_list" && Array.isArray(input.kinds)) {
    input.kinds = input.kinds.filter((kind) => typeof kind === "string");
  }
  return input;
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const where = formatPath(issue.path as PropertyKey[]) || "arguments";
  if (issue.code === "invalid_type") {
    if (issue.input === undefined) return `${where}: is required`;
    return `${where}: expected ${issue.expected === "record" ? "object" : issue.expected}, got ${describeValue(issue.input)}`;
  }
  return `${where}: ${issue.message}`;
}

/** A value's type as a model would name it; NaN and infinities are called out, since they pass `typeof`. */
export function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  return typeof value;
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/** A required text parameter: must contain something other than whitespace. */
export function requireText(name: string, value: string): string {
  if (value.trim() === "") throw new ToolParamError(`${name}: must not be empty`);
  return value;
}

/** An optional identifier: surrounding whitespace removed, blank treated as not given. */
export function optionalIdentifier(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed === undefined || trimmed === "" ? undefined : trimmed;
}

/** An optional choice among fixed values (case-insensitive); blank gives the default. */
export function chooseOne<T extends string>(
  name: string,
  value: string | undefined,
  allowed: readonly T[],
  fallback: T,
): T {
  const normalized = value?.trim().toLowerCase();
  if (normalized === undefined || normalized === "") return fallback;
  const match = allowed.find((candidate) => candidate === normalized);
  if (match === undefined) {
    throw new ToolParamError(
      `${name}: expected one of ${allowed.map((v) => `"${v}"`).join(", ")}, got "${value}"`,
    );
  }
  return match;
}
