import {
  AgentModelConfigSchema,
  defaultAgentModel,
  formatZodIssues,
  SwitchboardError,
} from "@switchboard/core";
import type { AgentLogger } from "../logger";
import { OpenAIModelProvider, type OpenAIProviderOptions } from "../openai/openai-provider";
import { loadScriptedRulesFile } from "../scripted/load-scripted-rules";
import { ScriptedModelProvider } from "../scripted/scripted-provider";
import type { ModelProvider } from "./model-types";

export interface CreateModelProviderOptions extends Omit<OpenAIProviderOptions, "logger"> {
  /** Directory a relative rules-file path is resolved against (the config file's directory). */
  baseDir?: string;
  /** Names the entry in error messages, e.g. `agents.list[0].model`. */
  where?: string;
  logger?: AgentLogger;
}

/**
 * The model of one agent from its config entry (`AgentModelConfigSchema` of @switchboard/core). No
 * entry, or `{provider: "scripted"}` without rules, gives the default scripted rules.
 */
export async function createModelProvider(
  config: unknown,
  options: CreateModelProviderOptions = {},
): Promise<ModelProvider> {
  const where = options.where ?? "model";
  const parsed = AgentModelConfigSchema.safeParse(config ?? defaultAgentModel());
  if (!parsed.success) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `invalid ${where}:\n  ${formatZodIssues(parsed.error).join("\n  ")}`,
    );
  }
  const model = parsed.data;
  if (model.provider === "openai") return new OpenAIModelProvider(model, options);
  if (typeof model.rules === "string") {
    return new ScriptedModelProvider(await loadScriptedRulesFile(model.rules, options.baseDir), model.rules);
  }
  return new ScriptedModelProvider(model.rules, `${where}.rules`);
}
