import type { HistoryMessage, Provenance } from "@switchboard/core";
import type { ModelRequest, RunAssignedPayload } from "../model/model-types";
import type { ProgressKind, RunContext } from "../run/execute-run";

/** A `run.assigned` payload for tests; override what the test is about. */
export function runPayload(
  message: string,
  overrides: Partial<Omit<RunAssignedPayload, "input">> & { provenance?: Provenance; context?: string } = {},
): RunAssignedPayload {
  const { provenance, context, ...rest } = overrides;
  return {
    runId: "run-1",
    sessionKey: "agent:main:main",
    agentId: "main",
    lane: "main",
    input: {
      message,
      provenance: provenance ?? { kind: "user", channel: "webchat" },
      context: context ?? "",
    },
    history: [],
    tools: [
      {
        name: "sessions_send",
        description: "Send a message",
        parameters: { type: "object", properties: {} },
      },
      {
        name: "sessions_spawn",
        description: "Spawn a sub-agent",
        parameters: { type: "object", properties: {} },
      },
    ],
    ...rest,
  };
}

/** A ModelRequest for calling a provider directly. */
export function modelRequest(run: RunAssignedPayload, overrides: Partial<ModelRequest> = {}): ModelRequest {
  const { history: _history, tools, ...info } = run;
  return {
    system: "",
    messages: [{ role: "user", content: run.input.message }],
    tools,
    signal: new AbortController().signal,
    run: info,
    ...overrides,
  };
}

export function historyMessage(
  seq: number,
  role: string,
  content: HistoryMessage["content"],
  provenance?: Provenance,
): HistoryMessage {
  return { seq, id: `m${seq}`, ts: 1_700_000_000_000 + seq, role, content, label: "PUBLIC", provenance };
}

export interface RecordedCall {
  name: string;
  args: Record<string, unknown>;
}

/**
 * A RunContext that records everything and answers tool calls with `tools[name](args)`; a missing
 * tool rejects like the gateway would.
 */
export function fakeRunContext(
  tools: Record<
    string,
    (args: Record<string, unknown>) => Record<string, unknown> | Promise<Record<string, unknown>>
  > = {},
  signal: AbortSignal = new AbortController().signal,
) {
  const calls: RecordedCall[] = [];
  const progress: { kind: ProgressKind; data: Record<string, unknown> }[] = [];
  const ctx: RunContext = {
    signal,
    async invokeTool(name, args) {
      calls.push({ name, args });
      const tool = tools[name];
      if (!tool) throw new Error(`NOT_FOUND: unknown tool ${name}`);
      return tool(args);
    },
    progress(kind, data) {
      progress.push({ kind, data });
    },
  };
  return { ctx, calls, progress };
}
