import type { Level } from "../labels/level";
import type { RunRecord } from "../store/run-record";
import type {
  AgentsListResult,
  MessageResult,
  SessionRow,
  SessionStatusResult,
  SessionsHistoryResult,
  SessionsSendResult,
  SessionsSpawnResult,
  SimulateResult,
  SummarizeResult,
  ToolFailure,
} from "./tool-schemas";

/**
 * Who is calling a tool. Always built by the gateway from the run the call belongs to (or from an
 * operator's audited `as`), never from tool arguments.
 */
export interface ToolCaller {
  /** Canonical key of the calling session. */
  sessionKey: string;
  agentId: string;
  /** The run the call belongs to; absent for operator calls made `as` a session. */
  runId?: string;
  /** Why that run exists: it decides which tools the run may call (a summary run none). */
  runOrigin?: RunRecord["origin"];
  /** Set when an operator acts as the session (audited). */
  operator?: string;
  signal?: AbortSignal;
  /**
   * Set by the gateway's tool-call pipeline: a backend hands it writes it issued but did not wait
   * for (a waited-for run's end), so the call's own transcript record joins their group commit;
   * the answer goes out only once they settle. Without it, the backend waits for them itself.
   */
  holdAnswer?: (settled: Promise<void>) => void;
}

/** A `sessions_spawn` call after validation, clamping and defaults. */
export interface SpawnRequest {
  task: string;
  label?: string;
  agentId?: string;
  model?: string;
  runTimeoutSeconds: number;
  cleanup: "delete" | "keep";
}

/**
 * The port the tool executors in `@switchboard/tools` are written against. The gateway implements
 * it and does every policy check inside; executors only validate, clamp and shape results.
 * Methods may throw a `SwitchboardError`: executors turn its code into a tool status
 * (FORBIDDEN → forbidden, NOT_FOUND → not_found, TIMEOUT → timeout, anything else → error).
 */
export interface ToolBackend {
  listSessions(
    caller: ToolCaller,
    query: { kinds?: string[]; limit: number; activeMinutes?: number; messageLimit: number },
  ): Promise<{ sessions: SessionRow[]; hidden: number; dataLabel?: Level }>;
  history(
    caller: ToolCaller,
    query: { sessionKey: string; limit: number; includeTools: boolean; before?: number; maxBytes: number },
  ): Promise<SessionsHistoryResult | ToolFailure>;
  send(
    caller: ToolCaller,
    request: { sessionKey: string; message: string; timeoutSeconds: number },
  ): Promise<SessionsSendResult>;
  spawn(caller: ToolCaller, request: SpawnRequest): Promise<SessionsSpawnResult>;
  status(caller: ToolCaller, query: { sessionKey?: string }): Promise<SessionStatusResult | ToolFailure>;
  agents(caller: ToolCaller): Promise<AgentsListResult>;
  message(caller: ToolCaller, request: { channel: string; to: string; text: string }): Promise<MessageResult>;
  simulate(
    caller: ToolCaller,
    request: { toolName: string; args: Record<string, unknown> },
  ): Promise<SimulateResult | ToolFailure>;
  summarize(
    caller: ToolCaller,
    request: { scope: "session" | "topic"; sessionKey?: string },
  ): Promise<SummarizeResult>;
}
