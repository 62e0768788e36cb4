import { randomUUID } from "node:crypto";
import {
  type Config,
  isToolName,
  type Level,
  MAX_INPUT_MESSAGE_BYTES,
  maxLevel,
  type PolicyDecision,
  type RunRecord,
  type SessionEntry,
  SwitchboardError,
  type ToolCaller,
  type ToolResult,
  type TranscriptEntryInput,
  toolLevel,
} from "@switchboard/core";
import type { ToolExecutor } from "@switchboard/tools";
import { requireSameTranscript } from "./access";
import type { AuditService } from "./audit-service";
import type { PolicyService } from "./policy-service";
import type { EventLog } from "./ports/event-log";
import type { SessionToolsBackend } from "./session-tools-backend";
import type { SessionsService } from "./sessions-service";
import type { ToolCallObserver, ToolDecision } from "./telemetry/telemetry";
import type { ToolGate } from "./tool-catalog";

/** One tool call as the transcript names it. */
interface RecordedCall {
  sessionKey: string;
  /** The transcript the call was made in: a reset since began another, which must not get it. */
  sessionId: string;
  runId?: string | undefined;
  toolCallId: string;
  name: string;
}

/** A tool call a worker executed itself and reports through `run.progress`. */
export interface WorkerToolEvent {
  kind: "tool-call" | "tool-result";
  name?: string | undefined;
  toolCallId?: string | undefined;
  args?: Record<string, unknown> | undefined;
  result?: unknown;
}

/**
 * The tool-call pipeline: availability gate, PRE_TOOL_CALL, execution, then recording and taint.
 * Both gateway-executed calls (`tools.invoke`) and worker-executed ones (`run.progress`) are
 * recorded by the same code, so their transcript entries cannot drift apart.
 */
export class ToolCalls {
  constructor(
    private readonly config: Config,
    private readonly sessions: SessionsService,
    private readonly policy: PolicyService,
    private readonly audit: AuditService,
    private readonly bus: EventLog,
    private readonly gate: ToolGate,
    private readonly backend: Pick<SessionToolsBackend, "toolCallContext">,
    private readonly executor: ToolExecutor,
    /** Tool-call metrics and spans; undefined when telemetry is off. */
    private readonly telemetry?: ToolCallObserver,
  ) {}

  /** A call executed by the gateway on behalf of `caller` (an agent's run or an operator's `as`). */
  async invoke(
    caller: ToolCaller,
    entry: SessionEntry,
    tool: string,
    args: Record<string, unknown>,
    toolCallId: string = randomUUID(),
  ): Promise<ToolResult> {
    if (this.telemetry)
      return this.telemetry.call(tool, caller.runId, () =>
        this.invokeAs(caller, entry, tool, args, toolCallId),
      );
    return this.invokeAs(caller, entry, tool, args, toolCallId);
  }

  private async invokeAs(
    caller: ToolCaller,
    entry: SessionEntry,
    tool: string,
    args: Record<string, unknown>,
    toolCallId: string,
  ): Promise<ToolResult> {
    if (!caller.operator) return this.invokeAudited(caller, entry, tool, args, toolCallId);
    // Issued with the call rather than before it, so it shares a group commit with the call's
    // first write; no answer (result or error) goes out before it is durable. A crash in that one
    // commit may keep the call's effect without this record.
    const impersonation = this.audit.append({
      kind: "impersonation",
      actor: caller.operator,
      sessionKey: entry.key,
      data: { tool, ...(caller.runId ? { runId: caller.runId } : {}) },
    });
    // Handled now: a failure must not count as unhandled while the call is still running.
    impersonation.catch(() => undefined);
    let result: ToolResult;
    try {
      result = await this.invokeAudited(caller, entry, tool, args, toolCallId);
    } catch (error) {
      await impersonation.catch(() => undefined);
      throw error;
    }
    await impersonation;
    return result;
  }

  private async invokeAudited(
    caller: ToolCaller,
    entry: SessionEntry,
    tool: string,
    args: Record<string, unknown>,
    toolCallId: string,
  ): Promise<ToolResult> {
    const call: RecordedCall = {
      sessionKey: entry.key,
      sessionId: entry.sessionId,
      runId: caller.runId,
      toolCallId,
      name: tool,
    };
    // Writes the backend issued without waiting (a waited-for run's end): this call's record joins
    // their group commit, and the answer waits for both.
    const held: Promise<void>[] = [];
    const holding: ToolCaller = { ...caller, holdAnswer: (settled) => held.push(settled) };
    const progress = (kind: "tool-call" | "tool-result") => {
      if (!caller.runId) return;
      this.bus.publish(
        "run.progress",
        { runId: caller.runId, sessionKey: entry.key, kind, name: tool, toolCallId },
        { sessionKey: entry.key, agentId: entry.agentId },
      );
    };
    progress("tool-call");
    const finish = async (result: ToolResult) => {
      progress("tool-result");
      try {
        await this.record(call, {
          call: { args, label: entry.taint },
          result: {
            value: result,
            label: resultLabel(result, toolLevel(this.config.labels, tool), entry.taint),
          },
        });
      } finally {
        if (held.length > 0) await Promise.all(held);
      }
      return result;
    };
    // A name that is not one of the gateway's tools still meets the gate and the policy (a rule
    // denying it refuses and audits the call, as `simulate_tool_call` says), but is not counted
    // in the tool metrics: made-up names would take their label slots, and none of them is run.
    const counted = isToolName(tool) ? this.telemetry : undefined;
    const gate = this.gate(entry, tool, caller.runOrigin);
    if (!gate.allowed) {
      counted?.decided(tool, "block");
      return finish({ status: "forbidden", error: gate.message ?? "tool not available" });
    }
    const decision = await this.policy.enforce(
      await this.backend.toolCallContext(entry, tool, args),
      caller.operator,
    );
    counted?.decided(tool, decisionOf(decision.action));
    if (decision.action === "BLOCK") return finish({ status: "forbidden", error: decision.message });
    const result = await this.executor.invoke(tool, args, holding);
    if (result.status === "ok" || result.status === "accepted") {
      const refused = await this.takeIn(entry.key, tool, toolLevel(this.config.labels, tool));
      if (refused) return finish({ status: "forbidden", error: refused });
    }
    return finish(result);
  }

  /**
   * Records one half of a worker-executed call. A result is data taken in at the tool's label, so
   * PRE_TOOL_CALL applies to it as to a gateway-executed call (no read-up).
   */
  async recordWorkerEvent(run: RunRecord, event: WorkerToolEvent): Promise<void> {
    const entry = await this.sessions.require(run.sessionKey);
    requireSameTranscript(run, entry);
    const name = event.name ?? "tool";
    const call: RecordedCall = {
      sessionKey: run.sessionKey,
      sessionId: run.sessionId,
      runId: run.runId,
      toolCallId: event.toolCallId ?? randomUUID(),
      name,
    };
    const args = event.args ?? {};
    if (event.kind === "tool-call") {
      await this.record(call, { call: { args, label: entry.taint } });
      return;
    }
    const label = toolLevel(this.config.labels, name);
    const decision = await this.policy.enforce(await this.backend.toolCallContext(entry, name, args));
    this.telemetry?.decided(name, decisionOf(decision.action));
    if (decision.action === "BLOCK") {
      throw new SwitchboardError("FORBIDDEN", decision.message, { details: { ruleId: decision.ruleId } });
    }
    // Taken in before it is recorded: a result refused here never reaches the transcript.
    const refused = await this.takeIn(run.sessionKey, name, label);
    if (refused) throw new SwitchboardError("FORBIDDEN", refused);
    await this.record(call, { result: { value: event.result ?? null, label } });
  }

  /** `policy.simulate`: the `simulate_tool_call` tool, run as the given caller. */
  simulate(caller: ToolCaller, tool: string, args: Record<string, unknown>): Promise<ToolResult> {
    return this.executor.invoke("simulate_tool_call", { tool_name: tool, args }, caller);
  }

  /**
   * Raises the session's taint to a tool result's label. PRE_TOOL_CALL decided no read-up on the row
   * as it was before the call, which may have waited long on its executor: a clearance lowered since
   * is judged on the row the rise writes over. Returns why the result is refused, if it is.
   */
  private takeIn(sessionKey: string, tool: string, label: Level): Promise<string | undefined> {
    return this.sessions.raiseTaintWithin(sessionKey, label, `result of tool ${tool}`, `tool:${tool}`);
  }

  /** The one place tool calls and results become transcript entries. */
  private async record(
    call: RecordedCall,
    parts: {
      call?: { args: Record<string, unknown>; label: Level };
      result?: { value: unknown; label: Level };
    },
  ): Promise<void> {
    const runId = call.runId ? { runId: call.runId } : {};
    const entries: TranscriptEntryInput[] = [];
    if (parts.call) {
      entries.push({
        type: "message",
        label: parts.call.label,
        ...runId,
        message: {
          role: "toolCall",
          content: [
            { type: "toolCall", id: call.toolCallId, name: call.name, args: fitForRecord(parts.call.args) },
          ],
        },
      });
    }
    if (parts.result) {
      entries.push({
        type: "message",
        label: parts.result.label,
        ...runId,
        message: {
          role: "toolResult",
          content: [
            {
              type: "toolResult",
              toolCallId: call.toolCallId,
              name: call.name,
              result: fitForRecord(parts.result.value),
            },
          ],
        },
      });
    }
    // Into the transcript the call was made in only: after a reset, a result labelled by what the
    // old transcript read would sit in the new one below its entry label's taint, and be handed to
    // its next run. The record is dropped instead (the old transcript is archived).
    const written = await this.sessions.appendFor(call.sessionKey, (current) =>
      current.sessionId === call.sessionId ? entries : undefined,
    );
    if (written.length === 0)
      this.sessions.logger.info(
        { sessionKey: call.sessionKey, tool: call.name, toolCallId: call.toolCallId },
        "a tool call's record was not written: its session was reset or deleted during the call",
      );
  }
}

/** A recorded call's arguments, or its result, beyond which long strings are cut in the record. */
const RECORD_PART_BYTES = MAX_INPUT_MESSAGE_BYTES;
/** What a cut string keeps (characters). */
const CUT_KEEP = 2_048;

/**
 * The value as the transcript records it: whole when it fits the record's share of an entry, else
 * with each long string cut and marked. The call has happened (or been refused) by then: its
 * record must not fail on what the call carried, turning a delivered message into an error answer.
 */
function fitForRecord<T>(value: T): T {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    // Not serialisable (the protocol bounds depth, so this is a gateway-made value): the call
    // stays recorded, without this part.
    return `[not recorded: ${(error as Error).message}]` as T;
  }
  if (Buffer.byteLength(json ?? "") <= RECORD_PART_BYTES) return value;
  const cut = (item: unknown): unknown => {
    if (typeof item === "string")
      return item.length > CUT_KEEP
        ? `${item.slice(0, CUT_KEEP)}… [cut in the record: ${Buffer.byteLength(item)} bytes]`
        : item;
    if (Array.isArray(item)) return item.map(cut);
    if (item && typeof item === "object")
      return Object.fromEntries(Object.entries(item).map(([key, inner]) => [key, cut(inner)]));
    return item;
  };
  return cut(value) as T;
}

function decisionOf(action: PolicyDecision["action"]): ToolDecision {
  return action === "BLOCK" ? "block" : action === "REDACT" ? "redact" : "allow";
}

/**
 * The label a tool result is recorded with: a refusal or error carries the caller's taint, raised to
 * the label of another session's text it holds (a target run's error that was not withheld); a
 * success carries the tool's configured label and, when it holds another session's data that was not
 * withheld, that data's label.
 */
function resultLabel(result: ToolResult, toolLabel: Level, callerTaint: Level): Level {
  const data =
    typeof result.dataLabel === "string" && !result.withheld ? (result.dataLabel as Level) : undefined;
  // A failure can carry another session's text too (a target run's error, taken in like a reply).
  if (result.status !== "ok" && result.status !== "accepted")
    return data ? maxLevel(callerTaint, data) : callerTaint;
  return data ? maxLevel(toolLabel, data) : toolLabel;
}
