import {
  isSwitchboardError,
  type PolicyContext,
  type PolicyDecision,
  type SessionEntry,
  TOOL_NAMES,
  type ToolBackend,
  type ToolCaller,
  type ToolFailure,
  type ToolName,
} from "@switchboard/core";
import { createToolExecutor } from "@switchboard/tools";
import type { AgentFlows } from "./agent-flows";

/** Each tool's backend request: its arguments after the executor validated, clamped and defaulted them. */
export interface ToolRequests {
  sessions_list: Parameters<ToolBackend["listSessions"]>[1];
  sessions_history: Parameters<ToolBackend["history"]>[1];
  sessions_send: Parameters<ToolBackend["send"]>[1];
  sessions_spawn: Parameters<ToolBackend["spawn"]>[1];
  session_status: Parameters<ToolBackend["status"]>[1];
  agents_list: undefined;
  message: Parameters<ToolBackend["message"]>[1];
  simulate_tool_call: Parameters<ToolBackend["simulate"]>[1];
  summarize: Parameters<ToolBackend["summarize"]>[1];
}

/** A call parsed exactly as the executor parses it before reaching the backend. */
export type ParsedToolCall = { [T in ToolName]: { tool: T; request: ToolRequests[T] } }[ToolName];

/**
 * A key the caller may not address, with no session there: the refusal the real call answers with
 * (`SessionToolsBackend.target`), as the decision it is. A simulation reports it as it reports the
 * refusal of a session that is there, or the two answers would tell which keys exist.
 */
export interface RefusedTarget {
  refused: PolicyDecision;
  /** The key refused and its agent (no session need be there). */
  key: string;
  agentId: string;
}

/**
 * The hook after PRE_TOOL_CALL a call hits: a context, a refusal decided in finding its target,
 * none, or why the call cannot be made.
 */
export type DownstreamContext = PolicyContext | RefusedTarget | ToolFailure | undefined;

/**
 * Per tool, the downstream policy context of a call, built with the same builders the real call
 * uses. A mapped type over every tool name, so a new tool without an entry does not compile.
 */
export type ToolPolicyContexts = {
  [T in ToolName]: (
    caller: ToolCaller,
    callerEntry: SessionEntry,
    request: ToolRequests[T],
  ) => Promise<DownstreamContext>;
};

/** What the contexts are built from (the backend's target lookup and the hooks' builders). */
export interface ContextBuilders {
  /** The session a call names, or the policy's refusal of a key that names none (throws NOT_FOUND). */
  target(caller: ToolCaller, callerEntry: SessionEntry, input: string): Promise<SessionEntry | RefusedTarget>;
  /** PRE_HISTORY for reading another session; none for one's own. */
  readContext(callerEntry: SessionEntry, target: SessionEntry): PolicyContext | undefined;
  messageContext(
    callerEntry: SessionEntry,
    request: { channel: string; to: string; text: string },
  ): PolicyContext;
  flows: Pick<AgentFlows, "sendContext" | "spawnContext" | "chainPosition">;
}

/** A spawn's child key is random; its shape is what rules can match on. */
const SIMULATED_CHILD = "00000000-0000-4000-8000-000000000000";

export function toolPolicyContexts(builders: ContextBuilders): ToolPolicyContexts {
  const { flows } = builders;
  /** History, status and summary read a session: no key means the caller's own. */
  const readOf = async (caller: ToolCaller, callerEntry: SessionEntry, sessionKey: string | undefined) => {
    if (!sessionKey) return undefined;
    const target = await builders.target(caller, callerEntry, sessionKey);
    return "refused" in target ? target : builders.readContext(callerEntry, target);
  };
  return {
    sessions_list: async () => undefined,
    agents_list: async () => undefined,
    simulate_tool_call: async () => undefined,
    sessions_history: (caller, callerEntry, request) => readOf(caller, callerEntry, request.sessionKey),
    session_status: (caller, callerEntry, request) => readOf(caller, callerEntry, request.sessionKey),
    summarize: (caller, callerEntry, request) => readOf(caller, callerEntry, request.sessionKey),
    sessions_send: async (caller, callerEntry, request) => {
      const target = await builders.target(caller, callerEntry, request.sessionKey);
      if ("refused" in target) return target;
      return flows.sendContext(
        callerEntry,
        target,
        request.message,
        flows.chainPosition(caller),
        request.timeoutSeconds > 0,
      );
    },
    sessions_spawn: async (caller, callerEntry, request) => {
      const agentId = (request.agentId ?? callerEntry.agentId).toLowerCase();
      return flows.spawnContext(
        callerEntry,
        agentId,
        `agent:${agentId}:subagent:${SIMULATED_CHILD}`,
        request.task,
        flows.chainPosition(caller),
      );
    },
    message: async (_caller, callerEntry, request) => builders.messageContext(callerEntry, request),
  };
}

/**
 * A decision on reading another session's text, made (with `explain`) without that text, as the real
 * read applies it: the redact rules that matched rewrite whatever the text holds, so the read is a
 * REDACT. A simulation sees neither the transcript a history read would hand over nor the reply a
 * send would take in: they are that session's data, and a decision on them would tell the caller,
 * with no taint rise, whether they hold a match.
 */
export function readDecision(decision: PolicyDecision): PolicyDecision {
  if (decision.action !== "ALLOW") return decision;
  const redactors = (decision.evaluated ?? [])
    .filter((rule) => rule.matched && rule.action === "redact")
    .map((rule) => rule.ruleId);
  if (redactors.length === 0) return decision;
  return {
    ...decision,
    action: "REDACT",
    ruleId: redactors[0]!,
    message: `what is read is rewritten where it matches a redact pattern (rules: ${redactors.join(", ")})`,
  };
}

/** The downstream context of a parsed call; an unknown target is a failure, as in the real call. */
export async function downstreamContext(
  contexts: ToolPolicyContexts,
  caller: ToolCaller,
  callerEntry: SessionEntry,
  call: ParsedToolCall,
): Promise<DownstreamContext> {
  try {
    // The union's tool and request belong together (ParsedToolCall), which TypeScript cannot see.
    const build = contexts[call.tool] as ToolPolicyContexts[ToolName] as (
      caller: ToolCaller,
      entry: SessionEntry,
      request: ParsedToolCall["request"],
    ) => Promise<DownstreamContext>;
    return await build(caller, callerEntry, call.request);
  } catch (error) {
    if (isSwitchboardError(error)) {
      return {
        status: error.code === "NOT_FOUND" ? "not_found" : error.code === "FORBIDDEN" ? "forbidden" : "error",
        error: error.message,
      };
    }
    throw error;
  }
}

/** Thrown by the capturing backend to stop the executor once it parsed a call. */
const PARSED = Symbol("parsed");

/**
 * Parses a call with the tools' own executor, stopping where it would reach the backend, so a
 * simulation sees exactly the arguments (validated, clamped, defaulted) a real call would.
 */
export async function parseToolCall(
  tool: string,
  args: Record<string, unknown>,
  caller: ToolCaller,
): Promise<ParsedToolCall | ToolFailure | undefined> {
  // An unknown tool has no downstream hook; the real call answers it with the executor's error.
  if (!(TOOL_NAMES as readonly string[]).includes(tool)) return undefined;
  let parsed: ParsedToolCall | undefined;
  const capture =
    <T extends ToolName>(name: T) =>
    async (_caller: ToolCaller, request: ToolRequests[T]): Promise<never> => {
      parsed = { tool: name, request } as ParsedToolCall;
      throw PARSED;
    };
  const backend: ToolBackend = {
    listSessions: capture("sessions_list"),
    history: capture("sessions_history"),
    send: capture("sessions_send"),
    spawn: capture("sessions_spawn"),
    status: capture("session_status"),
    agents: (callerOfList) => capture("agents_list")(callerOfList, undefined),
    message: capture("message"),
    simulate: capture("simulate_tool_call"),
    summarize: capture("summarize"),
  };
  const result = await createToolExecutor(backend).invoke(tool, args, caller);
  if (parsed) return parsed;
  return {
    status: result.status === "forbidden" || result.status === "not_found" ? result.status : "error",
    error: typeof result.error === "string" ? result.error : "invalid arguments",
  };
}
