import {
  type AgentsListResult,
  activeSinceMinutes,
  type Config,
  canFlowTo,
  displayKey,
  type HistoryMessage,
  type Level,
  type MessageResult,
  maxLevel,
  type PolicyContext,
  type PolicyDecision,
  type SessionEntry,
  type SessionListOptions,
  type SessionRow,
  type SessionStatusResult,
  type SessionsHistoryResult,
  type SessionsSendResult,
  type SessionsSpawnResult,
  type SimulateResult,
  type SpawnRequest,
  type Store,
  type SummarizeResult,
  SwitchboardError,
  spawnAgentAllowed,
  type ToolBackend,
  type ToolCaller,
  type ToolFailure,
  type TranscriptEntry,
  toolLevel,
  tryParseKey,
} from "@switchboard/core";
import { capHistory } from "@switchboard/tools";
import type { AgentFlows } from "./agent-flows";
import type { OutputDelivery } from "./output-delivery";
import type { PolicyService } from "./policy-service";
import type { RunScheduler } from "./run-scheduler";
import type { SessionsService } from "./sessions-service";
import type { ToolGate } from "./tool-catalog";
import {
  downstreamContext,
  parseToolCall,
  type RefusedTarget,
  readDecision,
  type ToolPolicyContexts,
  toolPolicyContexts,
} from "./tool-policy-contexts";

export function toHistoryMessage(entry: TranscriptEntry): HistoryMessage {
  return {
    seq: entry.seq,
    id: entry.id,
    ts: entry.ts,
    role: entry.message?.role ?? entry.type,
    content: (entry.message?.content ?? []) as HistoryMessage["content"],
    label: entry.label,
    ...(entry.provenance ? { provenance: entry.provenance } : {}),
  };
}

/** Fields of a content part that name rather than carry data: never rewritten. */
const STRUCTURAL_FIELDS = new Set(["type", "id", "name", "toolCallId"]);

/** `value` with every string leaf passed through `rewrite`, in a fixed walk order (keys are kept). */
function mapStrings(value: unknown, rewrite: (text: string) => string): unknown {
  if (typeof value === "string") return rewrite(value);
  if (Array.isArray(value)) return value.map((item) => mapStrings(item, rewrite));
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[key] = mapStrings(item, rewrite);
    return out;
  }
  return value;
}

/** `messages`' content with every data string passed through `rewrite` (text, tool args, results). */
function mapHistoryStrings(
  messages: readonly HistoryMessage[],
  rewrite: (text: string) => string,
): HistoryMessage[] {
  return messages.map((message) => ({
    ...message,
    content: message.content.map((part) => {
      const out: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(part))
        out[key] = STRUCTURAL_FIELDS.has(key) ? item : mapStrings(item, rewrite);
      return out;
    }),
  }));
}

/** Every data string of `messages`, in walk order: what PRE_HISTORY redact rules rewrite. */
function historyTexts(messages: readonly HistoryMessage[]): string[] {
  const texts: string[] = [];
  mapHistoryStrings(messages, (text) => {
    texts.push(text);
    return text;
  });
  return texts;
}

/** `messages` with their data strings replaced by `texts`, in `historyTexts` order. */
function withHistoryTexts(messages: readonly HistoryMessage[], texts: readonly string[]): HistoryMessage[] {
  let next = 0;
  return mapHistoryStrings(messages, () => texts[next++] ?? "");
}

/** The rules a decision evaluated, as a simulation lists them. */
function explained(decision: PolicyDecision): SimulateResult["evaluated"] {
  return (decision.evaluated ?? []).map((rule) => ({
    ruleId: rule.ruleId,
    matched: rule.matched,
    action: rule.action,
  }));
}

const isMessage = (includeTools: boolean) => (entry: TranscriptEntry) =>
  entry.type === "message" && (includeTools || entry.message?.role !== "toolResult");

/**
 * The gateway side of the tools' backend port: resolves targets, runs every policy check at its
 * hook, and applies the effects (taint rises, deliveries, runs). The caller always comes from the run.
 */
export class SessionToolsBackend implements ToolBackend {
  constructor(
    private readonly config: Config,
    /** Reads only: writes go through `sessions` (its per-key lock). */
    private readonly store: Pick<Store, "sessions" | "transcripts">,
    private readonly sessions: SessionsService,
    private readonly policy: PolicyService,
    private readonly scheduler: RunScheduler,
    private readonly flows: AgentFlows,
    private readonly output: OutputDelivery,
    private readonly isAgentConnected: (agentId: string) => boolean,
    /** Tool availability, shared with real calls so simulation answers as a call would. */
    private readonly toolGate: ToolGate,
  ) {
    this.contexts = toolPolicyContexts({
      target: (caller, callerEntry, input) => this.lookup(caller, callerEntry, input),
      readContext: (callerEntry, target) => this.readContext(callerEntry, target),
      messageContext: (callerEntry, request) => this.messageContext(callerEntry, request),
      flows,
    });
  }

  /** Each tool's downstream policy context (what `simulate` evaluates after PRE_TOOL_CALL). */
  private readonly contexts: ToolPolicyContexts;

  private callerEntry(caller: ToolCaller): Promise<SessionEntry> {
    return this.sessions.require(caller.sessionKey);
  }

  /**
   * The session a real call names. A refusal of a key with no session behind it is audited and
   * announced (`policy.blocked`) under the hook the call's own decision on a session there uses,
   * as that decision is: otherwise the caller's event stream and the audit chain would tell the two
   * apart, the probe the uniform refusal closes.
   */
  private async target(
    caller: ToolCaller,
    callerEntry: SessionEntry,
    input: string,
    hook: "PRE_HISTORY" | "PRE_SEND" = "PRE_HISTORY",
  ): Promise<SessionEntry> {
    const found = await this.lookup(caller, callerEntry, input);
    if (!("refused" in found)) return found;
    const context = this.historyContext(callerEntry, emptySessionAt(found.key, found.agentId));
    await this.policy.record({ ...context, hook }, found.refused, caller.operator);
    throw new SwitchboardError("FORBIDDEN", found.refused.message);
  }

  /** The session `input` names, or the refusal of a key that names none (see `target`). */
  private async lookup(
    caller: ToolCaller,
    callerEntry: SessionEntry,
    input: string,
  ): Promise<SessionEntry | RefusedTarget> {
    const key = await this.sessions.resolveInput(input, caller.agentId);
    // A session named by its sessionId that the caller may not address is one it does not know: a
    // refusal would confirm the id and name the key (a missing id answers not found).
    if (key !== input && this.sessions.isUuid(input) && this.refusalAt(callerEntry, key))
      throw new SwitchboardError("NOT_FOUND", `session not found: ${input}`);
    const entry = await this.sessions.get(key);
    if (entry && !entry.archivedAt) return entry;
    // A caller the policy refuses any session at this key (a sandboxed session and a key it did not
    // spawn, an agent outside the agent-to-agent allowlist) hears that refusal whether the session
    // exists or not: `not_found` for the missing ones would let it probe which keys exist. The
    // addressing rules decide first (builtins.ts), so a session that is there gets the same refusal.
    const refused = this.refusalAt(callerEntry, key);
    if (refused) return { refused, key, agentId: tryParseKey(key)!.agentId };
    throw new SwitchboardError("NOT_FOUND", `session not found: ${input}`);
  }

  /** The policy's refusal of reading a session at `key` whatever it holds (undefined: none). */
  private refusalAt(callerEntry: SessionEntry, key: string): PolicyDecision | undefined {
    const parsed = key === callerEntry.key ? undefined : tryParseKey(key);
    if (!parsed) return undefined;
    // Explained: a simulation reports it with the rules evaluated, as for a session that is there.
    const decision = this.policy.evaluate(
      this.historyContext(callerEntry, emptySessionAt(key, parsed.agentId)),
      true,
    );
    return decision.action === "BLOCK" ? decision : undefined;
  }

  /**
   * The hook of reading another session (history, status, summary): PRE_HISTORY. Reading one's own
   * session hits none. Shared by the real calls and their simulation (tool-policy-contexts).
   */
  readContext(callerEntry: SessionEntry, target: SessionEntry): PolicyContext | undefined {
    return target.key === callerEntry.key ? undefined : this.historyContext(callerEntry, target);
  }

  historyContext(callerEntry: SessionEntry, target: SessionEntry, discovery = false): PolicyContext {
    return {
      hook: "PRE_HISTORY",
      caller: this.policy.facts(callerEntry),
      target: this.policy.facts(target),
      facts: { origin: "tool", ...(discovery ? { discovery: true } : {}) },
    };
  }

  row(entry: SessionEntry, callerKey: string | undefined): SessionRow {
    return {
      key: displayKey(entry.key, callerKey, this.sessions.mainKey),
      kind: this.sessions.kind(entry),
      channel: this.sessions.channel(entry),
      updatedAt: entry.updatedAt,
      sessionId: entry.sessionId,
      agentId: entry.agentId,
      taint: entry.taint,
      clearance: entry.clearance,
      transcriptPath: this.sessions.transcriptPath(entry),
      ...pick(entry, [
        "displayName",
        "label",
        "model",
        "contextTokens",
        "totalTokens",
        "thinkingLevel",
        "verboseLevel",
        "systemSent",
        "abortedLastRun",
        "sendPolicy",
        "lastChannel",
        "lastTo",
        "deliveryContext",
        "spawnedBy",
      ]),
    };
  }

  /**
   * Rows with their last `messageLimit` messages. `viewer`: the session reading them (a tool call),
   * whose PRE_HISTORY redact rules rewrite the previews; absent for an operator's own listing.
   */
  async rowsWithMessages(
    entries: SessionEntry[],
    callerKey: string | undefined,
    messageLimit: number,
    viewer?: SessionEntry,
    actor?: string,
  ): Promise<SessionRow[]> {
    return Promise.all(
      entries.map(async (entry) => {
        const row = this.row(entry, callerKey);
        if (messageLimit > 0) {
          const read = await this.store.transcripts.read(entry.sessionId, {
            limit: messageLimit,
            filter: isMessage(false),
          });
          // Only what the row's taint, which discovery decided on, covers: a message that came in
          // after the row was read may be labelled higher.
          row.messages = read.entries
            .filter((message) => canFlowTo(message.label, entry.taint))
            .map(toHistoryMessage);
          if (viewer && viewer.key !== entry.key && this.policy.engine.redactsOn("PRE_HISTORY")) {
            // Previews are a read of that session: its redact rules rewrite them as they would its
            // history. Discovery already decided the row may be shown, so only the texts change.
            const decision = await this.policy.enforce(
              { ...this.historyContext(viewer, entry, true), texts: historyTexts(row.messages) },
              actor,
            );
            row.messages = decision.texts ? withHistoryTexts(row.messages, decision.texts) : [];
          }
        }
        return row;
      }),
    );
  }

  /** The rows `viewer` may discover, as list options (shared by `sessions_list` and status children). */
  private discoveryOptions(viewer: SessionEntry): SessionListOptions {
    const discovery = this.policy.discovery(viewer);
    return {
      visibility: discovery.visibility,
      ...(discovery.exact
        ? {}
        : {
            residual: (entry: SessionEntry) =>
              this.policy.evaluate(this.historyContext(viewer, entry, true)).action !== "BLOCK",
          }),
    };
  }

  async listSessions(
    caller: ToolCaller,
    query: { kinds?: string[]; limit: number; activeMinutes?: number; messageLimit: number },
  ): Promise<{ sessions: SessionRow[]; hidden: number; dataLabel?: Level }> {
    const callerEntry = await this.callerEntry(caller);
    // Built-in visibility goes to the store as data (a networked store filters in its query); the
    // engine runs per row, here in the gateway, only when user rules on PRE_HISTORY may still hide it.
    const result = await this.store.sessions.list(
      {
        limit: query.limit,
        mainKey: this.sessions.mainKey,
        ...(query.kinds ? { kinds: query.kinds } : {}),
        ...(query.activeMinutes ? { activeSince: activeSinceMinutes(query.activeMinutes) } : {}),
      },
      this.discoveryOptions(callerEntry),
    );
    // Previews are other sessions' data; discovery shows only rows within the caller's taint, so the
    // result's label is their highest taint and taking it in raises nothing.
    const dataLabel =
      query.messageLimit > 0 && result.entries.length > 0
        ? maxLevel(...result.entries.map((entry) => entry.taint))
        : undefined;
    return {
      sessions: await this.rowsWithMessages(
        result.entries,
        callerEntry.key,
        query.messageLimit,
        callerEntry,
        caller.operator,
      ),
      hidden: result.hidden,
      ...(dataLabel ? { dataLabel } : {}),
    };
  }

  async history(
    caller: ToolCaller,
    query: { sessionKey: string; limit: number; includeTools: boolean; before?: number; maxBytes: number },
  ): Promise<SessionsHistoryResult | ToolFailure> {
    const callerEntry = await this.callerEntry(caller);
    const target = await this.target(caller, callerEntry, query.sessionKey);
    const readHook = this.readContext(callerEntry, target);
    if (readHook) {
      const decision = await this.policy.enforce(readHook, caller.operator);
      if (decision.action === "BLOCK") return { status: "forbidden", error: decision.message };
    }
    const read = await this.store.transcripts.read(target.sessionId, {
      limit: query.limit,
      maxBytes: query.maxBytes,
      filter: isMessage(query.includeTools),
      ...(query.before !== undefined ? { before: query.before } : {}),
    });
    // The transcript is read after the row: entries that came in meanwhile may carry a label above
    // the taint the decision saw. What is handed over is labelled by what it holds, and a label that
    // rose is decided again on it (no read-up, however the reads interleave).
    const level = maxLevel(target.taint, ...read.entries.map((entry) => entry.label));
    const stored = read.entries.map(toHistoryMessage);
    let messages = stored;
    let again: { context: PolicyContext; decision: PolicyDecision } | undefined;
    const redacting = readHook !== undefined && this.policy.engine.redactsOn("PRE_HISTORY");
    if ((level !== target.taint || redacting) && readHook) {
      // Decided again on what was read: a label that rose, and the texts redact rules rewrite.
      // Recorded only once the page is cut (below), so the count audited is of what it hands over.
      const base = this.historyContext(callerEntry, { ...target, taint: level });
      const context = redacting ? { ...base, texts: historyTexts(stored) } : base;
      again = { context, decision: this.policy.evaluate(context) };
      if (again.decision.action === "BLOCK") {
        await this.policy.record(context, again.decision, caller.operator);
        return { status: "forbidden", error: again.decision.message };
      }
      if (again.decision.texts) messages = withHistoryTexts(stored, again.decision.texts);
    }
    // The store capped the messages as stored; a replacement longer than what it replaces can take
    // the page past `maxBytes`, so it is cut again as rewritten (the page's `truncated` and
    // `nextBefore` then say where the messages it leaves out are).
    const page = capHistory(
      {
        status: "ok",
        sessionKey: displayKey(target.key, callerEntry.key, this.sessions.mainKey),
        sessionId: target.sessionId,
        messages,
        truncated: read.truncated,
        dataLabel: level,
        ...(read.nextBefore !== undefined ? { nextBefore: read.nextBefore } : {}),
        ...(read.damaged ? { damaged: read.damaged } : {}),
      },
      query.maxBytes,
    );
    if (again) {
      let { context, decision } = again;
      if (decision.action === "REDACT" && page.messages.length < stored.length) {
        // Replacements in messages the cut left out are counted by the page that hands them over.
        const kept = new Set(page.messages.map((message) => message.seq));
        context = { ...context, texts: historyTexts(stored.filter((message) => kept.has(message.seq))) };
        decision = this.policy.evaluate(context);
      }
      const recorded = await this.policy.record(context, decision, caller.operator);
      if (recorded.action === "BLOCK") return { status: "forbidden", error: recorded.message };
    }
    if (target.key !== callerEntry.key) {
      const refused = await this.sessions.raiseTaintWithin(
        callerEntry.key,
        level,
        `read history of ${target.key}`,
        target.key,
      );
      if (refused) return { status: "forbidden", error: refused };
    }
    return page;
  }

  async send(
    caller: ToolCaller,
    request: { sessionKey: string; message: string; timeoutSeconds: number },
  ): Promise<SessionsSendResult> {
    const callerEntry = await this.callerEntry(caller);
    const target = await this.target(caller, callerEntry, request.sessionKey, "PRE_SEND");
    return this.flows.send(caller, callerEntry, target, request.message, request.timeoutSeconds);
  }

  async spawn(caller: ToolCaller, request: SpawnRequest): Promise<SessionsSpawnResult> {
    const callerEntry = await this.callerEntry(caller);
    return this.flows.spawn(caller, callerEntry, request);
  }

  async status(
    caller: ToolCaller,
    query: { sessionKey?: string },
  ): Promise<SessionStatusResult | ToolFailure> {
    const callerEntry = await this.callerEntry(caller);
    const target = query.sessionKey ? await this.target(caller, callerEntry, query.sessionKey) : callerEntry;
    const readHook = this.readContext(callerEntry, target);
    if (readHook) {
      const decision = await this.policy.enforce(readHook, caller.operator);
      if (decision.action === "BLOCK") return { status: "forbidden", error: decision.message };
      const refused = await this.sessions.raiseTaintWithin(
        callerEntry.key,
        target.taint,
        `read status of ${target.key}`,
        target.key,
      );
      if (refused) return { status: "forbidden", error: refused };
    }
    // Its children are rows the caller discovers as `sessions_list` would show them (tools.md: the
    // same visibility rules), at the taint this read leaves it with.
    const viewer = readHook
      ? { ...callerEntry, taint: maxLevel(callerEntry.taint, target.taint) }
      : callerEntry;
    return { ...(await this.statusOf(target, callerEntry.key, viewer)), dataLabel: target.taint };
  }

  /**
   * A session's status. `viewer`: the session asking (a tool call), which is shown only the children
   * its discovery admits; the others are left out, not counted (the result has no such field).
   * Without one (an operator's or client's `sessions.status`) every child is shown.
   */
  async statusOf(
    target: SessionEntry,
    callerKey: string | undefined,
    viewer?: SessionEntry,
  ): Promise<SessionStatusResult> {
    const { running: active, queued: queuedRuns } = await this.scheduler.runsOf(target.key);
    const children = (
      await this.store.sessions.list(
        { spawnedBy: target.key, limit: 50, includeArchived: true },
        viewer ? this.discoveryOptions(viewer) : undefined,
      )
    ).entries;
    const childRows = await Promise.all(
      children.map(async (child) => {
        const { running } = await this.scheduler.runsOf(child.key);
        return {
          key: child.key,
          status: running ? "running" : child.archivedAt ? "archived" : "idle",
          ...(running ? { runId: running.runId } : {}),
          ...(child.label ? { label: child.label } : {}),
        };
      }),
    );
    return {
      status: "ok",
      sessionKey: displayKey(target.key, callerKey, this.sessions.mainKey),
      sessionId: target.sessionId,
      kind: this.sessions.kind(target),
      channel: this.sessions.channel(target),
      agentId: target.agentId,
      taint: target.taint,
      clearance: target.clearance,
      createdAt: target.createdAt,
      updatedAt: target.updatedAt,
      ...pick(target, ["model", "totalTokens", "sendPolicy", "spawnedBy", "label", "displayName"]),
      ...(active
        ? {
            activeRun: {
              runId: active.runId,
              lane: active.lane,
              startedAt: active.startedAt ?? active.createdAt,
            },
          }
        : {}),
      ...(queuedRuns > 0 ? { queuedRuns } : {}),
      ...(childRows.length ? { children: childRows } : {}),
    };
  }

  async agents(caller: ToolCaller): Promise<AgentsListResult> {
    const own = caller.agentId;
    const ownConfig = this.sessions.agentConfig(own);
    const allow = ownConfig?.subagents?.allowAgents;
    // A session that may not spawn at all (at maxSpawnDepth, or a sub-agent denied the tool) may
    // spawn no agent, whatever its allowlist says.
    const maySpawn = this.toolGate(
      await this.callerEntry(caller),
      "sessions_spawn",
      caller.runOrigin,
    ).allowed;
    const rows = this.config.agents.list
      .map((agent) => ({
        id: agent.id,
        ...(agent.name ? { name: agent.name } : {}),
        configured: true,
        connected: this.isAgentConnected(agent.id),
        allowedForSpawn: maySpawn && spawnAgentAllowed(allow, own, agent.id),
      }))
      .filter((agent) => agent.id === own || agent.allowedForSpawn)
      .sort((a, b) => (a.id === own ? -1 : b.id === own ? 1 : a.id.localeCompare(b.id)));
    // The requester's own agent comes first even when the config does not name it (tools.md).
    if (rows[0]?.id !== own)
      rows.unshift({
        id: own,
        configured: false,
        connected: this.isAgentConnected(own),
        allowedForSpawn: false,
      });
    return { status: "ok", agents: rows };
  }

  messageContext(
    callerEntry: SessionEntry,
    request: { channel: string; to: string; text: string },
  ): PolicyContext {
    // The route `deliver` takes for an explicit channel and recipient.
    const route = { channel: request.channel.toLowerCase(), to: request.to };
    return this.output.outputContext(callerEntry, route, request.text);
  }

  async message(
    caller: ToolCaller,
    request: { channel: string; to: string; text: string },
  ): Promise<MessageResult> {
    const callerEntry = await this.callerEntry(caller);
    const result = await this.output.deliver(callerEntry, request.text, {
      channel: request.channel,
      to: request.to,
      reason: "message",
      ...(caller.operator ? { actor: caller.operator } : {}),
      ...(caller.runId ? { runId: caller.runId } : {}),
    });
    if (result.status === "ok")
      return {
        status: "ok",
        deliveryId: result.deliveryId,
        ...(result.redactions ? { redactions: result.redactions } : {}),
      };
    return { status: result.status === "forbidden" ? "forbidden" : "error", error: result.error };
  }

  /** The PRE_TOOL_CALL context of a call (shared by real calls and simulation). */
  async toolCallContext(
    callerEntry: SessionEntry,
    tool: string,
    args: Record<string, unknown>,
  ): Promise<PolicyContext> {
    // A rule on `tool.args.sessionKey` names a session by its key: the call's own spelling of it
    // (`vault`, another case, its sessionId) is read as that key, or the alias would slip past the
    // rule. A key that does not resolve stays as given (the tool refuses it on its own).
    const named = args.sessionKey;
    let ruled = args;
    if (typeof named === "string") {
      const canonical = await this.sessions.resolveInput(named, callerEntry.agentId).catch(() => named);
      if (canonical !== named) ruled = { ...args, sessionKey: canonical };
    }
    // The tool's configured result label: taking it in must respect the caller's clearance.
    return {
      hook: "PRE_TOOL_CALL",
      caller: this.policy.facts(callerEntry),
      tool: { name: tool, args: ruled },
      dataLabel: toolLevel(this.config.labels, tool),
    };
  }

  async simulate(
    caller: ToolCaller,
    request: { toolName: string; args: Record<string, unknown> },
  ): Promise<SimulateResult | ToolFailure> {
    const callerEntry = await this.callerEntry(caller);
    const evaluated: SimulateResult["evaluated"] = [];
    const gate = this.toolGate(callerEntry, request.toolName);
    if (!gate.allowed) {
      evaluated.push({ ruleId: "tools.available", matched: true, action: "deny" });
      return {
        status: "ok",
        decision: "BLOCK",
        ruleId: "tools.available",
        message: gate.message ?? "tool not available",
        evaluated,
        taint: { current: callerEntry.taint, after: callerEntry.taint },
      };
    }
    const first = this.policy.evaluate(
      await this.toolCallContext(callerEntry, request.toolName, request.args),
      true,
    );
    evaluated.push(...explained(first));
    let decision = first;
    /** The taint the call leaves: the tool's result label and what its downstream hook reads. */
    let after = first.labels.after;
    if (first.action !== "BLOCK") {
      const call = await parseToolCall(request.toolName, request.args, caller);
      if (call && "status" in call) return call;
      const downstream = call && (await downstreamContext(this.contexts, caller, callerEntry, call));
      if (downstream && "status" in downstream) return downstream;
      if (downstream) {
        // A key refused with no session behind it was decided in looking it up (as the real call is).
        const context = "refused" in downstream ? undefined : downstream;
        let second = "refused" in downstream ? downstream.refused : this.policy.evaluate(downstream, true);
        // A history read hands over the target's messages, and a summary of them, which its
        // redact rules rewrite.
        if (call.tool === "sessions_history" || call.tool === "summarize") second = readDecision(second);
        evaluated.push(...explained(second));
        if (second.action === "BLOCK" || second.action === "REDACT" || first.action === "ALLOW")
          decision = second;
        after = maxLevel(after, second.labels.after);
        // A send that waits takes the reply in, as the real call does (`AgentFlows.takeIn`): at the
        // target's taint after the delivery, rewritten by its redact rules, unless that read is
        // refused (the reply is withheld: the send itself goes ahead).
        const replyTaint = second.labels.targetAfter;
        if (
          call.tool === "sessions_send" &&
          call.request.timeoutSeconds > 0 &&
          second.action !== "BLOCK" &&
          context?.target &&
          replyTaint !== undefined
        ) {
          const reply = readDecision(
            this.policy.evaluate(
              this.flows.takeInContext(callerEntry, { ...context.target, taint: replyTaint }),
              true,
            ),
          );
          evaluated.push(...explained(reply));
          if (reply.action !== "BLOCK") after = maxLevel(after, replyTaint);
          // A message rewritten on its way in is the first redaction the call makes.
          if (reply.action === "REDACT" && decision.action === "ALLOW") decision = reply;
        }
      }
    }
    return {
      status: "ok",
      decision: decision.action,
      ruleId: decision.ruleId,
      message: decision.message,
      evaluated,
      taint: { current: callerEntry.taint, after: decision.action === "BLOCK" ? callerEntry.taint : after },
    };
  }

  async summarize(
    caller: ToolCaller,
    request: { scope: "session" | "topic"; sessionKey?: string },
  ): Promise<SummarizeResult> {
    const callerEntry = await this.callerEntry(caller);
    const target = request.sessionKey
      ? await this.target(caller, callerEntry, request.sessionKey)
      : callerEntry;
    const readHook = this.readContext(callerEntry, target);
    if (readHook) {
      const decision = await this.policy.enforce(readHook, caller.operator);
      if (decision.action === "BLOCK") return { status: "forbidden", error: decision.message };
    }
    const read = await this.store.transcripts.read(target.sessionId, {
      limit: 200,
      maxBytes: 48 * 1024,
      filter: isMessage(false),
    });
    const transcript = read.entries
      .map(
        (entry) =>
          `${entry.message?.role}: ${entry.message?.content.map((part) => (part.type === "text" ? part.text : "")).join("")}`,
      )
      .join("\n");
    const { record } = await this.scheduler.enqueue({
      sessionKey: target.key,
      lane: "nested",
      origin: "summarize",
      message: `Summarize this conversation${request.scope === "topic" ? " by topic" : ""} concisely:\n${transcript}`,
      context: `Summarize step: produce a concise ${request.scope === "topic" ? "per-topic " : ""}recap of the session ${target.key}. Do not call tools.`,
      provenance: { kind: "system" },
      label: target.taint,
      timeoutSeconds: 120,
      recordInput: false,
    });
    const result = await this.scheduler.wait(record.runId, 120_000, caller.signal);
    if (result.status === "ok") {
      const taken = await this.flows.takeIn(
        caller,
        target.key,
        `summary of ${target.key}`,
        result.reply ?? "",
        result.label,
      );
      return {
        status: "ok",
        summary: taken.withheld ? "" : (taken.text ?? ""),
        dataLabel: taken.level,
        ...(taken.withheld ? { withheld: taken.withheld } : {}),
      };
    }
    if (result.status === "error")
      return {
        status: "error",
        ...(await this.flows.takeInError(
          caller,
          target.key,
          result.error,
          "summary run failed",
          result.label,
        )),
      };
    return { status: "timeout", error: result.error ?? "summary run failed" };
  }
}

/** The facts of a session at `key` holding nothing (the least any rule on labels could see). */
function emptySessionAt(key: string, agentId: string): SessionEntry {
  return {
    key,
    sessionId: "00000000-0000-4000-8000-000000000000",
    agentId,
    createdAt: 0,
    updatedAt: 0,
    taint: "PUBLIC",
    clearance: "PUBLIC",
  };
}

function pick<T extends object, K extends keyof T>(source: T, keys: readonly K[]): Partial<Pick<T, K>> {
  const out: Partial<Pick<T, K>> = {};
  for (const key of keys) if (source[key] !== undefined) out[key] = source[key];
  return out;
}
