import { SwitchboardError, type Usage } from "@switchboard/core";
import { type AgentLogger, silentLogger } from "../logger";
import { raceAbort } from "../model/abortable-sleep";
import type { ChatMessage, ModelProvider, ModelTurn, RunAssignedPayload } from "../model/model-types";
import { buildModelInput, type ModelInputOptions } from "./model-input";
import { runAbortedError, runSignal } from "./run-abort";

export type ProgressKind = "text-delta" | "tool-call" | "tool-result";

/** What the worker provides for one run. */
export interface RunContext {
  /**
   * `tools.invoke` for this run. `toolCallId` is the model's id for the call, so the gateway can
   * record the call under the same id the run's progress reports use.
   */
  invokeTool(
    name: string,
    args: Record<string, unknown>,
    call?: { toolCallId: string },
  ): Promise<Record<string, unknown>>;
  /** `run.progress` for this run; best effort (a failure is logged, never fails the run). */
  progress(kind: ProgressKind, data: Record<string, unknown>): Promise<void> | void;
  /** Aborted at the deadline or on shutdown. */
  signal: AbortSignal;
}

export interface ExecuteRunOptions extends ModelInputOptions {
  /** Model turns that may ask for tools before the run is stopped (default 8). */
  maxToolRounds?: number;
  logger?: AgentLogger;
  now?: () => number;
}

export interface RunResult {
  reply: string;
  usage?: Usage;
}

export const DEFAULT_MAX_TOOL_ROUNDS = 8;

/**
 * One agent turn: model → tool calls (through `ctx.invokeTool`) → results fed back → … → reply.
 * Throws when the run cannot end with a reply (model error, too many tool rounds, abort); the
 * error's message is what the worker reports with `run.fail`.
 */
export async function executeRun(
  run: RunAssignedPayload,
  model: ModelProvider,
  ctx: RunContext,
  options: ExecuteRunOptions = {},
): Promise<RunResult> {
  const logger = options.logger ?? silentLogger;
  const maxToolRounds = options.maxToolRounds ?? DEFAULT_MAX_TOOL_ROUNDS;
  const { signal, dispose } = runSignal(ctx.signal, run.deadline, options.now);
  const report = (kind: ProgressKind, data: Record<string, unknown>) => {
    try {
      Promise.resolve(ctx.progress(kind, data)).catch((error: unknown) =>
        logger.warn({ runId: run.runId, kind, error: String(error) }, "run.progress failed"),
      );
    } catch (error) {
      logger.warn({ runId: run.runId, kind, error: String(error) }, "run.progress failed");
    }
  };
  const aborted = (cause?: unknown) => runAbortedError(signal, cause);

  try {
    if (signal.aborted) throw aborted();
    const { system, messages } = buildModelInput(run, options);
    const { history: _history, tools, ...runInfo } = run;
    let usage: Usage | undefined;
    const maxTextChars = model.maxTextChars ?? Number.POSITIVE_INFINITY;
    let textChars = 0;
    const tooMuchText = () =>
      new SwitchboardError(
        "PAYLOAD_TOO_LARGE",
        `run stopped: the model's reply text exceeded ${maxTextChars} characters (maxResponseBytes)`,
        { details: { runId: run.runId, model: model.name, maxTextChars } },
      );

    for (let round = 0; ; round++) {
      let streamed = false;
      let overflow = false;
      let turn: ModelTurn;
      try {
        turn = await raceAbort(
          model.complete({
            system,
            messages: [...messages],
            tools,
            signal,
            run: runInfo,
            onTextDelta: (text) => {
              if (signal.aborted || text === "" || overflow) return;
              streamed = true;
              textChars += text.length;
              // Nothing past the limit reaches the gateway; the run fails once the call returns.
              if (textChars > maxTextChars) overflow = true;
              else report("text-delta", { text });
            },
          }),
          signal,
        );
      } catch (error) {
        if (signal.aborted) throw aborted(error);
        throw error;
      }
      if (signal.aborted) throw aborted();
      if (overflow) throw tooMuchText();
      if (!streamed) textChars += turn.text?.length ?? 0;
      if (textChars > maxTextChars) throw tooMuchText();
      if (turn.usage) {
        usage = {
          inputTokens: (usage?.inputTokens ?? 0) + turn.usage.inputTokens,
          outputTokens: (usage?.outputTokens ?? 0) + turn.usage.outputTokens,
        };
      }

      const calls = turn.toolCalls ?? [];
      if (calls.length === 0) {
        const reply = turn.text ?? "";
        if (!streamed && reply !== "") report("text-delta", { text: reply });
        logger.debug({ runId: run.runId, rounds: round, model: model.name }, "run finished");
        return usage ? { reply, usage } : { reply };
      }
      if (round >= maxToolRounds) {
        throw new SwitchboardError(
          "INTERNAL",
          `run stopped: the model was still calling tools after ${maxToolRounds} tool rounds`,
          { details: { runId: run.runId, maxToolRounds } },
        );
      }

      messages.push({ role: "assistant", content: turn.text ?? "", toolCalls: calls });
      for (const call of calls) {
        if (signal.aborted) throw aborted();
        report("tool-call", { toolCallId: call.id, name: call.name, args: call.args });
        let result: Record<string, unknown>;
        if (call.argsError !== undefined) {
          result = { status: "error", error: `tool ${call.name}: ${call.argsError}` };
        } else {
          try {
            result = await raceAbort(ctx.invokeTool(call.name, call.args, { toolCallId: call.id }), signal);
          } catch (error) {
            if (signal.aborted) throw aborted(error);
            // Tools never throw at the model: a refused or failed invocation becomes a result it can read.
            result = { status: "error", error: error instanceof Error ? error.message : String(error) };
            logger.warn(
              { runId: run.runId, tool: call.name, error: String(error) },
              "tool invocation failed",
            );
          }
        }
        report("tool-result", { toolCallId: call.id, name: call.name, result });
        messages.push({ role: "tool", toolCallId: call.id, name: call.name, result } satisfies ChatMessage);
      }
    }
  } finally {
    dispose();
  }
}
