import type { HistoryMessage, SessionRow, ToolBackend, ToolCaller } from "@switchboard/core";

/** One backend call as the executor made it. */
export interface RecordedCall {
  method: keyof ToolBackend;
  caller: ToolCaller;
  request: unknown;
}

export type RecordingBackend = ToolBackend & { calls: RecordedCall[] };

/**
 * A ToolBackend for tests: records every call, and answers with plausible data unless a test
 * overrides a method (to return something else or to throw).
 */
export function recordingBackend(overrides: Partial<ToolBackend> = {}): RecordingBackend {
  const calls: RecordedCall[] = [];
  const defaults: ToolBackend = {
    listSessions: async () => ({ sessions: [row("agent:main:main", 1000)], hidden: 0 }),
    history: async (_caller, query) => ({
      status: "ok",
      sessionKey: query.sessionKey,
      sessionId: "sid-1",
      messages: [message(1, "user", "hello")],
      truncated: false,
    }),
    send: async (_caller, request) => ({
      status: "accepted",
      runId: "run-1",
      sessionKey: request.sessionKey,
      delivery: { status: "delivered" },
    }),
    spawn: async (caller) => ({
      status: "accepted",
      runId: "run-2",
      childSessionKey: `agent:${caller.agentId}:subagent:0000`,
    }),
    status: async (caller, query) => ({
      status: "ok",
      sessionKey: query.sessionKey ?? caller.sessionKey,
      sessionId: "sid-1",
      kind: "main",
      channel: "webchat",
      agentId: caller.agentId,
      taint: "PUBLIC",
      clearance: "CONFIDENTIAL",
      createdAt: 1,
      updatedAt: 2,
    }),
    agents: async (caller) => ({
      status: "ok",
      agents: [{ id: caller.agentId, configured: true, connected: true, allowedForSpawn: true }],
    }),
    message: async () => ({ status: "ok", deliveryId: "delivery-1" }),
    simulate: async () => ({
      status: "ok",
      decision: "ALLOW",
      ruleId: null,
      message: "allowed by default",
      evaluated: [],
      taint: { current: "PUBLIC", after: "PUBLIC" },
    }),
    summarize: async () => ({ status: "ok", summary: "a recap" }),
  };
  const backend = { calls } as RecordingBackend;
  for (const method of Object.keys(defaults) as (keyof ToolBackend)[]) {
    const implementation = (overrides[method] ?? defaults[method]) as (
      caller: ToolCaller,
      request?: unknown,
    ) => Promise<unknown>;
    (backend as unknown as Record<string, unknown>)[method] = (caller: ToolCaller, request?: unknown) => {
      calls.push({ method, caller, request });
      return implementation(caller, request);
    };
  }
  return backend;
}

export function row(key: string, updatedAt: number, extra: Partial<SessionRow> = {}): SessionRow {
  return {
    key,
    kind: "main",
    channel: "webchat",
    updatedAt,
    sessionId: `sid-${key}`,
    agentId: "main",
    taint: "PUBLIC",
    clearance: "CONFIDENTIAL",
    transcriptPath: `/data/${key}.jsonl`,
    ...extra,
  };
}

export function message(seq: number, role: string, text: string): HistoryMessage {
  return { seq, id: `m${seq}`, ts: seq * 1000, role, content: [{ type: "text", text }], label: "PUBLIC" };
}
