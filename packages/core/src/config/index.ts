export {
  agentClearance,
  agentConfig,
  archiveWindowMinutes,
  defaultAgentId,
  hostDrivenSessionKeys,
  longestArchiveWindowMinutes,
  type ResolvedAgentConfig,
} from "./agent-config";
export type { ConfigIssue } from "./config-issues";
export {
  type Config,
  type ConfigAgent,
  ConfigAgentSchema,
  type ConfigInput,
  ConfigSchema,
  type ConfigToken,
  ConfigTokenSchema,
} from "./config-schema";
export {
  type AgentModelConfig,
  type AgentModelConfigInput,
  AgentModelConfigSchema,
  defaultAgentModel,
  type OpenAIModelConfig,
  OpenAIModelConfigSchema,
  type ScriptedModelConfig,
  ScriptedModelConfigSchema,
  type SubagentModel,
  SubagentModelSchema,
} from "./model-config";
export {
  DEFAULT_MAX_ENDED_RUNS_FS,
  PostgresSchemaNameSchema,
  PostgresUrlSchema,
  RetentionConfigSchema,
  type StoreConfig,
  StoreConfigSchema,
  TelemetryConfigSchema,
  UiConfigSchema,
} from "./operations-config";
export { configJsonSchema, defaultConfig, parseConfig, parseScriptedRulesFile } from "./parse-config";
export {
  DEFAULT_SCRIPTED_RULES,
  defaultScriptedRules,
  type ScriptedRule,
  type ScriptedRuleInput,
  ScriptedRuleSchema,
  type ScriptedRulesFile,
  ScriptedRulesFileSchema,
  ScriptedRulesSchema,
  type ScriptedToolCall,
  ScriptedToolCallSchema,
} from "./scripted-rules";
