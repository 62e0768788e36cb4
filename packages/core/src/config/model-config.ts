import { z } from "zod";
import { intAtLeast, nonEmptyString, requiredOr } from "./schema-helpers";
import { defaultScriptedRules, ScriptedRulesSchema } from "./scripted-rules";

/** Deterministic offline model: inline rules, or the path of a JSON/YAML rules file. */
export const ScriptedModelConfigSchema = z.strictObject({
  provider: z.literal("scripted"),
  rules: z
    .union([ScriptedRulesSchema, nonEmptyString("a path to a rules file")], {
      error: "must be a list of scripted rules or the path of a JSON/YAML rules file",
    })
    .default(defaultScriptedRules),
});
export type ScriptedModelConfig = z.infer<typeof ScriptedModelConfigSchema>;

/** Any OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, vLLM, LM Studio, llama.cpp). */
export const OpenAIModelConfigSchema = z.strictObject({
  provider: z.literal("openai"),
  baseUrl: z.url({
    protocol: /^https?$/,
    error: requiredOr("must be an http(s) URL, e.g. http://127.0.0.1:11434/v1"),
  }),
  model: nonEmptyString("a model name"),
  /** Name of the environment variable holding the API key; the key itself never sits in the config. */
  apiKeyEnv: z
    .string({ error: "must be an environment variable name" })
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: "must be an environment variable name, e.g. OPENAI_API_KEY" })
    .optional(),
  temperature: z
    .number({ error: "must be a number from 0 to 2" })
    .min(0, { error: "must be a number from 0 to 2" })
    .max(2, { error: "must be a number from 0 to 2" })
    .optional(),
  stream: z.boolean({ error: "must be true or false" }).default(true),
  timeoutMs: intAtLeast(1).optional(),
  /**
   * The most one model call may read from the server (stream or body) before the run fails; also
   * bounds the reply text a run may stream. Unset: the agent's default (8 MiB).
   */
  maxResponseBytes: intAtLeast(1024).optional(),
});
export type OpenAIModelConfig = z.infer<typeof OpenAIModelConfigSchema>;

export const MODEL_PROVIDERS = ["scripted", "openai"] as const;

export const AgentModelConfigSchema = z.discriminatedUnion(
  "provider",
  [ScriptedModelConfigSchema, OpenAIModelConfigSchema],
  {
    // Reported at `model.provider` when the discriminator is missing or unknown.
    error: (issue) =>
      issue.code === "invalid_union"
        ? `must be one of ${MODEL_PROVIDERS.map((p) => `"${p}"`).join(", ")}`
        : 'must be a model config object, e.g. {provider: "scripted"}',
  },
);
export type AgentModelConfig = z.infer<typeof AgentModelConfigSchema>;
export type AgentModelConfigInput = z.input<typeof AgentModelConfigSchema>;

/**
 * Model for sub-agents: `null` = the target agent's own model; a string = that model name on the
 * target agent's provider (like `sessions_spawn`'s `model`); an object = a full model config.
 */
export const SubagentModelSchema = z.union(
  [z.null(), nonEmptyString("a model name"), AgentModelConfigSchema],
  {
    error: "must be null, a model name or a model config object",
  },
);
export type SubagentModel = z.infer<typeof SubagentModelSchema>;

/** The model of the built-in `main` agent and of agents configured without one. */
export function defaultAgentModel(): AgentModelConfig {
  return { provider: "scripted", rules: defaultScriptedRules() };
}
