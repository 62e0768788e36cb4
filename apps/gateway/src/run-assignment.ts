import {
  agentConfig,
  type Config,
  type EventPayload,
  type RunRecord,
  type SessionEntry,
  TERMINAL_RUN_STATUSES,
  type TranscriptEntry,
} from "@switchboard/core";
import type { Connection } from "./connection";
import type { EventLog } from "./ports/event-log";
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
  return async (record, worker, deadline, session) => {
    const entry = session ?? (await sessions.require(record.sessionKey));
    const recent = await sessions.recentMessages(entry, 21);
    // Its timeout may have fired during the reads: an ended run is handed to no worker.
    if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
    const history = recent
      .filter((item) => item.runId !== record.runId)
      .slice(-20)
      .map(historyBytesOf);
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
    bus.withSeq((seq) => {
      const head = `{"type":"event","event":"run.assigned","seq":${seq},"payload":{"tools":`;
      const frame = Buffer.allocUnsafe(
        head.length + toolBytes.length + HISTORY_OPEN.length + historyLength + Buffer.byteLength(rest),
      );
      let at = frame.write(head, 0, "latin1");
      at += toolBytes.copy(frame, at);
      at += frame.write(HISTORY_OPEN, at, "latin1");
      for (let index = 0; index < history.length; index++) {
        if (index > 0) at += frame.write(",", at, "latin1");
        at += history[index]!.copy(frame, at);
      }
      frame.write(rest, at, "utf8");
      return worker.sendText(frame);
    });
  };
}
