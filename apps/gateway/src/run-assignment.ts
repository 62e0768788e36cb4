import {
  agentConfig,
  type Config,
  clipMessage,
  type EventPayload,
  type RunRecord,
  type SessionEntry,
  SwitchboardError,
  TERMINAL_RUN_STATUSES,
  type TranscriptEntry,
} from "@switchboard/core";
import type { Connection } from "./connection";
import type { EventLog } from "./ports/event-log";
import { RUN_HISTORY_MAX_BYTES } from "./ports/recent-messages";
import { toHistoryMessage } from "./session-tools-backend";
import type { SessionsService } from "./sessions-service";
import type { RunObserver } from "./telemetry/telemetry";
import type { ToolCatalog } from "./tool-catalog";

/** Hands a run to a worker; the scheduler calls it once it picked the worker. */
export type RunDispatcher = (
  record: RunRecord,
  worker: Connection,
  deadline: number | undefined,
  /** The run's session row, when the scheduler read it just before (else it is read here). */
  session?: SessionEntry,
) => Promise<void>;

const HISTORY_OPEN = ',"history":[';
const frameHead = (seq: number | "") =>
  `{"type":"event","event":"run.assigned","seq":${seq},"payload":{"tools":`;
const HEAD_BYTES = frameHead("").length;
/** Digits of the largest seq: the frame's size is known before its seq is. */
const MAX_SEQ_DIGITS = String(Number.MAX_SAFE_INTEGER).length;

/** The tool definitions' JSON as UTF-8, once per tool set: the bulk (~10 KB) of every `run.assigned`. */
const definitionBytes = new WeakMap<{ json: string }, Buffer>();

function bytesOf(definitions: { json: string }): Buffer {
  let bytes = definitionBytes.get(definitions);
  if (bytes === undefined) {
    bytes = Buffer.from(definitions.json);
    definitionBytes.set(definitions, bytes);
  }
  return bytes;
}

/**
 * Transcript entries never change once written, so each one's history JSON is built (and encoded)
 * once, and copied into every `run.assigned` that carries it.
 */
const historyBytesCache = new WeakMap<TranscriptEntry, Buffer>();

function historyBytesOf(item: TranscriptEntry): Buffer {
  let bytes = historyBytesCache.get(item);
  if (bytes === undefined) {
    bytes = Buffer.from(JSON.stringify(toHistoryMessage(item)));
    historyBytesCache.set(item, bytes);
  }
  return bytes;
}

/** The clipped copy of an entry too big for the history budget, per budget (one per gateway). */
const clippedBytesCache = new WeakMap<TranscriptEntry, { budget: number; bytes: Buffer | undefined }>();

function clippedBytesOf(item: TranscriptEntry, budget: number): Buffer | undefined {
  let clipped = clippedBytesCache.get(item);
  if (clipped?.budget !== budget) {
    const message = clipMessage(toHistoryMessage(item), budget);
    clipped = { budget, bytes: message ? Buffer.from(JSON.stringify(message)) : undefined };
    clippedBytesCache.set(item, clipped);
  }
  return clipped.bytes;
}

/**
 * The newest entries whose history array fits `budget` bytes of JSON, oldest first; when the newest
 * alone is over it, a clipped copy of it (as `sessions_history` returns one). Measured on the cached
 * bytes the frame is built from, so the cap costs no serialisation.
 */
export function boundedHistory(entries: readonly TranscriptEntry[], budget: number): Buffer[] {
  const kept: Buffer[] = [];
  // The brackets.
  let total = 2;
  for (let index = entries.length - 1; index >= 0; index--) {
    const bytes = historyBytesOf(entries[index]!);
    const size = bytes.length + (kept.length > 0 ? 1 : 0);
    if (total + size > budget) break;
    kept.push(bytes);
    total += size;
  }
  if (kept.length === 0 && entries.length > 0) {
    const clipped = clippedBytesOf(entries[entries.length - 1]!, budget - 2);
    if (clipped) kept.push(clipped);
  }
  return kept.reverse();
}

/**
 * A session's model override (`sessions.patch`, `sessions_spawn`'s model), else for a sub-agent session
 * the child agent's `subagents.model` (a name or a whole model config; `null` = the agent's own).
 */
function modelOf(config: Config, entry: SessionEntry): { model?: SubagentModelValue } {
  if (entry.model) return { model: entry.model };
  if (entry.spawnedBy === undefined) return {};
  const model = (agentConfig(config, entry.agentId)?.subagents ?? config.agents.defaults.subagents).model;
  return model ? { model } : {};
}

type SubagentModelValue = NonNullable<EventPayload<"run.assigned">["model"]>;

function traceOf(telemetry: Pick<RunObserver, "traceparent"> | undefined, runId: string) {
  const traceparent = telemetry?.traceparent(runId);
  return traceparent ? { traceparent } : {};
}

/**
 * Builds and sends `run.assigned`. It goes to one worker only and is never replayed (a reconnecting
 * worker gets its runs reassigned), so it takes a seq but stays out of the replay ring. The tool
 * definitions are the bulk of the frame and identical per tool set: their JSON is spliced in.
 */
export function runAssignment(
  config: Config,
  sessions: SessionsService,
  tools: ToolCatalog,
  bus: EventLog,
  telemetry?: Pick<RunObserver, "traceparent">,
): RunDispatcher {
  // A quarter of the send buffer at most: a run's input and the tools fit beside it.
  const historyBudget = Math.min(
    RUN_HISTORY_MAX_BYTES,
    Math.floor(config.gateway.limits.maxBufferedBytes / 4),
  );
  return async (record, worker, deadline, session) => {
    const entry = session ?? (await sessions.require(record.sessionKey));
    const recent = await sessions.recentMessages(entry, 20, record.runId);
    // Its timeout may have fired during the reads: an ended run is handed to no worker.
    if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
    const history = boundedHistory(recent, historyBudget);
    const definitions = tools.definitionsFor(entry, record.origin);
    const payload: Omit<EventPayload<"run.assigned">, "tools" | "history"> = {
      runId: record.runId,
      sessionKey: record.sessionKey,
      agentId: record.agentId,
      lane: record.lane,
      input: {
        message: record.message,
        provenance: record.provenance ?? { kind: "user" },
        context: record.context ?? "",
      },
      ...modelOf(config, entry),
      ...(deadline ? { deadline } : {}),
      ...traceOf(telemetry, record.runId),
      attempt: record.attempts,
    };
    const toolBytes = bytesOf(definitions);
    const rest = `],${JSON.stringify(payload).slice(1)}}`;
    let historyLength = Math.max(0, history.length - 1);
    for (const bytes of history) historyLength += bytes.length;
    const restBytes = Buffer.byteLength(rest);
    const largest =
      HEAD_BYTES + MAX_SEQ_DIGITS + toolBytes.length + HISTORY_OPEN.length + historyLength + restBytes;
    if (largest > worker.maxBufferedBytes) {
      // Sent, it would be refused (a frame larger than the whole send buffer): the run ends with
      // why, and the worker keeps its connection and its other runs.
      throw new SwitchboardError(
        "PAYLOAD_TOO_LARGE",
        `run.assigned would be ${largest} bytes (its input, context, tools and history), more than the worker's whole send buffer (gateway.limits.maxBufferedBytes = ${worker.maxBufferedBytes})`,
        { details: { bytes: largest, limit: worker.maxBufferedBytes } },
      );
    }
    bus.withSeq((seq) => {
      const head = frameHead(seq);
      const frame = Buffer.allocUnsafe(
        head.length + toolBytes.length + HISTORY_OPEN.length + historyLength + restBytes,
      );
      let at = frame.write(head, 0, "latin1");
      at += toolBytes.copy(frame, at);
      at += frame.write(HISTORY_OPEN, at, "latin1");
      for (let index = 0; index < history.length; index++) {
        if (index > 0) at += frame.write(",", at, "latin1");
        at += history[index]!.copy(frame, at);
      }
      frame.write(rest, at, "utf8");
      worker.sendText(frame);
    });
  };
}
