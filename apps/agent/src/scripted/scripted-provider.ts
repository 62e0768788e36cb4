import { type ScriptedRule, type ScriptedRuleInput, SwitchboardError } from "@switchboard/core";
import { abortableSleep } from "../model/abortable-sleep";
import type {
  ChatMessage,
  ModelProvider,
  ModelRequest,
  ModelToolCall,
  ModelTurn,
} from "../model/model-types";
import { parseScriptedRules } from "./load-scripted-rules";
import { renderTemplate, renderValue, type TemplateScope } from "./template";

export const NO_RULE_MATCHED = "no scripted rule matched";

interface CompiledRule {
  rule: ScriptedRule;
  when?: RegExp;
  context?: RegExp;
  calls: { tool: string; args: Record<string, unknown> }[];
}

/**
 * A deterministic, offline model driven by rules. It behaves like a real model inside the run loop:
 * the first call of a run answers with the matched rule's first tool call, each later call (after the
 * loop fed the result back) with the next one, and the call after the last result with the reply. So
 * later calls' args can use earlier results, and the same loop drives scripted and real models.
 */
export class ScriptedModelProvider implements ModelProvider {
  readonly name = "scripted";
  readonly #rules: CompiledRule[];

  /** `where` names the rules in errors (a config path or a file). */
  constructor(rules: readonly ScriptedRuleInput[], where = "scripted rules") {
    this.#rules = parseScriptedRules(rules, where).map((rule) => ({
      rule,
      when: rule.when === undefined ? undefined : new RegExp(rule.when),
      context: rule.context === undefined ? undefined : new RegExp(rule.context),
      calls: rule.call === undefined ? [] : Array.isArray(rule.call) ? rule.call : [rule.call],
    }));
  }

  async complete(request: ModelRequest): Promise<ModelTurn> {
    request.signal.throwIfAborted();
    const { input } = request.run;
    const match = this.#match(input.message, input.context, input.provenance.kind);
    if (!match) {
      throw new SwitchboardError("INTERNAL", NO_RULE_MATCHED, {
        details: { message: input.message.slice(0, 200), provenance: input.provenance.kind },
      });
    }
    const { compiled, captures } = match;
    const results = resultsOfThisRun(request.messages);
    if (results.length === 0 && compiled.rule.delayMs)
      await abortableSleep(compiled.rule.delayMs, request.signal);

    const scope: TemplateScope = {
      message: input.message,
      context: input.context,
      captures,
      result: results.at(-1),
      results,
      provenance: input.provenance,
      runId: request.run.runId,
      sessionKey: request.run.sessionKey,
      agentId: request.run.agentId,
      lane: request.run.lane,
    };
    const usage = (output: string) => ({
      inputTokens:
        estimateTokens(request.system) +
        request.messages.reduce((n, m) => n + estimateTokens(messageText(m)), 0),
      outputTokens: estimateTokens(output),
    });

    const next = compiled.calls[results.length];
    if (next) {
      const args = renderValue(next.args, scope) as Record<string, unknown>;
      const call: ModelToolCall = {
        id: `${request.run.runId}:call:${results.length}`,
        name: next.tool,
        args,
      };
      return { toolCalls: [call], usage: usage(JSON.stringify(args)) };
    }
    if (compiled.rule.fail !== undefined) {
      throw new SwitchboardError("INTERNAL", renderTemplate(compiled.rule.fail, scope));
    }
    const text = renderTemplate(compiled.rule.reply ?? "", scope);
    return { text, usage: usage(text) };
  }

  #match(
    message: string,
    context: string,
    provenance: string,
  ): { compiled: CompiledRule; captures: (string | undefined)[] } | undefined {
    for (const compiled of this.#rules) {
      const { rule } = compiled;
      if (rule.provenance !== undefined && rule.provenance !== provenance) continue;
      if (compiled.context && !compiled.context.test(context)) continue;
      if (compiled.when) {
        const found = compiled.when.exec(message);
        if (!found) continue;
        return { compiled, captures: [...found] };
      }
      return { compiled, captures: [message] };
    }
    return undefined;
  }
}

/**
 * Tool results fed back during this run. The run's input is the last user message; everything after
 * it was produced by this run, so an LLM and this model read the same transcript the same way.
 */
function resultsOfThisRun(messages: readonly ChatMessage[]): unknown[] {
  let start = messages.length;
  while (start > 0 && messages[start - 1]?.role !== "user") start--;
  return messages
    .slice(start)
    .filter((message) => message.role === "tool")
    .map((message) => message.result);
}

function messageText(message: ChatMessage): string {
  if (message.role === "tool") return JSON.stringify(message.result) ?? "";
  if (message.role === "assistant" && message.toolCalls)
    return message.content + JSON.stringify(message.toolCalls);
  return message.content;
}

/** Scripted usage is an estimate (about four characters per token) so token stats are never empty. */
function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}
