import {
  SESSION_KINDS,
  SPAWN_CLEANUP_MODES,
  SUMMARIZE_SCOPES,
  TOOL_NAMES,
  TOOL_PARAM_SCHEMAS,
  type ToolDefinition,
  type ToolName,
} from "@switchboard/core";
import { type JsonSchemaObject, toProviderJsonSchema } from "./provider-json-schema";
import { TOOL_DESCRIPTIONS } from "./tool-descriptions";

/**
 * Allowed values shown to the model as `enum`. The zod schemas keep these parameters as plain strings
 * so a wrong value is clamped or named by the executor rather than refused by a schema; the enum
 * still lets providers with constrained decoding pick a valid value.
 */
const ENUM_HINTS: Partial<Record<ToolName, Record<string, readonly string[]>>> = {
  sessions_list: { "kinds[]": SESSION_KINDS },
  sessions_spawn: { cleanup: SPAWN_CLEANUP_MODES },
  summarize: { scope: SUMMARIZE_SCOPES },
};

function buildDefinition(name: ToolName): ToolDefinition {
  const parameters = toProviderJsonSchema(TOOL_PARAM_SCHEMAS[name]);
  const properties = parameters.properties as Record<string, JsonSchemaObject>;
  for (const [path, values] of Object.entries(ENUM_HINTS[name] ?? {})) {
    const isItems = path.endsWith("[]");
    const property = properties[isItems ? path.slice(0, -2) : path];
    const target = isItems ? (property?.items as JsonSchemaObject | undefined) : property;
    if (!target) throw new Error(`enum hint for missing parameter ${name}.${path}`);
    target.enum = [...values];
  }
  return { name, description: TOOL_DESCRIPTIONS[name], parameters };
}

/** The nine session tools as handed to a model, in the canonical order of `TOOL_NAMES`. */
export const TOOL_DEFINITIONS: ToolDefinition[] = TOOL_NAMES.map(buildDefinition);

/**
 * Definitions for the given tool names (all nine when omitted), in canonical order; unknown names are
 * skipped. Each call returns fresh copies, so a provider adapter may reshape them freely.
 */
export function toolDefinitions(names?: readonly string[]): ToolDefinition[] {
  const wanted = names === undefined ? undefined : new Set(names);
  return TOOL_DEFINITIONS.filter((definition) => wanted === undefined || wanted.has(definition.name)).map(
    (definition) => structuredClone(definition),
  );
}
