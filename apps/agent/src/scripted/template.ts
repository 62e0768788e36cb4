/**
 * The scripted model's template language: `$n` (a capture of the rule's `when` regex, `$0` the whole
 * match, `$$` a literal dollar) and `{{path}}` (a dotted path into the scope, e.g. `{{result.reply}}`,
 * `{{results.0.childSessionKey}}`, `{{message}}`).
 */

export interface TemplateScope {
  message: string;
  context: string;
  /** Captures of the matched `when` regex; index 0 is the whole match. */
  captures: readonly (string | undefined)[];
  /** The last tool result of this run (undefined before any call). */
  result: unknown;
  /** Every tool result of this run, in call order. */
  results: readonly unknown[];
  provenance: unknown;
  runId: string;
  sessionKey: string;
  agentId: string;
  lane: string;
}

export const TEMPLATE_VARIABLES = [
  "message",
  "context",
  "result",
  "results",
  "provenance",
  "runId",
  "sessionKey",
  "agentId",
  "lane",
] as const;

const PLACEHOLDER = /\$\$|\$(\d+)|\{\{\s*([A-Za-z_]\w*(?:\.[\w-]+)*)\s*\}\}/g;
const WHOLE_CAPTURE = /^\$(\d+)$/;
const WHOLE_PATH = /^\{\{\s*([A-Za-z_]\w*(?:\.[\w-]+)*)\s*\}\}$/;
/** Anything that opens a `{{` but is not a well-formed placeholder: caught at load time. */
const BROKEN_BRACES = /\{\{(?!\s*[A-Za-z_]\w*(?:\.[\w-]+)*\s*\}\})/;

/** Problems with a template (unknown variable, unclosed braces); empty when it is fine. */
export function templateProblems(template: string): string[] {
  const problems: string[] = [];
  if (BROKEN_BRACES.test(template))
    problems.push(`malformed placeholder in "${template}" (expected {{name.path}})`);
  for (const match of template.matchAll(PLACEHOLDER)) {
    const path = match[2];
    if (path === undefined) continue;
    const root = path.split(".")[0] as string;
    if (!(TEMPLATE_VARIABLES as readonly string[]).includes(root)) {
      problems.push(`unknown template variable {{${path}}} (known: ${TEMPLATE_VARIABLES.join(", ")})`);
    }
  }
  return problems;
}

/** Renders a template to text; missing values render as empty text, objects as JSON. */
export function renderTemplate(template: string, scope: TemplateScope): string {
  return template.replace(PLACEHOLDER, (whole, capture: string | undefined, path: string | undefined) => {
    if (whole === "$$") return "$";
    if (capture !== undefined) return scope.captures[Number(capture)] ?? "";
    return toText(lookupPath(scope, path as string));
  });
}

/**
 * Renders tool-call arguments. Strings are templates; a string that is exactly one placeholder keeps
 * the referenced value's own type (so `{{result.count}}` stays a number); numbers, booleans and null
 * are kept as written; arrays and objects are rendered member by member.
 */
export function renderValue(value: unknown, scope: TemplateScope): unknown {
  if (typeof value === "string") {
    const capture = WHOLE_CAPTURE.exec(value);
    if (capture) return scope.captures[Number(capture[1])];
    const path = WHOLE_PATH.exec(value);
    if (path) return lookupPath(scope, path[1] as string);
    return renderTemplate(value, scope);
  }
  if (Array.isArray(value)) return value.map((item) => renderValue(item, scope));
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      const rendered = renderValue(item, scope);
      // A placeholder that names nothing leaves the argument out rather than sending `undefined`.
      if (rendered !== undefined) out[key] = rendered;
    }
    return out;
  }
  return value;
}

/** Every template string inside a value (for load-time checks). */
export function templateStrings(value: unknown): string[] {
  if (typeof value === "string") return [value];
  if (Array.isArray(value)) return value.flatMap(templateStrings);
  if (value !== null && typeof value === "object") return Object.values(value).flatMap(templateStrings);
  return [];
}

function lookupPath(scope: TemplateScope, path: string): unknown {
  let current: unknown = scope;
  for (const segment of path.split(".")) {
    if (current === null || current === undefined) return undefined;
    if (typeof current !== "object") return undefined;
    if (!Object.hasOwn(current, segment)) return undefined;
    current = (current as Record<string, unknown>)[segment];
  }
  return current;
}

function toText(value: unknown): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint")
    return String(value);
  return JSON.stringify(value);
}
