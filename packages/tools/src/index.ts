/** Kept for importers of the tools package; the one definition lives in core. */
export {
  HISTORY_LIMIT,
  HISTORY_MAX_BYTES,
  type IntegerRange,
  SEND_TIMEOUT_SECONDS,
  SESSION_KINDS,
  SESSIONS_LIST_LIMIT,
  SESSIONS_LIST_MESSAGE_LIMIT,
  type SessionKind,
  SPAWN_CLEANUP_MODES,
  SPAWN_LABEL_MAX_LENGTH,
  SUMMARIZE_SCOPES,
} from "@switchboard/core";
export { capHistory } from "./cap-history";
export { type JsonSchemaObject, toProviderJsonSchema } from "./provider-json-schema";
export { SUBAGENT_DEFAULT_DENIED_TOOLS, type ToolAccessInput, toolsForSession } from "./tool-access";
export { TOOL_DEFINITIONS, toolDefinitions } from "./tool-definitions";
export { TOOL_DESCRIPTIONS } from "./tool-descriptions";
export {
  createToolExecutor,
  type ToolExecutor,
  type ToolExecutorOptions,
} from "./tool-executor";
