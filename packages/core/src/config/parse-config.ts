import { z } from "zod";
import { parseWithIssues } from "./config-issues";
import { type Config, ConfigSchema } from "./config-schema";
import { type ScriptedRule, ScriptedRulesFileSchema } from "./scripted-rules";

/**
 * Validates a parsed config file (JSON/JSON5/YAML already decoded) and fills in every default.
 * Throws `SwitchboardError("INVALID_REQUEST")` listing one `path: reason` line per problem;
 * `details.issues` holds `{path, message}` for each. Unknown keys are errors.
 */
export function parseConfig(input: unknown): Config {
  return parseWithIssues(ConfigSchema, input, "configuration", (path, message) => {
    // Policy rules are known by id (decisions name it), so problems with one name it too.
    if (path[0] !== "policy" || path[1] !== "rules" || typeof path[2] !== "number") return message;
    const rules = (input as { policy?: { rules?: unknown } }).policy?.rules;
    const id = Array.isArray(rules) ? (rules[path[2]] as { id?: unknown } | undefined)?.id : undefined;
    return typeof id === "string" && id !== "" ? `rule "${id}": ${message}` : message;
  });
}

/** The configuration used when there is no config file: one `main` agent on the scripted model. */
export function defaultConfig(): Config {
  return parseConfig({});
}

/**
 * Validates the content of a scripted rules file (`{rules: [...]}`); `source` (e.g. the file path)
 * names it in the error.
 */
export function parseScriptedRulesFile(input: unknown, source = "scripted rules file"): ScriptedRule[] {
  return parseWithIssues(ScriptedRulesFileSchema, input, source).rules;
}

/** JSON Schema (draft 2020-12) of what a config file may contain, for editor completion. */
export function configJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(ConfigSchema, { io: "input", unrepresentable: "any" }) as Record<
    string,
    unknown
  >;
  return {
    ...schema,
    title: "Switchboard configuration",
    description: "switchboard.config.json5 (JSON, JSON5 or YAML)",
  };
}
