import type { EventPayload, ToolDefinition, Usage } from "@switchboard/core";

/** What the gateway hands a worker for one run (`run.assigned` event payload). */
export type RunAssignedPayload = EventPayload<"run.assigned">;

/** One tool call the model asked for. */
export interface ModelToolCall {
  id: string;
  name: string;
  args: Record<string, unknown>;
  /**
   * Set when the model produced arguments that are not a JSON object: the run loop answers the call
   * with an error result instead of invoking the tool, so the model can correct itself.
   */
  argsError?: string;
}

/**
 * Chat history in the provider-neutral shape the run loop builds. Roles follow the OpenAI chat
 * convention; tool results stay structured so the scripted model can read them without re-parsing.
 */
export type ChatMessage =
  | { role: "system"; content: string }
  | { role: "user"; content: string }
  | { role: "assistant"; content: string; toolCalls?: ModelToolCall[] }
  | { role: "tool"; toolCallId: string; name: string; result: unknown };

/** The run facts a provider may use besides the chat (the scripted model matches on them). */
export type ModelRunInfo = Omit<RunAssignedPayload, "history" | "tools">;

/** One model call. */
export interface ModelRequest {
  system: string;
  messages: ChatMessage[];
  tools: ToolDefinition[];
  signal: AbortSignal;
  run: ModelRunInfo;
  /** Called with each piece of reply text as it streams in. */
  onTextDelta?: (text: string) => void;
}

/** What one model call produced: reply text, tool calls, or both. */
export interface ModelTurn {
  text?: string;
  toolCalls?: ModelToolCall[];
  usage?: Usage;
}

export interface ModelProvider {
  /** Short name for logs and errors, e.g. `scripted` or `openai:qwen3:8b`. */
  readonly name: string;
  /**
   * The most reply text (all rounds of a run together) this provider's runs may stream, in
   * characters; past it the run fails. Unset: no limit (the scripted model's text is the config's own).
   */
  readonly maxTextChars?: number;
  complete(request: ModelRequest): Promise<ModelTurn>;
}
