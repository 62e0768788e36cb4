import { formatPath, SwitchboardError } from "@switchboard/core";
import type { AgentLogger } from "../logger";
import { OpenAIModelProvider, type OpenAIProviderOptions } from "../openai/openai-provider";
import { loadScriptedRulesFile } from "../scripted/load-scripted-rules";
import { DEFAULT_SCRIPTED_RULES } from "../scripted/scripted-rule-schema";
import { ScriptedModelProvider } from "../scripted/scripted-provider";
import { AgentModelConfigSchema } from "./model-config";
import type { ModelProvider } from "./model-types";

export interface CreateModelProviderOptions extends Omit<OpenAIProviderOptions, "logger"> {
  /** Directory a relative rules-file path is resolved against (the config file's directory). */
  baseDir?: string;
  /** Prefix for error messages, e.g. `agents.list[0].model`. */
  where?: string;
  logger?: AgentLogger;
}

/**
 * The model of one agent from its config entry; an absent entry (or scripted without rules) gets the
 * default scripted rules, which echo and stay silent in agent-to-agent steps.
 */
export async function createModelProvider(
  config: unknown,
  options: CreateModelProviderOptions = {},
): Promise<ModelProvider> {
  const where = options.where ?? "model";
  if (config === undefined || config === null) return new ScriptedModelProvider(DEFAULT_SCRIPTED_RULES);
  const parsed = AgentModelConfigSchema.safeParse(config);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => {
      const path = formatPath(issue.path as PropertyKey[]);
      return `${path === "" ? where : path.startsWith("[") ? where + path : `${where}.${path}`}: ${issue.message}`;
    });
    throw new SwitchboardError("INVALID_REQUEST", lines.join("; "));
  }
  const model = parsed.data;
  if (model.provider === "openai") return new OpenAIModelProvider(model, options);
  if (model.rules === undefined) return new ScriptedModelProvider(DEFAULT_SCRIPTED_RULES);
  const rules = typeof model.rules === "string" ? await loadScriptedRulesFile(model.rules, options.baseDir) : model.rules;
  return new ScriptedModelProvider(rules);
}
