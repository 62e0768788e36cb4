import { randomUUID } from "node:crypto";
import {
  archiveWindowMinutes,
  type Config,
  canFlowTo,
  displayKey,
  hostDrivenSessionKeys,
  isSwitchboardError,
  type Level,
  longestArchiveWindowMinutes,
  makeSubagentKey,
  maxLevel,
  minLevel,
  type PolicyContext,
  type Provenance,
  type RunRecord,
  type SessionEntry,
  type SessionFacts,
  type SessionsSendResult,
  type SessionsSpawnResult,
  type SpawnRecord,
  type SpawnRequest,
  type Store,
  type SubagentModel,
  SwitchboardError,
  TERMINAL_RUN_STATUSES,
  type ToolCaller,
  type TranscriptEntry,
  tryParseKey,
} from "@switchboard/core";
import type { Logger } from "pino";
import type { AuditService } from "./audit-service";
import type { OutputDelivery } from "./output-delivery";
import type { PolicyService } from "./policy-service";
import type { AdmittedCall, CallAdmission } from "./ports/call-admission";
import type { CallBudget } from "./ports/call-budget";
import type { FlowClaims } from "./ports/flow-claims";
import { InProcessSessionLocks, type SessionLocks } from "./ports/session-locks";
import { type ChainPosition, chainPositionOf, type WaitGraph } from "./ports/wait-graph";
import { isLostWithProcess, type RunEnd, type RunScheduler, type WaitResult } from "./run-scheduler";
import type { ArchiveCheck, SessionsService } from "./sessions-service";

export const REPLY_SKIP = "REPLY_SKIP";
export const ANNOUNCE_SKIP = "ANNOUNCE_SKIP";

/**
 * Announce runs one spawn gets before its announce is given up (`failed`, audited). Bounded so a
 * requester whose turns always fail (or that no worker ever serves) is not fed the findings forever.
 */
const MAX_ANNOUNCE_ATTEMPTS = 3;
/**
 * Announce runs that ended with the process (restarts, a lost instance) do not count towards
 * `MAX_ANNOUNCE_ATTEMPTS`, but are bounded too: a gateway restarted over and over while announcing
 * does not retry for good.
 */
const MAX_LOST_ANNOUNCE_TRIES = 10;

/** Spawn runs the archiver looks at between two yields to the event loop. */
const SWEEP_SLICE = 1_000;

/** A send's follow-up cut short by this process stopping (see `stepEnd`). */
class FollowUpInterrupted extends Error {
  constructor() {
    super("the follow-up was cut short by the gateway stopping");
  }
}

/**
 * Releases a follow-up's claim when it ends, except when the stop cut it short: the claim is then
 * left to be orphaned, so another instance takes the follow-up over.
 */
async function keepIfInterrupted(flow: Promise<void>, release: () => Promise<void>): Promise<void> {
  try {
    await flow;
  } catch (error) {
    if (error instanceof FollowUpInterrupted) return;
    await release();
    throw error;
  }
  await release();
}

const isConflict = (error: unknown) => error instanceof SwitchboardError && error.code === "CONFLICT";

/**
 * The agent-to-agent flows (agent-to-agent.md): send → wait → reply-back loop → announce, and
 * spawn → run → announce. Every step is labelled and checked like a send.
 */

export class AgentFlows {
  private readonly background = new Set<Promise<unknown>>();
  private archiveTimer: NodeJS.Timeout | undefined;
  /** Shutting down: an announce run ended by the stop is retried at the next start, not now. */
  private stopped = false;
  /** Each spawn's announce steps on this process, one after another (keyed by its idempotency key). */
  private readonly announcing: SessionLocks = new InProcessSessionLocks();
  /** Each run's reply post on this process, one at a time (keyed by its runId). */
  private readonly posting: SessionLocks = new InProcessSessionLocks();

  constructor(
    private readonly config: Config,
    /** Run records only: sessions and transcripts are written through `sessions` (its per-key lock). */
    private readonly store: Pick<Store, "runs">,
    private readonly sessions: SessionsService,
    private readonly policy: PolicyService,
    private readonly scheduler: RunScheduler,
    private readonly output: OutputDelivery,
    private readonly audit: AuditService,
    private readonly log: Logger,
    /** Read by simulations only: a real call's counts come from `admission`. */
    private readonly budget: CallBudget,
    private readonly waits: WaitGraph,
    /** Budget, wait and child slots taken with the facts the decision reads (cluster-wide on several instances). */
    private readonly admission: CallAdmission,
    /** Several instances: each announce and send follow-up performed once cluster-wide. */
    private readonly claims?: FlowClaims,
    /** One wait of a flow for a run's end; it waits again while the run goes on. */
    private readonly waitSliceMs = 60_000,
  ) {
    scheduler.onRunEnded((record, end) => this.onRunEnded(record, end));
    this.hostDriven = hostDrivenSessionKeys(config);
  }

  /** Sessions an MCP host drives: the gateway starts no agent turns there on its own. */
  private readonly hostDriven: ReadonlySet<string>;

  private track(task: Promise<unknown>): void {
    const guarded = task.catch((error) => this.log.error({ err: error }, "background flow failed"));
    this.background.add(guarded);
    void guarded.finally(() => this.background.delete(guarded));
  }

  /** Resolves when every background flow started so far has settled (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.background.size > 0) await Promise.allSettled([...this.background]);
  }

  private get stepTimeoutSeconds(): number {
    return this.config.agents.defaults.timeoutSeconds;
  }

  private agentTimeoutSeconds(agentId: string): number {
    return this.sessions.agentConfig(agentId)?.timeoutSeconds ?? this.config.agents.defaults.timeoutSeconds;
  }

  // ---- chain bookkeeping ---------------------------------------------------------------------

  /** Where a call from this run sits in an agent-to-agent chain. */
  chainPosition(caller: ToolCaller): ChainPosition {
    return chainPositionOf(caller.runId ? this.scheduler.get(caller.runId)?.record : undefined);
  }

  /** The wait cycle that `caller` waiting on `target` would close, if it waits at all. */
  cycleFor(callerKey: string, targetKey: string, waits: boolean): string[] | undefined {
    return waits ? this.waits.cycleFor(callerKey, targetKey) : undefined;
  }

  // ---- sessions_send -------------------------------------------------------------------------

  sendContext(
    callerEntry: SessionEntry,
    targetEntry: SessionEntry,
    message: string,
    position: ChainPosition,
    waits: boolean,
    cycle = this.cycleFor(callerEntry.key, targetEntry.key, waits),
    budgetUsed = this.budget.used(callerEntry.key, "send"),
  ): PolicyContext {
    return {
      hook: "PRE_SEND",
      caller: this.policy.facts(callerEntry),
      target: this.policy.facts(targetEntry),
      text: message,
      facts: {
        origin: "tool",
        hop: position.hop,
        chainId: position.chainId,
        budgetUsed,
        ...(cycle ? { cycle } : {}),
      },
    };
  }

  a2aContextBlock(requester: SessionEntry, target: SessionEntry): string {
    return [
      "Agent-to-agent message context:",
      `Agent 1 (requester) session: ${requester.key}.`,
      `Agent 1 (requester) channel: ${this.sessions.channel(requester)}.`,
      `Agent 2 (target) session: ${target.key}.`,
    ].join("\n");
  }

  async send(
    caller: ToolCaller,
    callerEntry: SessionEntry,
    targetEntry: SessionEntry,
    message: string,
    timeoutSeconds: number,
  ): Promise<SessionsSendResult> {
    const position = this.chainPosition(caller);
    const waits = timeoutSeconds > 0;
    // Results name the target as every tool does: the caller's own main session as `main`.
    const shownKey = displayKey(targetEntry.key, callerEntry.key, this.sessions.mainKey);
    // The budget slot and the wait (unless it would close a cycle) are taken before the decision,
    // with the counts it reads: sends racing each other, or towards each other, cannot all pass.
    // A refusal gives them back.
    const admitted = await this.admission.send(callerEntry.key, targetEntry.key, waits);
    const release = () => admitted.endWait();
    let decision: Awaited<ReturnType<PolicyService["enforce"]>>;
    try {
      decision = await this.policy.enforce(
        this.sendContext(
          callerEntry,
          targetEntry,
          message,
          position,
          waits,
          admitted.cycle,
          admitted.budgetUsed,
        ),
        caller.operator,
      );
    } catch (error) {
      admitted.refused();
      throw error;
    }
    if (decision.action === "BLOCK") {
      admitted.refused();
      return { status: "forbidden", error: decision.message };
    }
    const text = decision.text ?? message;

    let result: WaitResult;
    let record: RunRecord;
    let delivery: { status: "delivered" | "queued" };
    let audited: Promise<void> | undefined;
    try {
      const provenance: Provenance = {
        kind: "agent",
        fromSessionKey: callerEntry.key,
        fromRunId: caller.runId ?? "operator",
        chainId: position.chainId,
        hop: position.hop,
        step: "send",
      };
      const hasSteps = this.followUpHasSteps(callerEntry, targetEntry);
      // One process: a follow-up with a step to take is marked pending in the primary's own record
      // (no write of its own), so a restart finds and finishes it (`resumeSendFollowUps`).
      const marked = !this.claims && hasSteps;
      try {
        ({ record, audited } = await this.deliverMessage(callerEntry, targetEntry, text, {
          origin: "send",
          provenance,
          context: this.a2aContextBlock(callerEntry, targetEntry),
          flow: {
            chainId: position.chainId,
            hop: position.hop,
            requesterKey: callerEntry.key,
            request: text,
          },
          ...(marked ? { followUp: "pending" as const } : {}),
          // The run's own limit, as for any input (the caller's wait is a separate, shorter matter): a
          // target whose worker never answers must not hold its lane and this follow-up for good.
          timeoutSeconds: this.agentTimeoutSeconds(targetEntry.agentId),
          actor: caller.operator,
          auditWhileWaiting: true,
        }));
      } catch (error) {
        // No send came of it: its budget slot goes back (a failed call is not a send).
        admitted.refused();
        throw error;
      }
      delivery = { status: this.scheduler.hasWorker(targetEntry.agentId) ? "delivered" : "queued" };

      // The reply-back loop and announce always run in the background, after the primary run.
      if (marked) this.track(this.followUp(record, callerEntry.key, text, position));
      else if (!this.claims || !hasSteps)
        this.track(this.afterPrimary(record, callerEntry.key, targetEntry.key, text, position));
      else {
        // Not claimed (the database failed us): this instance still performs it, untaken-over.
        const done = await this.claimFollowUp(record.runId).catch((error: unknown) => {
          this.log.warn({ err: error, runId: record.runId }, "could not claim a send's follow-up");
          return async () => undefined;
        });
        if (done)
          this.track(
            keepIfInterrupted(
              this.afterPrimary(record, callerEntry.key, targetEntry.key, text, position),
              done,
            ),
          );
      }

      if (!waits) return { status: "accepted", runId: record.runId, sessionKey: shownKey, delivery };
      const waited = await this.scheduler.waitIssued(record.runId, timeoutSeconds * 1000, caller.signal);
      result = waited.result;
      if (caller.holdAnswer) {
        // The run's end and the delivery's audit record may still be in flight: the answer waits
        // for them, the caller's own record of this call does not (it joins their group commit).
        if (waited.settled) caller.holdAnswer(waited.settled);
        if (audited) caller.holdAnswer(audited);
        audited = undefined;
      } else await waited.settled;
    } finally {
      release();
      // No answer (result or error) before the delivery's audit record is durable.
      await audited;
    }
    if (result.status === "ok") {
      // The reply is the target's data: it reaches the caller only within its clearance, and taking
      // it in raises the caller's taint (labels-and-policy.md, no read-up).
      const taken = await this.takeIn(
        caller,
        targetEntry.key,
        `reply from ${targetEntry.key}`,
        result.reply ?? "",
        result.label,
      );
      return {
        status: "ok",
        runId: record.runId,
        sessionKey: shownKey,
        reply: taken.withheld ? "" : (taken.text ?? ""),
        delivery,
        dataLabel: taken.level,
        ...(taken.withheld ? { withheld: taken.withheld } : {}),
      };
    }
    if (result.stillRunning) {
      return {
        status: "timeout",
        runId: record.runId,
        sessionKey: shownKey,
        error: `no reply within ${timeoutSeconds}s; the run continues — read sessions_history later`,
        delivery,
      };
    }
    if (result.status === "error")
      return {
        status: "error",
        runId: record.runId,
        sessionKey: shownKey,
        delivery,
        ...(await this.takeInError(caller, targetEntry.key, result.error, "run failed", result.label)),
      };
    return {
      status: "timeout",
      runId: record.runId,
      sessionKey: shownKey,
      error: result.error ?? "run failed",
      delivery,
    };
  }

  /**
   * The error a run of session `fromKey` ended with, taken in like its reply (`takeIn`): the
   * worker writes that text, and may put into it anything the session holds. Withheld, it is
   * replaced by `fallback`, which says no more than that the run failed. (A timeout's text is the
   * gateway's own and is not taken in.)
   */
  async takeInError(
    caller: ToolCaller,
    fromKey: string,
    error: string | undefined,
    fallback: string,
    atLeast?: Level,
  ): Promise<{ error: string; dataLabel?: Level; withheld?: string }> {
    if (!error) return { error: fallback };
    const taken = await this.takeIn(caller, fromKey, `error from ${fromKey}`, error, atLeast);
    return {
      error: taken.withheld ? fallback : (taken.text ?? error),
      dataLabel: taken.level,
      ...(taken.withheld ? { withheld: taken.withheld } : {}),
    };
  }

  /** The read of another session's data a reply or summary is taken in by (see `takeIn`). */
  takeInContext(callerEntry: SessionEntry, from: SessionFacts): PolicyContext {
    return {
      hook: "PRE_HISTORY",
      caller: this.policy.facts(callerEntry),
      target: from,
      facts: { origin: "gateway" },
    };
  }

  /**
   * Takes data of session `fromKey` (a reply, a summary) into the caller's session, at `fromKey`'s
   * current taint or `atLeast` (the label the run's end gave it), whichever is higher: a reset since
   * lowered the session, not what was computed before it. Above the caller's clearance it is
   * withheld (the decision is audited as a PRE_HISTORY block), otherwise the caller's taint rises to
   * it. Both sides are read fresh, since a run may have raised either while the caller waited.
   */
  async takeIn(
    caller: ToolCaller,
    fromKey: string,
    reason: string,
    text?: string,
    atLeast?: Level,
  ): Promise<{ level: Level; withheld?: string; text?: string }> {
    const callerEntry = await this.sessions.require(caller.sessionKey);
    const from = await this.sessions.get(fromKey);
    if (!from) return { level: callerEntry.taint, withheld: `${fromKey} no longer exists` };
    const level = atLeast ? maxLevel(from.taint, atLeast) : from.taint;
    if (from.key === callerEntry.key) return { level, ...(text !== undefined ? { text } : {}) };
    const decision = await this.judgeRead(
      callerEntry,
      { ...this.policy.facts(from), taint: level },
      text,
      caller.operator,
    );
    if (decision.action === "BLOCK") return { level, withheld: `withheld: ${decision.message}` };
    await this.sessions.raiseTaint(callerEntry.key, level, reason, from.key, "clearance");
    const handed = decision.texts?.[0] ?? text;
    return { level, ...(handed !== undefined ? { text: handed } : {}) };
  }

  /** Writes a message from one session into another: raises the target's taint and starts a run. */
  private async deliverMessage(
    from: SessionEntry,
    to: SessionEntry,
    text: string,
    options: {
      origin: RunRecord["origin"];
      provenance: Provenance;
      context: string;
      flow?: Record<string, unknown>;
      actor?: string | undefined;
      lane?: "nested" | "subagent";
      timeoutSeconds?: number;
      idempotencyKey?: string;
      spawn?: RunRecord["spawn"];
      followUp?: RunRecord["followUp"];
      label?: Level;
      /**
       * Returns with the delivery's audit record still being written (`audited`, which the caller
       * awaits before it answers), so the record shares its commits with the run instead of
       * delaying the wait. A crash in that window may keep the delivery without its record.
       */
      auditWhileWaiting?: boolean;
    },
  ): Promise<{ record: RunRecord; existing: boolean; audited?: Promise<void> }> {
    const label = options.label ?? from.taint;
    await this.sessions.raiseTaint(to.key, label, `message from ${from.key}`, from.key, "clearance");
    let audited: Promise<void> | undefined;
    let created: RunRecord | undefined;
    const enqueued = this.scheduler.enqueue({
      sessionKey: to.key,
      lane: options.lane ?? "nested",
      origin: options.origin,
      message: text,
      context: options.context,
      provenance: options.provenance,
      label,
      ...(options.flow ? { flow: options.flow } : {}),
      ...(options.timeoutSeconds ? { timeoutSeconds: options.timeoutSeconds } : {}),
      ...(options.idempotencyKey ? { idempotencyKey: options.idempotencyKey } : {}),
      ...(options.spawn ? { spawn: options.spawn } : {}),
      ...(options.followUp ? { followUp: options.followUp } : {}),
      // Issued with the run's write, so it shares a commit with the call's impersonation record.
      onCreate: (record) => {
        created = record;
        audited = this.audit
          .append({
            kind: "delivery",
            sessionKey: to.key,
            ...(options.actor ? { actor: options.actor } : {}),
            data: { from: from.key, to: to.key, runId: record.runId, origin: options.origin, label },
          })
          .then(() => undefined);
        // Handled now: a failure must not count as unhandled while the run is being created.
        audited.catch(() => undefined);
      },
    });
    let result: Awaited<typeof enqueued>;
    try {
      result = await enqueued;
    } catch (error) {
      if (created && audited) await this.deliveryFailed(created, from.key, to.key, audited, error);
      throw error;
    }
    if (result.existing || !audited) return result;
    if (!options.auditWhileWaiting) {
      await audited;
      return result;
    }
    return { ...result, audited };
  }

  /**
   * The delivery's record went out with the run's write, to share its commit; the write was then
   * refused (a full disk, an archived session), so the record names a run that does not exist. The
   * log cannot take it back: it says so in a record of its own, once the first is in.
   */
  private async deliveryFailed(
    record: RunRecord,
    from: string,
    to: string,
    audited: Promise<void>,
    error: unknown,
  ): Promise<void> {
    const recorded = await audited.then(
      () => true,
      () => false,
    );
    if (!recorded) return;
    const stored = await this.store.runs.get(record.runId).catch(() => undefined);
    if (stored) return;
    await this.audit
      .append({
        kind: "delivery.failed",
        sessionKey: to,
        data: { from, to, runId: record.runId, error: `the run was not stored: ${(error as Error).message}` },
      })
      .catch((auditError: unknown) =>
        this.log.error({ err: auditError, runId: record.runId }, "could not record a failed delivery"),
      );
  }

  /**
   * Whether a send's background part can do more than wait for the primary run: reply turns, or an
   * announce (the target has a route, or is a channel session whose skipped announce is recorded).
   * Several instances claim only such a follow-up (two statements a send); one with no step runs
   * here without a claim, as on one process. Judged at the send: a route added to the target while
   * its primary run is going is still used here, but not taken over if this instance dies.
   */
  private followUpHasSteps(requester: SessionEntry, target: SessionEntry): boolean {
    if (this.takesReplyTurns(requester.key, target.key)) return true;
    return this.sessions.route(target) !== undefined || this.sessions.isChannelBound(target);
  }

  /** Reply turns follow a send: some are configured, and the requester has a worker turn to take. */
  private takesReplyTurns(requesterKey: string, targetKey: string): boolean {
    // A host-driven requester (MCP) has no worker turn to take: its host already has the reply.
    return (
      this.config.session.agentToAgent.maxPingPongTurns > 0 &&
      requesterKey !== targetKey &&
      !this.hostDriven.has(requesterKey)
    );
  }

  /**
   * Several instances: the background part of a send is claimed under its primary run before the
   * send answers, so that if this instance dies before it is done another one takes it over
   * (`resumeOrphanedSends`). Its steps then carry idempotency keys: a step already started is
   * found again and awaited, not started twice. Undefined: another instance holds it.
   */
  private async claimFollowUp(primaryRunId: string): Promise<(() => Promise<void>) | undefined> {
    const claims = this.claims!;
    const key = `send:${primaryRunId}`;
    if (!(await claims.claim(key, "send", primaryRunId))) return undefined;
    return () => claims.release(key);
  }

  /** Several instances (the leader's timer): sends whose instance died before their follow-up ended. */
  async resumeOrphanedSends(): Promise<void> {
    const claims = this.claims;
    if (!claims) return;
    for (const { runId } of await claims.orphaned("send")) {
      const primary = await this.store.runs.get(runId);
      const flow = primary?.flow;
      const done = await this.claimFollowUp(runId);
      if (!done) continue;
      if (
        !primary ||
        typeof flow?.requesterKey !== "string" ||
        typeof flow.request !== "string" ||
        typeof flow.chainId !== "string"
      ) {
        await done();
        continue;
      }
      const position = { chainId: flow.chainId, hop: Number(flow.hop ?? 0) };
      this.log.info({ runId }, "taking over the follow-up of a send whose instance was lost");
      this.track(
        keepIfInterrupted(
          this.afterPrimary(primary, flow.requesterKey, primary.sessionKey, flow.request, position),
          done,
        ),
      );
    }
  }

  /**
   * After a start, on one instance: a send's follow-up (reply turns, announce) lived in the process
   * that accepted the send, and is taken up again here. Those with a step to take are marked pending
   * in their primary's record until they end; one whose primary is still queued (the process stopped
   * before it ran) waits for it again, so a fire-and-forget send keeps its reply turns. A step run
   * already created is found again by its idempotency key and awaited, not started twice; one whose
   * run died with the old process is made once more (`stepEnd`).
   * Several instances: the leader takes over orphaned follow-ups through the flow claims instead.
   *
   * Also, on one instance or on the only live one of several (the start calls this only then):
   * replies whose post to their channel was pending when the process before died (`deliverReply`).
   */
  async resumeSendFollowUps(): Promise<void> {
    for (const run of await this.store.runs.list({ pendingReplyPost: true }))
      this.track(this.deliverReply(run));
    if (this.claims) return;
    // Marked ones, and (from before marks) sends still queued.
    const pending = await this.store.runs.list({ origins: ["send"], pendingFollowUp: true });
    const queued = await this.store.runs.list({ origins: ["send"], statuses: ["queued"] });
    for (const primary of [...pending, ...queued.filter((run) => run.followUp === undefined)]) {
      const flow = primary.flow;
      if (
        typeof flow?.requesterKey !== "string" ||
        typeof flow.request !== "string" ||
        typeof flow.chainId !== "string"
      )
        continue;
      const position = { chainId: flow.chainId, hop: Number(flow.hop ?? 0) };
      if (primary.followUp === "pending")
        this.track(this.followUp(primary, flow.requesterKey, flow.request, position));
      else
        this.track(this.afterPrimary(primary, flow.requesterKey, primary.sessionKey, flow.request, position));
    }
  }

  /** One process: a marked send's follow-up, then its mark cleared (see `resumeSendFollowUps`). */
  private async followUp(
    primary: RunRecord,
    requesterKey: string,
    request: string,
    position: ChainPosition,
  ): Promise<void> {
    try {
      await this.afterPrimary(primary, requesterKey, primary.sessionKey, request, position);
    } catch (error) {
      // Cut short by the stop: the mark stays, and the next start takes it up.
      if (error instanceof FollowUpInterrupted) return;
      throw error;
    }
    // The primary has ended and its end is durable (`waitEnd` waits for that): nothing else writes
    // its record now but retention, so a version conflict means it was just written again; re-read.
    for (let attempt = 0; attempt < 5; attempt++) {
      const current = await this.store.runs.getVersioned(primary.runId);
      if (current?.row.followUp !== "pending") return;
      try {
        await this.store.runs.put({ ...current.row, followUp: "done" }, { expectedVersion: current.version });
        return;
      } catch (error) {
        if (!isConflict(error)) throw error;
      }
    }
  }

  /** A step's idempotency key in a send's follow-up (several instances: see `claimFollowUp`). */
  private stepKey(primary: RunRecord, step: string): { idempotencyKey?: string } {
    return this.claims || primary.followUp !== undefined
      ? { idempotencyKey: `a2a:${primary.runId}:${step}` }
      : {};
  }

  /** Background part of a send: wait for the primary reply, ping-pong, then announce. */
  private async afterPrimary(
    primary: RunRecord,
    requesterKey: string,
    targetKey: string,
    request: string,
    position: ChainPosition,
  ): Promise<void> {
    const first = await this.waitEnd(primary.runId);
    if (first.status !== "ok" || !first.reply?.trim()) return;
    const roundOneReply = first.reply;
    // Each reply keeps the label its run's end gave it (a reset since lowers its session, not it).
    const roundOneLabel = first.label;
    let latest = roundOneReply;
    let latestLabel = roundOneLabel;
    let latestFrom = targetKey;
    const turns = this.config.session.agentToAgent.maxPingPongTurns;
    const requester = await this.sessions.get(requesterKey);
    if (requester && this.takesReplyTurns(requesterKey, targetKey)) {
      for (let turn = 1; turn <= turns; turn++) {
        const speakerKey = turn % 2 === 1 ? requesterKey : targetKey;
        const otherKey = speakerKey === requesterKey ? targetKey : requesterKey;
        const speaker = await this.liveSession(speakerKey);
        const other = await this.liveSession(otherKey);
        if (!speaker || !other) break;
        const stepContext = [
          "Agent-to-agent reply step:",
          speakerKey === requesterKey ? "You are Agent 1 (requester)." : "You are Agent 2 (target).",
          `Agent 1 (requester) session: ${requesterKey}.`,
          `Agent 2 (target) session: ${targetKey}.`,
          `Turn ${turn} of ${turns}.`,
          `If you want to stop the ping-pong, reply exactly "${REPLY_SKIP}".`,
        ].join("\n");
        const passed = await this.passReply(other, speaker, latest, latestLabel, position);
        if (!passed) break;
        const step = await this.stepEnd(primary, `turn:${turn}`, async (key) => {
          const { record } = await this.deliverMessage(other, speaker, passed.text, {
            label: passed.label,
            origin: "reply",
            provenance: {
              kind: "agent",
              fromSessionKey: otherKey,
              fromRunId: primary.runId,
              chainId: position.chainId,
              hop: position.hop,
              step: "reply",
            },
            context: stepContext,
            flow: { chainId: position.chainId, hop: position.hop, turn },
            timeoutSeconds: this.stepTimeoutSeconds,
            ...key,
          });
          return record.runId;
        });
        const reply = step.reply?.trim() ?? "";
        if (step.status !== "ok" || reply === "" || reply === REPLY_SKIP) break;
        latest = step.reply!;
        latestLabel = step.label ?? (await this.sessions.get(speakerKey))?.taint;
        latestFrom = speakerKey;
      }
    }
    // What the announce run is given is labelled at the most its replies carry.
    let announceLabel = roundOneLabel;
    if (latestFrom !== targetKey) {
      // The announce runs in the target with the latest reply in its context: a reply that came from
      // the requester is a message into the target, checked and labelled like one, or left out.
      const requesterNow = await this.liveSession(latestFrom);
      const targetNow = await this.liveSession(targetKey);
      if (!requesterNow || !targetNow) return;
      const passed = await this.passReply(requesterNow, targetNow, latest, latestLabel, position);
      const refused =
        passed &&
        (await this.sessions.raiseTaintWithin(
          targetKey,
          passed.label,
          `reply from ${latestFrom}`,
          latestFrom,
        ));
      if (!passed || refused) latest = roundOneReply;
      else {
        latest = passed.text;
        announceLabel = maxLevel(passed.label, roundOneLabel ?? passed.label);
      }
    } else if (latestLabel) announceLabel = maxLevel(latestLabel, roundOneLabel ?? latestLabel);
    await this.announce(
      primary,
      requesterKey,
      targetKey,
      request,
      roundOneReply,
      latest,
      position,
      announceLabel,
    );
  }

  /**
   * A reply the gateway's own flow passes from session `from` into `to` (a reply-back turn, the
   * latest reply into the announce), at `label` at the least: the label its run's end gave it,
   * which a reset of `from` since does not lower. PRE_HISTORY judges it as `to` reading `from`'s
   * data and its redact rules rewrite it, as for a waiting send's take-in; PRE_SEND judges it as a
   * message from `from` into `to`. Undefined: refused, the exchange stops there.
   */
  private async passReply(
    from: SessionEntry,
    to: SessionEntry,
    text: string,
    label: Level | undefined,
    position: ChainPosition,
  ): Promise<{ text: string; label: Level } | undefined> {
    const level = label ? maxLevel(from.taint, label) : from.taint;
    const fromFacts = { ...this.policy.facts(from), taint: level };
    const sent = await this.policy.enforce({
      hook: "PRE_SEND",
      caller: fromFacts,
      target: this.policy.facts(to),
      text,
      facts: { origin: "gateway", chainId: position.chainId, hop: position.hop },
    });
    if (sent.action === "BLOCK") return undefined;
    const taken = await this.takenIn(to, fromFacts, sent.text ?? text);
    return taken === undefined ? undefined : { text: taken, label: level };
  }

  /**
   * `to` reading `text`, data of the session `from` describes, as the gateway's flow hands it over:
   * PRE_HISTORY judges the read and its redact rules rewrite the text. Undefined: refused.
   */
  private async takenIn(to: SessionEntry, from: SessionFacts, text: string): Promise<string | undefined> {
    const taken = await this.judgeRead(to, from, text);
    return taken.action === "BLOCK" ? undefined : (taken.texts?.[0] ?? text);
  }

  /**
   * PRE_HISTORY on `to` reading data of `from` that the gateway hands over (enforced: a block or
   * redaction is audited). The text is that session's data: its redact rules rewrite it as they
   * would its history (`texts` in the decision).
   */
  private judgeRead(to: SessionEntry, from: SessionFacts, text: string | undefined, actor?: string) {
    const read = this.takeInContext(to, from);
    return this.policy.enforce(
      text !== undefined && this.policy.engine.redactsOn("PRE_HISTORY") ? { ...read, texts: [text] } : read,
      actor,
    );
  }

  private async announce(
    primary: RunRecord,
    requesterKey: string,
    targetKey: string,
    request: string,
    roundOneReply: string,
    latest: string,
    position: ChainPosition,
    dataLabel: Level | undefined,
  ): Promise<void> {
    const target = await this.liveSession(targetKey);
    if (!target) return;
    if (!this.sessions.route(target)) {
      // Nowhere to post an announce (no channel route): no announce run. Main, cron, hook, node and
      // sub-agent sessions never have a route; a chat session that lacks one gets the skip recorded.
      if (this.sessions.isChannelBound(target)) {
        await this.sessions.append(targetKey, [
          {
            type: "event",
            label: target.taint,
            runId: primary.runId,
            event: {
              name: "announce.skipped",
              data: { reason: "no delivery route", requester: requesterKey },
            },
          },
        ]);
      }
      return;
    }
    const context = [
      "Agent-to-agent announce step:",
      `Agent 1 (requester) session: ${requesterKey}.`,
      `Agent 2 (target) session: ${targetKey}.`,
      `Original request: ${request}`,
      `Round 1 reply: ${roundOneReply}`,
      `Latest reply: ${latest}`,
      `If you want to remain silent, reply exactly "${ANNOUNCE_SKIP}".`,
    ].join("\n");
    // Replies computed before a reset of the target come back into its new transcript with their
    // own label, which the session takes on: within its clearance as it is now, which an operator
    // may have lowered since (after a reset, or with `force`). Above it the announce is not made.
    const label = dataLabel ? maxLevel(target.taint, dataLabel) : target.taint;
    const refused =
      dataLabel && !canFlowTo(dataLabel, target.clearance)
        ? `read-up blocked: announce of ${primary.runId} (${dataLabel}) cannot flow to ${targetKey} (clearance ${target.clearance})`
        : label !== target.taint &&
          (await this.sessions.raiseTaintWithin(targetKey, label, `announce of ${primary.runId}`, targetKey));
    if (refused) {
      await this.announceRefused(primary, requesterKey, target, refused);
      return;
    }
    const ended = await this.stepEnd(primary, "announce", async (key) => {
      const { record } = await this.scheduler.enqueue({
        sessionKey: targetKey,
        lane: "nested",
        origin: "announce",
        message: "Announce the outcome of this agent-to-agent exchange to your channel.",
        context,
        provenance: {
          kind: "agent",
          fromSessionKey: requesterKey,
          fromRunId: primary.runId,
          chainId: position.chainId,
          hop: position.hop,
          step: "announce",
        },
        label,
        timeoutSeconds: this.stepTimeoutSeconds,
        flow: { chainId: position.chainId, hop: position.hop },
        ...key,
      });
      return record.runId;
    });
    const reply = ended.reply?.trim() ?? "";
    if (ended.status !== "ok" || reply === "" || reply === ANNOUNCE_SKIP) return;
    const fresh = (await this.sessions.get(targetKey)) ?? target;
    // Taken up again after a restart, the step finds its announce run ended and would post it
    // again: a post that went out left its `delivery.sent` in the target's transcript.
    const runId = ended.runId;
    const posted = (item: TranscriptEntry) =>
      item.type === "event" && item.runId === runId && item.event?.name === "delivery.sent";
    if (await this.sessions.wroteRecently(fresh, posted)) return;
    await this.output.deliver(atEndLabel(fresh, ended.label), ended.reply!, {
      reason: "announce",
      runId: ended.runId,
    });
  }

  /**
   * A send's announce the target may not take in: recorded in its transcript, as an announce
   * skipped for want of a route is, and audited, so the operator who lowered the clearance sees
   * what it held back.
   */
  private async announceRefused(
    primary: RunRecord,
    requesterKey: string,
    target: SessionEntry,
    reason: string,
  ): Promise<void> {
    this.log.info({ runId: primary.runId, sessionKey: target.key, reason }, "announce refused");
    await this.sessions.append(target.key, [
      {
        type: "event",
        label: target.taint,
        runId: primary.runId,
        event: { name: "announce.skipped", data: { reason, requester: requesterKey } },
      },
    ]);
    await this.audit.append({
      kind: "announce",
      sessionKey: target.key,
      data: { runId: primary.runId, requester: requesterKey, refused: true, error: reason },
    });
  }

  /**
   * Runs one step of a send's follow-up (`start` makes its run under the key given) and waits for
   * its end. A step whose run died with its process (ended by the next start's recovery, or by a
   * shutdown) never had its turn: taken up again, it is made once more under a key of its own, so
   * the turn or the announce is not lost to a restart (nor made twice by a second one).
   */
  private async stepEnd(
    primary: RunRecord,
    step: string,
    start: (key: { idempotencyKey?: string }) => Promise<string>,
  ): Promise<WaitResult> {
    const first = await this.startStep(() => start(this.stepKey(primary, step)));
    if (first.refused) return first.refused;
    const ended = await this.waitEnd(first.runId);
    const keyed = this.claims !== undefined || primary.followUp !== undefined;
    if (!keyed || ended.status !== "error") return ended;
    // Errors are rare: the record, which says how the run ended, is read only for them.
    if (!isLostWithProcess(await this.scheduler.latestRecord(ended.runId))) return ended;
    // This process is stopping: the follow-up stays open (mark or claim) for whoever goes on.
    if (this.stopped) throw new FollowUpInterrupted();
    const again = await this.startStep(() => start(this.stepKey(primary, `${step}:again`)));
    return again.refused ?? this.waitEnd(again.runId);
  }

  /**
   * A step's run, or how it could not be made: its session gone or archived since it was looked up
   * (a finished sub-agent archived between two turns). That ends the follow-up like a failed step,
   * rather than failing it and leaving it pending for every later start.
   */
  private async startStep(
    start: () => Promise<string>,
  ): Promise<{ runId: string; refused?: undefined } | { refused: WaitResult }> {
    try {
      return { runId: await start() };
    } catch (error) {
      if (!isSwitchboardError(error) || error.code !== "NOT_FOUND") throw error;
      return { refused: { runId: "", status: "error", error: error.message } };
    }
  }

  /** A session's row unless it is gone or archived (a finished sub-agent): no run goes to it. */
  private async liveSession(key: string): Promise<SessionEntry | undefined> {
    const entry = await this.sessions.get(key);
    return entry?.archivedAt ? undefined : entry;
  }

  private async waitEnd(runId: string): Promise<WaitResult> {
    // Long bounded waits: every run has a timeout of its own, so this never hangs past it.
    for (;;) {
      const result = await this.scheduler.wait(runId, this.waitSliceMs);
      // Any waiter's "not yet" (a run held on another instance answers in other words than a local
      // one): a run that thinks for more than a minute still gets its reply turns and announce.
      if (!result.stillRunning) return result;
    }
  }

  // ---- sessions_spawn ------------------------------------------------------------------------

  activeChildren(requesterKey: string): number {
    return this.scheduler.activeSpawnsOf(requesterKey);
  }

  spawnContext(
    callerEntry: SessionEntry,
    targetAgentId: string,
    childKey: string,
    task: string,
    position: ChainPosition,
    admitted?: Pick<AdmittedCall, "activeChildren" | "budgetUsed">,
  ): PolicyContext {
    const childClearance = this.childClearance(callerEntry, targetAgentId);
    return {
      hook: "PRE_SPAWN",
      caller: this.policy.facts(callerEntry),
      target: {
        key: childKey,
        agentId: targetAgentId,
        kind: "subagent",
        channel: "internal",
        taint: "PUBLIC",
        clearance: childClearance,
        spawnedBy: callerEntry.key,
        spawnDepth: (callerEntry.spawnDepth ?? 0) + 1,
      },
      text: task,
      facts: {
        origin: "tool",
        activeChildren: admitted?.activeChildren ?? this.activeChildren(callerEntry.key),
        hop: position.hop,
        chainId: position.chainId,
        budgetUsed: admitted?.budgetUsed ?? this.budget.used(callerEntry.key, "spawn"),
      },
    };
  }

  childClearance(callerEntry: SessionEntry, targetAgentId: string): Level {
    return minLevel(callerEntry.clearance, this.sessions.agentClearance(targetAgentId));
  }

  knownModels(): Set<string> {
    const models = new Set<string>();
    for (const agent of this.config.agents.list) {
      const model = agent.model as { provider?: string; model?: string } | undefined;
      if (model?.model) models.add(model.model);
      if (model?.provider) models.add(model.provider);
      addSubagentModel(models, agent.subagents?.model);
    }
    addSubagentModel(models, this.config.agents.defaults.subagents.model);
    return models;
  }

  async spawn(
    caller: ToolCaller,
    callerEntry: SessionEntry,
    request: SpawnRequest,
  ): Promise<SessionsSpawnResult> {
    // An agent that is not configured is refused by the policy's `spawn` rule (so a simulation
    // refuses it too, and the refusal is audited like any other).
    const targetAgentId = (request.agentId ?? callerEntry.agentId).toLowerCase();
    const childUuid = randomUUID();
    const childKey = makeSubagentKey(targetAgentId, childUuid);
    // A spawn continues the chain of the run that asked for it (and its announce continues it
    // further), so spawn → announce → spawn ends at maxHops.
    const position = this.chainPosition(caller);
    // The budget and child slots are taken before the decision, with the counts it reads: spawns
    // made in parallel cannot all pass `maxChildren`. A refusal gives them back.
    const admitted = await this.admission.spawn(callerEntry.key, childKey);
    let decision: Awaited<ReturnType<PolicyService["enforce"]>>;
    try {
      decision = await this.policy.enforce(
        this.spawnContext(callerEntry, targetAgentId, childKey, request.task, position, admitted),
        caller.operator,
      );
    } catch (error) {
      admitted.refused();
      throw error;
    }
    if (decision.action === "BLOCK") {
      admitted.refused();
      return { status: "forbidden", error: decision.message };
    }
    let result: SessionsSpawnResult;
    try {
      result = await this.spawnAllowed(
        caller,
        callerEntry,
        request,
        targetAgentId,
        childKey,
        position,
        decision,
      );
    } catch (error) {
      // No spawn came of it: its budget and child slots go back (a failed call is not a spawn). One
      // whose child run exists (a later step failed) keeps them: that child counts.
      if (this.scheduler.activeRunFor(childKey)) admitted.childStored();
      else {
        admitted.refused();
        // Nor does its child session stay (made for this call, under a key nobody else has): no
        // run names it, so the archiver would never find it, and a caller retrying under load
        // (runs refused RATE_LIMITED) left one per call.
        await this.sessions.delete(childKey, "remove").catch((cleanup: unknown) => {
          if (!isSwitchboardError(cleanup) || cleanup.code !== "NOT_FOUND")
            this.log.warn({ err: cleanup, childKey }, "could not remove the child session of a failed spawn");
        });
      }
      throw error;
    }
    admitted.childStored();
    return result;
  }

  private async spawnAllowed(
    caller: ToolCaller,
    callerEntry: SessionEntry,
    request: SpawnRequest,
    targetAgentId: string,
    childKey: string,
    position: ChainPosition,
    decision: Awaited<ReturnType<PolicyService["enforce"]>>,
  ): Promise<SessionsSpawnResult> {
    let modelApplied: boolean | undefined;
    let warning: string | undefined;
    if (request.model !== undefined) {
      modelApplied = this.knownModels().has(request.model);
      if (!modelApplied)
        warning = `model "${request.model}" is not configured; the agent's default model is used`;
    }
    const { entry: child } = await this.sessions.ensure(childKey, {
      spawnedBy: callerEntry.key,
      spawnDepth: (callerEntry.spawnDepth ?? 0) + 1,
      clearance: this.childClearance(callerEntry, targetAgentId),
      ...(request.label ? { label: request.label } : {}),
      ...(modelApplied ? { model: request.model } : {}),
    });
    // The task as the policy let it through (a PRE_SPAWN redaction rewrote it): the child sees, and
    // the run record keeps, nothing of the original.
    const task = decision.text ?? request.task;
    const context = [
      "Sub-agent context:",
      `You are a sub-agent spawned by ${callerEntry.key} to do one task.`,
      `Your task: ${task}`,
      "Reply with your findings; your reply is reported back to the requester automatically.",
      "You cannot use session tools (list, history, send, spawn).",
    ].join("\n");
    const { record } = await this.deliverMessage(callerEntry, child, task, {
      origin: "spawn",
      lane: "subagent",
      provenance: {
        kind: "agent",
        fromSessionKey: callerEntry.key,
        fromRunId: caller.runId ?? "operator",
        chainId: position.chainId,
        hop: position.hop,
        step: "send",
      },
      flow: { chainId: position.chainId, hop: position.hop },
      context,
      actor: caller.operator,
      // 0 (the default) is no limit of the call's own, not none at all: the child's agent's run
      // timeout applies, as to every run, so a child whose worker never answers cannot hold the
      // requester's child slots, its lane and a worker slot for good.
      timeoutSeconds:
        request.runTimeoutSeconds > 0 ? request.runTimeoutSeconds : this.agentTimeoutSeconds(targetAgentId),
      spawn: {
        requesterKey: callerEntry.key,
        childKey,
        childSessionId: child.sessionId,
        task,
        ...(request.label ? { label: request.label } : {}),
        cleanup: request.cleanup,
        announce: { status: "pending", attempts: 0, idempotencyKey: `announce:${childKey}` },
      },
    });
    await this.audit.append({
      kind: "spawn",
      sessionKey: callerEntry.key,
      ...(caller.operator ? { actor: caller.operator } : {}),
      data: { childKey, runId: record.runId, agentId: targetAgentId, cleanup: request.cleanup },
    });
    return {
      status: "accepted",
      runId: record.runId,
      childSessionKey: childKey,
      ...(modelApplied !== undefined ? { modelApplied } : {}),
      ...(warning ? { warning } : {}),
    };
  }

  private onRunEnded(record: RunRecord, end: RunEnd): void {
    if (record.spawn && record.spawn.announce.status === "pending")
      this.track(this.announceSpawn(record, end.replyLabel));
    if (
      (record.origin === "chat" || record.origin === "agent") &&
      record.status === "ok" &&
      record.reply?.trim()
    ) {
      this.track(this.deliverReply(record));
    }
    // A spawn's announce run: its reply is posted when the announce settles, before the announce
    // is marked delivered (`settleAnnounce`); the spawn's pending announce is its durable mark.
    if (record.origin === "spawn-announce" && record.provenance?.kind === "subagent")
      this.track(this.announceRunEnded(record.provenance.runId));
  }

  /** An announce run ended: its spawn's announce is delivered, or tried again (`settleAnnounce`). */
  private async announceRunEnded(spawnRunId: string): Promise<void> {
    if (this.stopped) return;
    const spawnRun = await this.store.runs.get(spawnRunId);
    if (spawnRun?.spawn?.announce.status === "pending") await this.announceSpawn(spawnRun);
  }

  /**
   * Auto-reply delivery of a chat or agent run's reply out to its session's channel (PRE_OUTPUT),
   * at least once: `replyPost: "pending"` is written to the run's record before the post and
   * `"done"` after it, so a process that dies between the run's end and the post leaves the mark,
   * and the next start posts it (`resumeSendFollowUps`). Taken up so, a post that went out before
   * the crash left its `delivery.sent` in the transcript and is not made again; one that went out
   * but died before that record is made twice (at least once, never zero).
   */
  private async deliverReply(record: RunRecord): Promise<void> {
    // Most replies have no channel to go to (no route): settled without touching the run's record.
    if (record.replyPost === undefined) {
      const entry = await this.sessions.get(record.sessionKey);
      if (!entry || !record.reply?.trim() || !this.sessions.route(entry)) return;
    }
    return this.posting.run(record.runId, async () => {
      const stored = await this.store.runs.get(record.runId);
      // Its end not durable yet (the store refused it and the scheduler retries): posted unmarked.
      const durable = stored !== undefined && TERMINAL_RUN_STATUSES.includes(stored.status);
      const run = durable ? stored : record;
      if (run.replyPost === "done" || run.status !== "ok") return;
      const resumed = run.replyPost === "pending";
      const entry = await this.sessions.get(run.sessionKey);
      if (!entry || !run.reply?.trim() || !this.sessions.route(entry)) {
        if (resumed) await this.markReplyPost(run.runId, "done");
        return;
      }
      if (resumed) {
        if (await this.postedBefore(entry, run.runId)) {
          await this.markReplyPost(run.runId, "done");
          return;
        }
      } else if (durable && !(await this.markReplyPost(run.runId, "pending"))) return;
      await this.output.deliver(atEndLabel(entry, run.endLabel), run.reply, {
        reason: "reply",
        runId: run.runId,
      });
      if (durable) await this.markReplyPost(run.runId, "done");
    });
  }

  /** Whether a post of run `runId`'s reply was made (or refused) already: its transcript says so. */
  private postedBefore(entry: SessionEntry, runId: string): Promise<boolean> {
    return this.sessions.wroteRecently(
      entry,
      (item) =>
        item.type === "event" &&
        item.runId === runId &&
        (item.event?.name === "delivery.sent" || item.event?.name === "delivery.blocked"),
    );
  }

  /**
   * Writes a run's `replyPost` mark. After the run's end nothing else writes its record but
   * retention, so a version conflict means it was just written again: re-read. False: the record
   * is gone (pruned, or never stored).
   */
  private async markReplyPost(runId: string, mark: "pending" | "done"): Promise<boolean> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const current = await this.store.runs.getVersioned(runId);
      if (!current) return false;
      if (current.row.replyPost === mark) return true;
      try {
        await this.store.runs.put({ ...current.row, replyPost: mark }, { expectedVersion: current.version });
        return true;
      } catch (error) {
        if (!isConflict(error)) throw error;
      }
    }
    throw new SwitchboardError("CONFLICT", `could not mark the reply post of run ${runId}`);
  }

  /**
   * A spawn's announce run ended `ok`: its reply goes out to the requester's channel before the
   * announce is marked delivered, so the pending announce is the post's durable mark (a restart
   * settles it again). Settled again after a crash, a post that went out is found in the transcript.
   */
  private async postAnnounceReply(run: RunRecord): Promise<void> {
    const reply = run.reply?.trim() ?? "";
    if (reply === "" || reply === ANNOUNCE_SKIP) return;
    await this.posting.run(run.runId, async () => {
      const entry = await this.sessions.get(run.sessionKey);
      if (!entry || !this.sessions.route(entry)) return;
      if (await this.postedBefore(entry, run.runId)) return;
      await this.output.deliver(atEndLabel(entry, run.endLabel), run.reply!, {
        reason: "reply",
        runId: run.runId,
      });
    });
  }

  /**
   * Announces a finished spawned run to its requester, at most once (idempotency key), retried
   * after restarts. Several instances: performed by the instance that claims it (the one the run
   * ended on, or the leader taking over pending announces); the claim is re-checked against the
   * stored record, since another instance may have finished the announce just before.
   */
  async announceSpawn(record: RunRecord, replyLabel?: Level): Promise<void> {
    const claims = this.claims;
    if (!claims) {
      // The child's end, its announce run's end and a resume at start may all ask at once: each
      // finds what the one before it left (an announce run already made is not made again).
      return this.announcing.run(record.spawn!.announce.idempotencyKey, async () => {
        const stored = await this.store.runs.get(record.runId);
        // The caller's record when the store's is behind (an end not durable yet is retried).
        const current = stored && TERMINAL_RUN_STATUSES.includes(stored.status) ? stored : record;
        if (current.spawn?.announce.status !== "pending" || !TERMINAL_RUN_STATUSES.includes(current.status))
          return;
        await this.performSpawnAnnounce(current, replyLabel);
      });
    }
    const key = record.spawn!.announce.idempotencyKey;
    if (!(await claims.claim(key, "spawn-announce", record.runId))) return;
    try {
      const fresh = await this.store.runs.get(record.runId);
      if (fresh?.spawn?.announce.status !== "pending" || !TERMINAL_RUN_STATUSES.includes(fresh.status))
        return;
      await this.performSpawnAnnounce(fresh, replyLabel);
    } finally {
      await claims.release(key);
    }
  }

  /** Writes a change of the spawn's announce into its run's stored record (and `record`). */
  private async markAnnounce(record: RunRecord, change: Partial<SpawnRecord["announce"]>): Promise<void> {
    const latest = (await this.store.runs.get(record.runId)) ?? record;
    const spawn = record.spawn!;
    latest.spawn = { ...spawn, announce: { ...spawn.announce, ...change } };
    await this.store.runs.put(latest);
    record.spawn = latest.spawn;
  }

  /** `replyLabel`: the label the child's reply was written with, when this instance wrote it. */
  private async performSpawnAnnounce(record: RunRecord, replyLabel?: Level): Promise<void> {
    const spawn = record.spawn!;
    // An announce run was made already: what is left is to hear how it ended.
    if (spawn.announce.runId) return this.settleAnnounce(record);
    const requester = await this.liveSession(spawn.requesterKey);
    const child = await this.sessions.get(spawn.childKey);
    const finishAnnounce = (
      status: "delivered" | "skipped" | "failed",
      extra: { runId?: string; lastError?: string } = {},
    ) => this.markAnnounce(record, { status, attempts: spawn.announce.attempts + 1, ...extra });
    if (!requester) {
      await finishAnnounce("failed", { lastError: "requester session no longer exists" });
      return;
    }
    const outcome =
      record.status === "ok"
        ? "completed successfully"
        : record.status === "timeout"
          ? "timed out"
          : `failed: ${record.error ?? "unknown error"}`;
    const findings = record.reply?.trim() ? record.reply : "(no output)";
    const runtimeMs = (record.endedAt ?? Date.now()) - (record.startedAt ?? record.createdAt);
    const tokens = record.usage ? record.usage.inputTokens + record.usage.outputTokens : 0;
    const name = spawn.label ? `"${spawn.label}"` : spawn.childKey;
    const message = [
      `Sub-agent ${name} ${outcome}.`,
      "",
      "Findings:",
      findings,
      "",
      `Stats: runtime ${(runtimeMs / 1000).toFixed(1)}s • tokens ${tokens}${record.usage ? ` (in ${record.usage.inputTokens} / out ${record.usage.outputTokens})` : ""} • session ${spawn.childKey} • sessionId ${spawn.childSessionId} • transcript ${this.sessions.transcriptPathOf(spawn.childSessionId)}`,
    ].join("\n");
    const childFacts = this.findingsFacts(record, child, replyLabel ?? record.endLabel);
    const handed = await this.handFindings(requester, childFacts, message);
    if ("refused" in handed) {
      await finishAnnounce("failed", { lastError: handed.refused });
    } else {
      const announced = handed.text;
      const label = childFacts.taint;
      if (this.hostDriven.has(requester.key)) {
        // No agent turn in a host-driven session: the report is recorded for the host to read,
        // once: taken up again after a crash between the record and the mark, it is there already.
        const recorded = (item: TranscriptEntry) =>
          item.provenance?.kind === "subagent" && item.provenance.runId === record.runId;
        if (!(await this.sessions.wroteRecently(requester, recorded)))
          await this.sessions.append(requester.key, [
            {
              type: "message",
              label,
              provenance: { kind: "subagent", childSessionKey: spawn.childKey, runId: record.runId },
              message: { role: "user", content: [{ type: "text", text: announced }] },
            },
          ]);
        await finishAnnounce("delivered");
        await this.audit.append({
          kind: "announce",
          sessionKey: requester.key,
          data: { childKey: spawn.childKey, runId: record.runId, recorded: true, outcome: record.status },
        });
        if (spawn.cleanup === "delete" && child) await this.sessions.delete(child.key, "remove");
        return;
      }
      const { record: announceRun, existing } = await this.scheduler.enqueue({
        sessionKey: requester.key,
        lane: "nested",
        origin: "spawn-announce",
        message: announced,
        context: [
          "Sub-agent announce step:",
          `A sub-agent you spawned (${spawn.childKey}) has finished; the outcome above comes from the runtime.`,
          `If you want to remain silent, reply exactly "${ANNOUNCE_SKIP}".`,
        ].join("\n"),
        provenance: { kind: "subagent", childSessionKey: spawn.childKey, runId: record.runId },
        ...(typeof record.flow?.chainId === "string"
          ? { flow: { chainId: record.flow.chainId, hop: Number(record.flow.hop ?? 0) } }
          : {}),
        label,
        idempotencyKey: spawn.announce.idempotencyKey,
        timeoutSeconds: this.stepTimeoutSeconds,
      });
      // Still pending: the findings are delivered once the requester's turn on them ends `ok`. A
      // turn that dies (a restart, a failing or absent worker) leaves them unread, and is retried.
      await this.markAnnounce(record, { runId: announceRun.runId, attempts: spawn.announce.attempts + 1 });
      if (!existing)
        await this.audit.append({
          kind: "announce",
          sessionKey: requester.key,
          data: {
            childKey: spawn.childKey,
            runId: record.runId,
            announceRunId: announceRun.runId,
            outcome: record.status,
          },
        });
    }
    if (spawn.cleanup === "delete" && child) {
      await this.sessions.delete(child.key, "remove");
    }
    // Found by its key after a restart, it may have ended already.
    if (record.spawn?.announce.runId) await this.settleAnnounce(record);
  }

  /**
   * The child's findings as the data of a session: `written`, the label the reply was written
   * with, when known. The findings carry the taint of the transcript they were written in; a child
   * reset (or deleted) since its run ended has a taint that says nothing of them. Not known here (an
   * announce resumed after a restart or taken over), the label is the most that transcript could
   * have held: the child's clearance, or, the child gone, its agent's, which bounds it whatever the
   * requester's clearance was at the spawn (an over-taint, never a leak).
   */
  private findingsFacts(
    record: RunRecord,
    child: SessionEntry | undefined,
    written: Level | undefined,
  ): SessionFacts {
    const spawn = record.spawn!;
    if (child?.sessionId === spawn.childSessionId)
      return { ...this.policy.facts(child), taint: maxLevel(child.taint, written ?? child.taint) };
    const clearance = child?.clearance ?? this.sessions.agentClearance(record.agentId);
    return {
      key: spawn.childKey,
      agentId: record.agentId,
      kind: "subagent",
      channel: "internal",
      taint: written ?? clearance,
      clearance,
    };
  }

  /**
   * The requester takes a child's findings in, judged on its row as it is now (the first announce
   * and every retry alike: a reset and a lowered clearance since refuse them). PRE_SEND judges them
   * as a message from the child; PRE_HISTORY as the requester's read of the child's data, whose
   * redact rules rewrite them as in its `sessions_history` of the child; then its taint rises to
   * their label, within its clearance as the rise writes it. Returns the text handed over, or why
   * the findings were refused.
   */
  private async handFindings(
    requester: SessionEntry,
    child: SessionFacts,
    message: string,
  ): Promise<{ text: string } | { refused: string }> {
    const sent = await this.policy.enforce({
      hook: "PRE_SEND",
      caller: child,
      target: this.policy.facts(requester),
      text: message,
      facts: { origin: "gateway" },
    });
    if (sent.action === "BLOCK")
      return { refused: sent.message ?? "the sub-agent may not write to the requester" };
    const read = await this.judgeRead(requester, child, sent.text ?? message);
    if (read.action === "BLOCK")
      return { refused: read.message ?? "the requester may not read the sub-agent's findings" };
    const refused = await this.sessions.raiseTaintWithin(
      requester.key,
      child.taint,
      `announce from ${child.key}`,
      child.key,
    );
    return refused ? { refused } : { text: read.texts?.[0] ?? sent.text ?? message };
  }

  /**
   * The spawn's latest announce run ended: `ok` delivers the announce; otherwise the same announce
   * (message, chain), judged again as the first one was, goes into a new run on the requester, or
   * fails when the requester may no longer take it in; each attempt under its own key so
   * a retry is never confused with the run it replaces, until `MAX_ANNOUNCE_ATTEMPTS`.
   */
  private async settleAnnounce(record: RunRecord): Promise<void> {
    for (;;) {
      const spawn = record.spawn!;
      const runId = spawn.announce.runId!;
      const run = await this.scheduler.latestRecord(runId);
      if (run && !TERMINAL_RUN_STATUSES.includes(run.status)) return;
      if (run?.status === "ok") {
        // Delivered once its reply is posted too (a crash before leaves it pending, settled again).
        await this.postAnnounceReply(run);
        await this.markAnnounce(record, { status: "delivered" });
        return;
      }
      // The stop ended it: the next start takes it up (enqueueing now is refused anyway).
      if (this.stopped) return;
      const lastError = run
        ? `announce run ${run.status}${run.error ? `: ${run.error}` : ""}`
        : `announce run ${runId} not found`;
      const requester = run ? await this.liveSession(spawn.requesterKey) : undefined;
      const lostTry = isLostWithProcess(run);
      const lostTries = (spawn.announce.lostTries ?? 0) + (lostTry ? 1 : 0);
      const counted = spawn.announce.attempts - lostTries;
      const fail = async (reason: string) => {
        await this.markAnnounce(record, { status: "failed", lastError: reason });
        await this.audit.append({
          kind: "announce",
          sessionKey: spawn.requesterKey,
          data: {
            childKey: spawn.childKey,
            runId: record.runId,
            failed: true,
            attempts: spawn.announce.attempts,
            error: reason,
          },
        });
      };
      if (!run || !requester || counted >= MAX_ANNOUNCE_ATTEMPTS || lostTries > MAX_LOST_ANNOUNCE_TRIES) {
        await fail(run && !requester ? "requester session no longer exists (or was archived)" : lastError);
        return;
      }
      // The requester may have been reset, and its clearance lowered, since the run before: the
      // retry is judged again on its row as it is now, and the findings label its new transcript.
      const child = await this.sessions.get(spawn.childKey);
      const childFacts = this.findingsFacts(record, child, run.label ?? record.endLabel);
      const handed = await this.handFindings(requester, childFacts, run.message);
      if ("refused" in handed) {
        await fail(handed.refused);
        return;
      }
      const attempt = spawn.announce.attempts + 1;
      const { record: retry, existing } = await this.scheduler.enqueue({
        sessionKey: requester.key,
        lane: "nested",
        origin: "spawn-announce",
        message: handed.text,
        ...(run.context ? { context: run.context } : {}),
        provenance: run.provenance ?? {
          kind: "subagent",
          childSessionKey: spawn.childKey,
          runId: record.runId,
        },
        ...(run.flow ? { flow: run.flow } : {}),
        label: childFacts.taint,
        idempotencyKey: `${spawn.announce.idempotencyKey}:${attempt}`,
        timeoutSeconds: this.stepTimeoutSeconds,
      });
      await this.markAnnounce(record, {
        runId: retry.runId,
        attempts: attempt,
        lastError,
        ...(lostTry ? { lostTries } : {}),
      });
      if (!existing)
        await this.audit.append({
          kind: "announce",
          sessionKey: requester.key,
          data: {
            childKey: spawn.childKey,
            runId: record.runId,
            announceRunId: retry.runId,
            attempt,
            previousError: lastError,
          },
        });
    }
  }

  /** After a restart: finish announces that were pending when the old process stopped. */
  async resumePendingAnnounces(): Promise<void> {
    const pending = await this.store.runs.list({ pendingAnnounce: true });
    for (const record of pending) {
      if (!TERMINAL_RUN_STATUSES.includes(record.status)) continue;
      // Its announce run is still going: its end settles the announce (on several instances this
      // timer runs every 2 s, and need not claim and release what has nothing to do yet).
      const announceRunId = record.spawn?.announce.runId;
      if (announceRunId) {
        const announceRun = await this.store.runs.get(announceRunId);
        if (announceRun && !TERMINAL_RUN_STATUSES.includes(announceRun.status)) continue;
      }
      this.track(this.announceSpawn(record));
    }
  }

  /** Archives finished sub-agent sessions after `archiveAfterMinutes`. */
  startArchiver(intervalMs = 60_000): void {
    if (longestArchiveWindowMinutes(this.config) <= 0) return;
    this.archiveTimer = setInterval(() => {
      this.track(this.archiveSweep());
    }, intervalMs);
    this.archiveTimer.unref();
  }

  /**
   * Archives the children of spawn runs that ended before `endedBefore`, or, without it, longer ago
   * than their requester agent's `subagents.archiveAfterMinutes` (the default's when it sets none;
   * <= 0: never). Returns how many it archived.
   */
  async archiveSweep(endedBefore?: number): Promise<number> {
    const runs = await this.store.runs.list({ origins: ["spawn"], statuses: ["ok", "error", "timeout"] });
    // A child that spawned sub-agents of its own (maxSpawnDepth > 1) waits for their findings: a
    // spawn of it still to run, or ended with its announce to it pending, keeps it live.
    const reportingTo = new Set<string>();
    const unfinished = await this.store.runs.list({ origins: ["spawn"], statuses: ["queued", "running"] });
    for (const run of [...unfinished, ...(await this.store.runs.list({ pendingAnnounce: true }))])
      if (run.spawn) reportingTo.add(run.spawn.requesterKey);
    const now = Date.now();
    let archived = 0;
    let seen = 0;
    for (const run of runs) {
      // Store reads of rows held in memory resolve without yielding: a sweep over 100k ended spawns
      // lets other requests in every so often.
      if (++seen % SWEEP_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
      if (!run.spawn || run.spawn.cleanup === "delete") continue;
      let cutoff = endedBefore;
      if (cutoff === undefined) {
        const minutes = archiveWindowMinutes(this.config, tryParseKey(run.spawn.requesterKey)?.agentId);
        if (minutes <= 0) continue;
        cutoff = now - minutes * 60_000;
      }
      if ((run.endedAt ?? 0) > cutoff) continue;
      const child = await this.sessions.get(run.spawn.childKey);
      if (!child || child.archivedAt || reportingTo.has(child.key)) continue;
      if (await this.sessions.archive(child.key, child.sessionId, this.noRunsToCome(child.key)))
        archived += 1;
    }
    return archived;
  }

  /**
   * A run still to come on a session (running, queued: a send into a finished child waiting for a
   * worker, or being created by a send that looked the child up before) would run on an archived
   * row whose transcript is gone, its reply recorded nowhere: the child is archived at a sweep after
   * it. Asked under the session's lock right before the archive write, so a send racing the sweep
   * either counts here or finds the session archived. The store is asked too, since on several
   * instances the run may be queued or held elsewhere (there a race with another instance's send
   * remains: cluster.md).
   */
  private noRunsToCome(sessionKey: string): ArchiveCheck {
    return {
      settled: async () =>
        (await this.store.runs.list({ sessionKey, statuses: ["queued", "running"], limit: 1 })).length === 0,
      now: () => !this.scheduler.hasRunsToComeOn(sessionKey),
    };
  }

  stop(): void {
    this.stopped = true;
    if (this.archiveTimer) clearInterval(this.archiveTimer);
  }
}

/** A configured sub-agent model names a model either as a string or as an object's `model`/`provider`. */
function addSubagentModel(models: Set<string>, model: SubagentModel | undefined): void {
  if (typeof model === "string") models.add(model);
  else if (model) {
    models.add(model.provider);
    if ("model" in model) models.add(model.model);
  }
}

/**
 * A session as PRE_OUTPUT judges a run's text posted from it: at its current taint or the label the
 * run's end gave the text, whichever is higher (a reset between the end and the post lowers only
 * the session).
 */
function atEndLabel(entry: SessionEntry, endLabel: Level | undefined): SessionEntry {
  return endLabel && maxLevel(entry.taint, endLabel) !== entry.taint ? { ...entry, taint: endLabel } : entry;
}
