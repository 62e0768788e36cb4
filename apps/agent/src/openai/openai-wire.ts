import type { ToolDefinition } from "@switchboard/core";
import { z } from "zod";
import type { ChatMessage, ModelToolCall } from "../model/model-types";

/** Chat Completions request messages (the subset this agent sends). */
export type OpenAIMessage =
  | { role: "system" | "user"; content: string }
  | {
      role: "assistant";
      content: string | null;
      tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
    }
  | { role: "tool"; tool_call_id: string; content: string };

export function toOpenAIMessages(system: string, messages: readonly ChatMessage[]): OpenAIMessage[] {
  const out: OpenAIMessage[] = [];
  if (system !== "") out.push({ role: "system", content: system });
  for (const message of messages) {
    switch (message.role) {
      case "system":
      case "user":
        out.push({ role: message.role, content: message.content });
        break;
      case "assistant": {
        const calls = message.toolCalls ?? [];
        if (calls.length === 0) {
          out.push({ role: "assistant", content: message.content });
          break;
        }
        out.push({
          role: "assistant",
          // Several servers reject an empty string next to tool calls but accept null.
          content: message.content === "" ? null : message.content,
          tool_calls: calls.map((call) => ({
            id: call.id,
            type: "function",
            function: { name: call.name, arguments: JSON.stringify(call.args) },
          })),
        });
        break;
      }
      case "tool":
        out.push({
          role: "tool",
          tool_call_id: message.toolCallId,
          content:
            typeof message.result === "string" ? message.result : (JSON.stringify(message.result) ?? "null"),
        });
        break;
    }
  }
  return out;
}

export function toOpenAITools(tools: readonly ToolDefinition[]) {
  return tools.map((tool) => ({
    type: "function" as const,
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  }));
}

/** Arguments arrive as a JSON string (some servers send an object); anything but an object is refused. */
export function parseToolArguments(raw: unknown): Pick<ModelToolCall, "args" | "argsError"> {
  if (raw === undefined || raw === null || (typeof raw === "string" && raw.trim() === ""))
    return { args: {} };
  let value: unknown = raw;
  if (typeof raw === "string") {
    try {
      value = JSON.parse(raw);
    } catch (error) {
      return { args: {}, argsError: `arguments are not valid JSON: ${(error as Error).message}` };
    }
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { args: {}, argsError: "arguments must be a JSON object" };
  }
  return { args: value as Record<string, unknown> };
}

const WireUsageSchema = z
  .object({ prompt_tokens: z.number().nonnegative(), completion_tokens: z.number().nonnegative() })
  .partial()
  .nullish();

const WireErrorSchema = z
  .union([z.string(), z.object({ message: z.string().optional() }).loose()])
  .optional();

export const CompletionSchema = z.object({
  choices: z
    .array(
      z.object({
        message: z.object({
          content: z.string().nullish(),
          tool_calls: z
            .array(
              z.object({
                id: z.string().nullish(),
                function: z.object({ name: z.string().min(1), arguments: z.unknown().optional() }),
              }),
            )
            .nullish(),
        }),
        finish_reason: z.string().nullish(),
      }),
    )
    .min(1),
  usage: WireUsageSchema,
});

export const StreamChunkSchema = z.object({
  choices: z
    .array(
      z.object({
        index: z.number().optional(),
        delta: z
          .object({
            content: z.string().nullish(),
            tool_calls: z
              .array(
                z.object({
                  index: z.number().int().nonnegative().optional(),
                  id: z.string().nullish(),
                  function: z
                    .object({ name: z.string().nullish(), arguments: z.string().nullish() })
                    .nullish(),
                }),
              )
              .nullish(),
          })
          .nullish(),
        finish_reason: z.string().nullish(),
      }),
    )
    .nullish(),
  usage: WireUsageSchema,
});

/** A body that carries `{error: ...}` instead of a completion (some servers do this with status 200). */
export const ErrorBodySchema = z.object({ error: WireErrorSchema.unwrap() });

export function errorBodyMessage(value: unknown): string | undefined {
  // Checked first because a failed safeParse builds an error object, and every stream event gets here.
  if (typeof value !== "object" || value === null || !("error" in value)) return undefined;
  const parsed = ErrorBodySchema.safeParse(value);
  if (!parsed.success) return undefined;
  const { error } = parsed.data;
  if (typeof error === "string") return error;
  return error.message ?? JSON.stringify(error);
}

export function toUsage(usage: z.infer<typeof WireUsageSchema>) {
  if (!usage || usage.prompt_tokens === undefined || usage.completion_tokens === undefined) return undefined;
  return { inputTokens: Math.round(usage.prompt_tokens), outputTokens: Math.round(usage.completion_tokens) };
}
