import { z } from "zod";
import { ScriptedRulesSchema } from "../scripted/scripted-rule-schema";

/** `rules` is inline rules or the path of a JSON/YAML rules file (relative to the config file). */
const RulesSourceSchema = z.unknown().transform((value, ctx) => {
  if (typeof value === "string") {
    if (value.trim() === "") ctx.addIssue({ code: "custom", message: "must be a non-empty file path" });
    return value;
  }
  const parsed = ScriptedRulesSchema.safeParse(value);
  if (parsed.success) return parsed.data;
  if (!Array.isArray(value)) {
    ctx.addIssue({ code: "custom", message: "must be a list of rules or the path of a JSON/YAML rules file" });
    return z.NEVER;
  }
  for (const issue of parsed.error.issues) {
    ctx.addIssue({ code: "custom", message: issue.message, path: issue.path as (string | number)[] });
  }
  return z.NEVER;
});

export const ScriptedModelConfigSchema = z.strictObject({
  provider: z.literal("scripted"),
  rules: RulesSourceSchema.optional(),
});

export const OpenAIModelConfigSchema = z.strictObject({
  provider: z.literal("openai"),
  baseUrl: z.url({ protocol: /^https?$/, error: "must be an http(s) URL, e.g. http://127.0.0.1:11434/v1" }),
  model: z.string().min(1, "must name the model"),
  /** Name of the environment variable holding the API key (never the key itself). */
  apiKeyEnv: z.string().min(1).optional(),
  stream: z.boolean().default(true),
  temperature: z.number().min(0).max(2).optional(),
  maxTokens: z.number().int().positive().optional(),
  /** Retries after a 429/5xx or a network error, within the run deadline. */
  maxRetries: z.number().int().min(0).max(5).default(2),
  /** The longest wait a retry may take (ms); a longer `retry-after` ends the run instead. */
  maxRetryDelayMs: z.number().int().min(0).max(120_000).default(30_000),
});
export type OpenAIModelConfig = z.infer<typeof OpenAIModelConfigSchema>;
export type OpenAIModelConfigInput = z.input<typeof OpenAIModelConfigSchema>;

/** An agent's `model` entry in the config file. */
export const AgentModelConfigSchema = z.discriminatedUnion("provider", [
  ScriptedModelConfigSchema,
  OpenAIModelConfigSchema,
]);
export type AgentModelConfig = z.infer<typeof AgentModelConfigSchema>;
export type AgentModelConfigInput = z.input<typeof AgentModelConfigSchema>;
