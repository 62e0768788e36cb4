import {
  clampInteger,
  clampSeconds,
  HISTORY_LIMIT,
  HISTORY_MAX_BYTES,
  isSessionKind,
  isSwitchboardError,
  type Logger,
  SEND_TIMEOUT_SECONDS,
  SESSIONS_LIST_LIMIT,
  SESSIONS_LIST_MESSAGE_LIMIT,
  type SessionKind,
  type SessionRow,
  SPAWN_CLEANUP_MODES,
  SPAWN_LABEL_MAX_LENGTH,
  SUMMARIZE_SCOPES,
  type ToolBackend,
  type ToolCaller,
  type ToolName,
  ToolNameSchema,
  type ToolParams,
  type ToolResult,
  type ToolStatus,
  ToolStatusSchema,
} from "@switchboard/core";
import { capHistory } from "./cap-history";
import {
  chooseOne,
  optionalIdentifier,
  parseToolParams,
  requireText,
  ToolParamError,
} from "./parse-tool-params";

export interface ToolExecutorOptions {
  /** Told about unexpected backend failures (those become `internal error` results). Silent by default. */
  logger?: Logger;
}

export interface ToolExecutor {
  /**
   * Runs one tool call. Never rejects: every failure, including a bad name or bad arguments, is a result
   * with `status` and `error`. `caller` is handed to the backend as given; arguments cannot change it.
   */
  invoke(name: string, args: unknown, caller: ToolCaller): Promise<ToolResult>;
}

type Handler<N extends ToolName> = (params: ToolParams<N>, caller: ToolCaller) => Promise<ToolResult>;

const ERROR_STATUS: Record<string, ToolStatus> = {
  FORBIDDEN: "forbidden",
  NOT_FOUND: "not_found",
  TIMEOUT: "timeout",
};

/** Validates, clamps and defaults the arguments of each session tool, then calls the backend port. */
export function createToolExecutor(backend: ToolBackend, options: ToolExecutorOptions = {}): ToolExecutor {
  const handlers: { [N in ToolName]: Handler<N> } = {
    sessions_list: async (params, caller) => {
      const limit = clampInteger(params.limit, SESSIONS_LIST_LIMIT);
      const messageLimit = clampInteger(params.messageLimit, SESSIONS_LIST_MESSAGE_LIMIT);
      const { sessions, hidden, dataLabel } = await backend.listSessions(caller, {
        kinds: validKinds(params.kinds),
        limit,
        activeMinutes:
          params.activeMinutes !== undefined && params.activeMinutes > 0 ? params.activeMinutes : undefined,
        messageLimit,
      });
      const rows = [...sessions]
        .sort((a, b) => b.updatedAt - a.updatedAt)
        .slice(0, limit)
        .map((row) => trimRowMessages(row, messageLimit));
      return {
        status: "ok",
        count: rows.length,
        sessions: rows,
        hidden,
        ...(dataLabel ? { dataLabel } : {}),
      };
    },

    sessions_history: async (params, caller) => {
      const includeTools = params.includeTools ?? false;
      const result = await backend.history(caller, {
        sessionKey: requireIdentifier("sessionKey", params.sessionKey),
        limit: clampInteger(params.limit, HISTORY_LIMIT),
        includeTools,
        before: seqCursor(params.before),
        maxBytes: HISTORY_MAX_BYTES,
      });
      if (result.status !== "ok") return result;
      const messages = includeTools
        ? result.messages
        : result.messages.filter((m) => m.role !== "toolResult");
      return capHistory({ ...result, messages }, HISTORY_MAX_BYTES);
    },

    sessions_send: (params, caller) =>
      backend.send(caller, {
        sessionKey: requireIdentifier("sessionKey", params.sessionKey),
        message: requireText("message", params.message),
        timeoutSeconds: clampSeconds(params.timeoutSeconds, SEND_TIMEOUT_SECONDS),
      }),

    sessions_spawn: (params, caller) =>
      backend.spawn(caller, {
        task: requireText("task", params.task),
        label: spawnLabel(params.label),
        agentId: optionalIdentifier(params.agentId),
        model: optionalIdentifier(params.model),
        runTimeoutSeconds:
          params.runTimeoutSeconds === undefined
            ? 0
            : clampSeconds(params.runTimeoutSeconds, { default: 0, min: 0, max: Number.MAX_SAFE_INTEGER }),
        cleanup: chooseOne("cleanup", params.cleanup, SPAWN_CLEANUP_MODES, "keep"),
      }),

    session_status: (params, caller) =>
      backend.status(caller, { sessionKey: optionalIdentifier(params.sessionKey) }),

    agents_list: (_params, caller) => backend.agents(caller),

    message: (params, caller) =>
      backend.message(caller, {
        channel: requireIdentifier("channel", params.channel),
        to: requireIdentifier("to", params.to),
        text: requireText("text", params.text),
      }),

    simulate_tool_call: (params, caller) =>
      backend.simulate(caller, {
        toolName: requireIdentifier("tool_name", params.tool_name),
        args: params.args ?? {},
      }),

    summarize: (params, caller) =>
      backend.summarize(caller, {
        scope: chooseOne("scope", params.scope, SUMMARIZE_SCOPES, "session"),
        sessionKey: optionalIdentifier(params.sessionKey),
      }),
  };

  async function run<N extends ToolName>(name: N, args: unknown, caller: ToolCaller): Promise<ToolResult> {
    const params = parseToolParams(name, args);
    return checkedResult(await (handlers[name] as Handler<N>)(params, caller));
  }

  return {
    async invoke(name, args, caller) {
      const known = ToolNameSchema.safeParse(name);
      if (!known.success) return { status: "error", error: `unknown tool: ${String(name)}` };
      try {
        return await run(known.data, args, caller);
      } catch (error) {
        return failureResult(known.data, error, options.logger);
      }
    },
  };
}

function failureResult(name: ToolName, error: unknown, logger: Logger | undefined): ToolResult {
  if (error instanceof ToolParamError) return { status: "error", error: error.message };
  if (isCodedError(error)) return { status: ERROR_STATUS[error.code] ?? "error", error: error.message };
  // Its own text (a driver's message naming hosts, users, paths) is for the operator's log only:
  // the caller — an agent, an MCP host — hears that it happened, and the transcript keeps no more.
  const message = error instanceof Error ? error.message : String(error);
  logger?.warn({ tool: name, error: message }, "tool backend failed unexpectedly");
  return { status: "error", error: "internal error" };
}

/**
 * A `SwitchboardError`, recognised by shape as well as class so a second copy of core in the bundle
 * (or an error rebuilt from the wire) still maps to the right status.
 */
function isCodedError(error: unknown): error is Error & { code: string } {
  if (isSwitchboardError(error)) return true;
  return (
    error instanceof Error &&
    error.name === "SwitchboardError" &&
    typeof (error as { code?: unknown }).code === "string"
  );
}

function checkedResult(result: unknown): ToolResult {
  const status = (result as { status?: unknown } | null)?.status;
  if (typeof result !== "object" || result === null || !ToolStatusSchema.safeParse(status).success) {
    throw new Error("backend returned a result without a valid status");
  }
  return result as ToolResult;
}

function validKinds(kinds: string[] | undefined): SessionKind[] | undefined {
  if (kinds === undefined) return undefined;
  const valid = new Set<SessionKind>();
  for (const kind of kinds) {
    const normalized = kind.trim().toLowerCase();
    if (isSessionKind(normalized)) valid.add(normalized);
  }
  // tools.md: none valid means no filter, not "match nothing".
  return valid.size === 0 ? undefined : [...valid];
}

function trimRowMessages(row: SessionRow, messageLimit: number): SessionRow {
  if (row.messages === undefined) return row;
  const { messages, ...rest } = row;
  if (messageLimit === 0) return rest;
  return { ...rest, messages: messages.filter((m) => m.role !== "toolResult").slice(-messageLimit) };
}

function requireIdentifier(name: string, value: string): string {
  return requireText(name, value).trim();
}

function seqCursor(before: number | undefined): number | undefined {
  if (before === undefined) return undefined;
  const cursor = Math.floor(before);
  if (cursor < 1)
    throw new ToolParamError(`before: must be a positive integer (a seq cursor), got ${before}`);
  return cursor;
}

function spawnLabel(label: string | undefined): string | undefined {
  const trimmed = optionalIdentifier(label);
  if (trimmed === undefined) return undefined;
  const length = Array.from(trimmed).length;
  if (length > SPAWN_LABEL_MAX_LENGTH) {
    throw new ToolParamError(`label: must be at most ${SPAWN_LABEL_MAX_LENGTH} characters, got ${length}`);
  }
  return trimmed;
}
