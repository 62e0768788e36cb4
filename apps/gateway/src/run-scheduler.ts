import { randomUUID } from "node:crypto";
import {
  archivedSessionError,
  compareLevels,
  type EventPayload,
  type Lane,
  type Level,
  monotonicDeadline,
  type Provenance,
  type RunRecord,
  type SessionEntry,
  type SpawnRecord,
  type Store,
  SwitchboardError,
  TERMINAL_RUN_STATUSES,
  type TranscriptEntryInput,
  timerDelay,
  type Usage,
} from "@switchboard/core";
import type { Logger } from "pino";
import type { Connection } from "./connection";
import {
  type ActiveRun as ActiveRunOf,
  type ActiveRuns,
  type RunLoad,
  runInputBytes,
} from "./ports/active-runs";
import type { EventLog } from "./ports/event-log";
import type { RunLanes } from "./ports/run-lanes";
import type { RunWaiters } from "./ports/run-waiters";
import type { WorkerRegistry } from "./ports/worker-registry";
import type { RunDispatcher } from "./run-assignment";
import type { SessionsService } from "./sessions-service";
import type { RunObserver } from "./telemetry/telemetry";

export interface RunSpec {
  sessionKey: string;
  lane: Lane;
  origin: RunRecord["origin"];
  message: string;
  context?: string;
  provenance: Provenance;
  /** Label the input message carries into the transcript. */
  label: Level;
  timeoutSeconds?: number;
  idempotencyKey?: string;
  spawn?: SpawnRecord;
  followUp?: RunRecord["followUp"];
  flow?: Record<string, unknown>;
  /** Record the input in the transcript (false for isolated runs such as summaries). */
  recordInput?: boolean;
  /**
   * Called with the new run's record as its write is issued, before the run is assigned or its
   * input written: what goes with the run (its delivery's audit record) is written beside it and
   * shares the commits of the call's other audit records. A failed run write leaves that record
   * behind: an audit record of an attempt, never a delivery without its record.
   */
  onCreate?: (record: RunRecord) => void;
}

export interface WaitResult {
  runId: string;
  status: "ok" | "error" | "timeout";
  reply?: string;
  error?: string;
  /** The label `reply` or `error` carries, at the least (`RunRecord.endLabel`). */
  label?: Level;
  startedAt?: number;
  endedAt?: number;
  /**
   * The wait ended before the run did (its time was up, or it was cancelled): the run goes on. Set
   * by every waiter, local or cluster-wide, so callers ask this rather than match their wording.
   */
  stillRunning?: true;
}

type ActiveRun = ActiveRunOf<Connection>;

/** How much the runs not ended yet may hold on this instance (`gateway.limits`). */
export interface RunAdmissionLimits {
  maxRunsPerSession: number;
  maxRuns: number;
  maxRunInputBytes: number;
}

/**
 * Runs a flow starts to finish what an accepted run began: refusing one would lose a reply or an
 * announce already owed, and their number is bounded by the flows (turns, hops, budgets) instead.
 */
/**
 * Runs whose input nothing reads back once they ended: it is in the session's transcript (or was
 * built from it, for a summary). Their ended record keeps a short head of it, so the records a
 * retention window holds stay small however large the inputs were. A spawn's and an announce's
 * input is kept whole: a retried announce sends it again.
 */
const INPUT_DROPPED_AT_END: ReadonlySet<RunRecord["origin"]> = new Set([
  "chat",
  "agent",
  "send",
  "summarize",
]);
/** Characters of such an input an ended record keeps. */
export const ENDED_INPUT_HEAD = 256;

/** What an ended run's record keeps of its input `message` (the whole of a short one). */
export function endedInput(message: string): string {
  if (message.length <= ENDED_INPUT_HEAD) return message;
  let end = ENDED_INPUT_HEAD;
  // Never end on half of a surrogate pair.
  const code = message.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end -= 1;
  // Copied through bytes: a slice of a string may share, and so keep alive, the whole of it.
  const head = Buffer.from(message.slice(0, end)).toString();
  return `${head}… [${message.length} characters in all; the transcript keeps the whole input]`;
}

/** How a run of a session reset while it ran ends (on the instance of the reset, or at its answer). */
export const RESET_WHILE_RUNNING = "the session was reset while this run was going";

const FOLLOW_UP_ORIGINS: ReadonlySet<RunRecord["origin"]> = new Set(["reply", "announce", "spawn-announce"]);

/** What the scheduler asks of the cluster (apps/gateway/src/cluster/cluster-runs.ts). */
export interface ClusterRunHooks {
  /** Takes the run's lane cluster-wide; resolves once it is this instance's (or the run ended). */
  claim(record: RunRecord): Promise<void>;
  /**
   * A new run about to start here at once: takes its lane cluster-wide unless another run holds it
   * or waits in the cluster's queue (false: the run must join the queue behind them).
   */
  claimAtOnce(record: RunRecord): Promise<boolean>;
  /**
   * Puts a run no worker here can take into the cluster's queue. `deadlineInMs`: the time it has
   * left, on this instance's clock (undefined: no timeout); the database keeps its deadline on its
   * own clock from there.
   */
  handOff(record: RunRecord, deadlineInMs: number | undefined): Promise<void>;
  /** A run holding its lane here goes back to the head of it in the cluster's queue. */
  handBack(record: RunRecord, deadlineInMs: number | undefined): Promise<void>;
  /**
   * What the runs this instance handed to the cluster's queue weigh until their end is heard (or
   * it is adopted here, and `active` counts it): they count against this instance's
   * `gateway.limits` like its runs not ended, wherever they run.
   */
  queuedLoad(sessionKey: string): RunLoad;
  /** The run ended: its lane is free for any instance. */
  release(record: RunRecord): Promise<void>;
  /** Takes a run out of the cluster's queue (false: it was not there). */
  withdraw(record: RunRecord): Promise<boolean>;
  /**
   * Writes the run's end if this instance still holds the run; false when it does not (it was
   * declared lost while cut off, and the run was reassigned or ended by another instance).
   */
  end(record: RunRecord): Promise<boolean>;
  /** A worker of the agent is connected to another live instance (as last read, within a second). */
  hasRemoteWorker(agentId: string): boolean;
  /** Waits for a run this instance does not hold. */
  wait(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<WaitResult>;
}

/** What this instance knows of a run's end beyond its record. */
export interface RunEnd {
  /**
   * The label its reply was written into the transcript with: the session's taint at that moment,
   * which a later reset of the session no longer shows. Absent: no reply was written here.
   */
  replyLabel?: Level;
}

export type RunEndedListener = (record: RunRecord, end: RunEnd) => void | Promise<void>;

/**
 * Runs: lanes per session (one run at a time per session+lane, FIFO), idempotency keys, timeouts,
 * worker dispatch, and waiting for results. Run records are durable, so `agent.wait` answers for
 * runs that ended before a restart.
 */
export class RunScheduler {
  private readonly endedListeners: RunEndedListener[] = [];
  /** Inputs still being written of runs already handed to their worker (settle after any rollback). */
  private readonly inputsPending = new Map<string, Promise<void>>();
  /** Runs being put in the cluster's queue (see `handOff`). */
  private readonly handingOff = new Map<string, Promise<void>>();
  /** Each lane's last step in order here (see `inLaneOrder`). */
  private readonly laneOrder = new Map<string, Promise<void>>();
  /** Each timed run's deadline on this process's monotonic clock (see `armTimeout`, `timeLeft`). */
  private readonly dues = new WeakMap<ActiveRun, number>();
  private stopping = false;
  private cluster: ClusterRunHooks | undefined;
  /** Retries writing ended runs whose final record the store refused (disk full). */
  private unsavedTimer: NodeJS.Timeout | undefined;

  constructor(
    /** Run records, and transcript reads to repair a recovered run's input. */
    private readonly store: Pick<Store, "runs" | "transcripts">,
    private readonly sessions: SessionsService,
    private readonly bus: EventLog,
    private readonly log: Logger,
    /** Hands a run to the worker picked for it (builds and sends `run.assigned`). */
    private readonly assign: RunDispatcher,
    private readonly waiters: RunWaiters,
    private readonly lanes: RunLanes,
    /** Runs not ended yet, idempotent creations in flight, run ends not durable yet. */
    private readonly active: ActiveRuns<Connection>,
    /** Worker connections, their slots and the lanes starved for one. */
    private readonly workers: WorkerRegistry<Connection>,
    private readonly limits: RunAdmissionLimits,
    /** Metrics and traces of runs; undefined when telemetry is off. */
    private readonly telemetry?: RunObserver,
  ) {}

  /**
   * Several instances on one database: runs are claimed cluster-wide before their worker gets
   * them (one active run per lane across instances), and waits for runs not held here are
   * answered from the cluster's event log. A run's claim is released when it ends, before its
   * lane's next run is started.
   */
  useCluster(cluster: ClusterRunHooks): void {
    this.cluster = cluster;
  }

  onRunEnded(listener: RunEndedListener): void {
    this.endedListeners.push(listener);
  }

  /** Re-creates lanes after a restart: queued runs wait again, runs that were running died with the old process. */
  async recover(): Promise<void> {
    const unfinished = await this.store.runs.list({ statuses: ["queued", "running"] });
    unfinished.sort((a, b) => a.createdAt - b.createdAt);
    for (const record of unfinished) {
      // One bad run must never keep the gateway from starting: it ends `error` with the reason.
      try {
        if (record.status === "running") {
          await this.finish(record, "error", { error: LOST_AT_RESTART, lost: "restart" });
          continue;
        }
        const gone = await this.sessionGone(record);
        if (gone) {
          // The process before may have handed it to the cluster's queue, and the end of a run
          // still queued there is refused (`end`): it leaves the queue first.
          if (this.cluster) await this.cluster.withdraw(record);
          await this.finish(record, "error", { error: gone });
          continue;
        }
        await this.repairInput(record);
        this.telemetry?.created(record);
        const active: ActiveRun = { record };
        this.active.add(active);
        this.armTimeout(active);
        this.queue(record);
      } catch (error) {
        this.log.error({ err: error, runId: record.runId }, "could not recover a run; ending it");
        this.active.delete(record.runId);
        await this.finish(record, "error", {
          error: `could not be recovered after a restart: ${(error as Error).message}`,
        }).catch((finishError) =>
          this.log.error({ err: finishError, runId: record.runId }, "could not end an unrecoverable run"),
        );
      }
    }
    for (const laneKey of this.lanes.laneKeys()) this.pump(laneKey);
  }

  /** Why a run can no longer start in its session (reset, deleted or archived since it was queued). */
  private async sessionGone(record: RunRecord): Promise<string | undefined> {
    return this.sessionCheck(record).then((checked) => checked.gone);
  }

  /**
   * Why the run's session can no longer take it (deleted, archived, reset), else its row.
   * `known`: the row as read just now by the caller (a cluster claim reads it).
   */
  private async sessionCheck(
    record: RunRecord,
    known?: { session: SessionEntry | undefined },
  ): Promise<{ gone: string; entry?: undefined } | { gone?: undefined; entry: SessionEntry }> {
    const entry = known ? known.session : await this.sessions.get(record.sessionKey);
    if (!entry)
      return { gone: `session ${record.sessionKey} was deleted or archived before the run started` };
    if (entry.sessionId !== record.sessionId)
      return { gone: `session ${record.sessionKey} was reset before the run started` };
    return { entry };
  }

  get(runId: string): ActiveRun | undefined {
    return this.active.get(runId);
  }

  /**
   * Aborted when the run ends here (its worker answered, it timed out, its session was reset): a
   * tool call it made stops waiting with it, instead of holding a send's wait for up to ten minutes
   * past the run. Undefined: the run is not active here.
   */
  endSignal(runId: string): AbortSignal | undefined {
    const active = this.active.get(runId);
    if (!active) return undefined;
    active.ending ??= new AbortController();
    return active.ending.signal;
  }

  /** The freshest record of a run: held here, ended here but not yet durable, else the store's. */
  async latestRecord(runId: string): Promise<RunRecord | undefined> {
    return this.active.get(runId)?.record ?? this.active.unsaved(runId) ?? (await this.store.runs.get(runId));
  }

  async enqueue(spec: RunSpec): Promise<{ record: RunRecord; existing: boolean }> {
    if (this.stopping)
      throw new SwitchboardError("UNAVAILABLE", "gateway is shutting down", { retryable: true });
    if (spec.idempotencyKey) {
      const inflight = this.active.creating(spec.idempotencyKey);
      if (inflight) return { record: sameSession(await inflight, spec), existing: true };
      const stored = await this.store.runs.getByIdempotencyKey(spec.idempotencyKey);
      if (stored)
        return { record: sameSession(this.active.get(stored.runId)?.record ?? stored, spec), existing: true };
      const creating = this.create(spec);
      this.active.startCreating(spec.idempotencyKey, creating);
      try {
        return { record: await creating, existing: false };
      } catch (error) {
        // Another gateway instance stored a run with this key between the lookup and our write
        // (the store's unique key refused ours before anything else was written): that run it is.
        const details = error instanceof SwitchboardError ? (error.details as { field?: string }) : undefined;
        if (details?.field !== "idempotencyKey") throw error;
        const winner = await this.store.runs.getByIdempotencyKey(spec.idempotencyKey);
        if (!winner) throw error;
        return { record: sameSession(winner, spec), existing: true };
      } finally {
        this.active.doneCreating(spec.idempotencyKey);
      }
    }
    return { record: await this.create(spec), existing: false };
  }

  private async create(spec: RunSpec): Promise<RunRecord> {
    // Counted from before the session is read: the archiver, which checks this right before its
    // archive write, either sees this creation or archives first, and then the read below sees it.
    const bytes = runInputBytes(spec);
    if (!FOLLOW_UP_ORIGINS.has(spec.origin)) this.admit(spec.sessionKey, bytes);
    const created = this.active.startCreatingOn(spec.sessionKey, bytes);
    try {
      return await this.createOn(await this.sessions.require(spec.sessionKey), spec);
    } finally {
      created();
    }
  }

  /**
   * Refuses a run the instance has no room for: RATE_LIMITED, retryable once some runs have ended.
   * Checked and counted in one synchronous step with `startCreatingOn`, so concurrent sends cannot
   * all slip under the limit together.
   */
  private admit(sessionKey: string, bytes: number): void {
    const here = this.active.load(sessionKey);
    // Several instances: the runs this one handed to the cluster's queue count until they end
    // (they left `active`, and would otherwise count nowhere, on no instance).
    const queued = this.cluster?.queuedLoad(sessionKey);
    const load: RunLoad = queued
      ? {
          sessionRuns: here.sessionRuns + queued.sessionRuns,
          runs: here.runs + queued.runs,
          bytes: here.bytes + queued.bytes,
        }
      : here;
    const { maxRunsPerSession, maxRuns, maxRunInputBytes } = this.limits;
    if (load.sessionRuns >= maxRunsPerSession)
      throw new SwitchboardError(
        "RATE_LIMITED",
        `session ${sessionKey} has ${load.sessionRuns} runs not ended yet (gateway.limits.maxRunsPerSession is ${maxRunsPerSession}); retry once some have ended`,
        { retryable: true, details: { limit: "gateway.limits.maxRunsPerSession", value: maxRunsPerSession } },
      );
    if (load.runs >= maxRuns)
      throw new SwitchboardError(
        "RATE_LIMITED",
        `${load.runs} runs are not ended yet here (gateway.limits.maxRuns is ${maxRuns}); retry once some have ended`,
        { retryable: true, details: { limit: "gateway.limits.maxRuns", value: maxRuns } },
      );
    if (load.bytes + bytes > maxRunInputBytes)
      throw new SwitchboardError(
        "RATE_LIMITED",
        `runs not ended yet hold ${load.bytes} bytes of input here and this one adds ${bytes} (gateway.limits.maxRunInputBytes is ${maxRunInputBytes}); retry once some have ended`,
        { retryable: true, details: { limit: "gateway.limits.maxRunInputBytes", value: maxRunInputBytes } },
      );
  }

  private async createOn(read: SessionEntry, spec: RunSpec): Promise<RunRecord> {
    // Archived (a finished sub-agent's session) since the caller looked it up: a run now would go
    // on against a transcript that is gone, its input and reply recorded nowhere.
    if (read.archivedAt) throw archivedSessionError(spec.sessionKey);
    // The session holds the input at its label before the run exists. Its caller raised it already
    // (a delivered message, a summary of it): a reset since began a transcript at its base taint,
    // and the run — its input, the summary it writes, the reply taken in at its end label — would
    // otherwise be below what it holds.
    const entry = compareLevels(spec.label, read.taint) > 0 ? await this.raisedFor(read, spec) : read;
    const runId = randomUUID();
    const record: RunRecord = {
      runId,
      sessionKey: entry.key,
      sessionId: entry.sessionId,
      agentId: entry.agentId,
      lane: spec.lane,
      status: "queued",
      createdAt: Date.now(),
      origin: spec.origin,
      message: spec.message,
      provenance: spec.provenance,
      attempts: 0,
      ...(spec.context ? { context: spec.context } : {}),
      ...(spec.timeoutSeconds ? { timeoutSeconds: spec.timeoutSeconds } : {}),
      ...(spec.idempotencyKey ? { idempotencyKey: spec.idempotencyKey } : {}),
      ...(spec.spawn ? { spawn: spec.spawn } : {}),
      ...(spec.followUp ? { followUp: spec.followUp } : {}),
      ...(spec.flow ? { flow: spec.flow } : {}),
      label: spec.label,
    };
    const active: ActiveRun = { record };
    const laneKey = laneKeyOf(record);
    let worker = this.claimAtOnce(active);
    /** This run's step in its lane's order here, open until its place is known. */
    let placed: (() => void) | undefined;
    /** One instance, not started at once: the lane's previous step, to be queued after it. */
    let after: Promise<void> | undefined;
    if (!worker && !this.cluster) {
      // Queued only after its writes. Until then a slot freeing up must not start a later run of the
      // lane at once (it would overtake this one: `claimAtOnce` sees no holder and no queued run),
      // and a later run must not reach the queue first.
      after = this.laneOrder.get(laneKey);
      let settle!: () => void;
      const place = new Promise<void>((resolve) => (settle = resolve));
      void this.inLaneOrder(laneKey, () => place);
      placed = settle;
    }
    if (worker && this.cluster) {
      // Several instances: the lane is taken cluster-wide too, before anything is written. Runs of
      // the lane accepted here meanwhile wait for the outcome (`inLaneOrder`).
      let settle!: () => void;
      const place = new Promise<void>((resolve) => (settle = resolve));
      void this.inLaneOrder(laneKey, () => place);
      placed = settle;
      let taken: boolean;
      try {
        taken = await this.cluster.claimAtOnce(record);
      } catch (error) {
        placed();
        this.unclaim(active, worker);
        throw error;
      }
      if (taken) {
        placed();
        placed = undefined;
      } else {
        // Another instance's run holds the lane, or runs accepted before this one wait in the
        // cluster's queue: this one joins the queue behind them, as one no worker here could take.
        // Its worker slot is free again at once; the lane's order here waits until it is queued.
        this.unclaim(active, worker);
        record.status = "queued";
        delete record.startedAt;
        record.attempts = 0;
        worker = undefined;
      }
    }
    try {
      // The run record goes first: a crash between the two writes leaves a run whose input is
      // missing (recovery writes it, or ends it when it was stored `running`), never an input
      // without a run (a retry would duplicate it). Insert-only: the store refuses it if the
      // session was archived since the read above, on this instance or another (NOT_FOUND).
      const stored = this.store.runs.put(record, { expectedVersion: 0 });
      spec.onCreate?.(record);
      try {
        await stored;
      } catch (error) {
        if (worker) {
          this.unclaim(active, worker);
          // Its cluster claim too, which `claimAtOnce` took.
          await this.cluster?.release(record).catch(() => undefined);
        }
        throw error;
      }
      // Stored: the run's span starts, as a child of the call that created it (the async context).
      this.telemetry?.created(record);
      // Issued first: its append takes the session's lock now, so every later entry of the run
      // (its reply, its tool calls) lands after the input.
      const input = spec.recordInput === false ? undefined : this.recordInput(record, spec.label);
      if (worker) {
        // Claimed: the worker gets the run while its input is written (one fsync less on the path
        // of a send). The run cannot end before the input is durable (`complete` waits for it), and a
        // crash before that leaves it `running`, which ends `error` at restart.
        if (record.status === "running" && active.worker === worker) {
          this.armTimeout(active);
          void this.started(active, worker, entry).catch((error) => this.dispatchFailed(active, error));
        }
      }
      if (input) {
        const written = input.catch(async (error: unknown) => {
          // Rolled back: the caller gets the error and no run is left waiting for an input that
          // was never written (the record ends `error`, so a restart does not start it either).
          await this.finish(record, "error", {
            error: `the input could not be recorded: ${(error as Error).message}`,
          }).catch((finishError) =>
            this.log.error({ err: finishError, runId }, "could not roll back a run without input"),
          );
          throw error;
        });
        if (worker) this.inputsPending.set(runId, written);
        try {
          await written;
        } finally {
          this.inputsPending.delete(runId);
        }
      }
      if (worker) return record;
      if (this.cluster) {
        // Several instances: a run that did not start at once waits in the cluster's queue, never
        // here (where a run of its lane queued from another instance before it could be overtaken),
        // for a free worker of its agent on any instance. Its place there is taken before the caller
        // hears the run was accepted, so runs a client sends one after another keep their order, and
        // runs of one lane accepted here go there one after another.
        const queued = async () => {
          this.handOffNow(active);
          await this.handingOff.get(runId);
        };
        if (placed) {
          await queued();
        } else {
          await this.inLaneOrder(laneKey, queued);
        }
        return record;
      }
      if (after) await after;
      this.active.add(active);
      this.armTimeout(active);
      this.queue(record);
      this.pump(laneKey);
      return record;
    } finally {
      placed?.();
    }
  }

  /**
   * Runs `step` after the earlier steps of the lane on this instance, so runs reach their queue in
   * the order this instance accepted them: one instance's lane queue, or, on several, a run's cluster
   * claim at creation or its hand-off to the cluster's queue.
   */
  private inLaneOrder(laneKey: string, step: () => Promise<void>): Promise<void> {
    const before = this.laneOrder.get(laneKey) ?? Promise.resolve();
    const result = before.then(step);
    const link = result.catch(() => undefined);
    this.laneOrder.set(laneKey, link);
    void link.then(() => {
      if (this.laneOrder.get(laneKey) === link) this.laneOrder.delete(laneKey);
    });
    return result;
  }

  /**
   * With the run's lane idle and a worker slot free right now, claims both before the run's first
   * write, so the record is stored `running` at once: one run-record write instead of two (queued,
   * then running). At-most-once still holds: a run found `running` at restart ends `error`, whether
   * or not its input was written.
   */
  private claimAtOnce(active: ActiveRun): Connection | undefined {
    const record = active.record;
    const laneKey = laneKeyOf(record);
    if (this.stopping || this.lanes.holder(laneKey) !== undefined || this.lanes.next(laneKey) !== undefined)
      return undefined;
    // A run of the lane accepted before, on its way to the queue (or the cluster's), goes first.
    if (this.laneOrder.has(laneKey)) return undefined;
    const worker = this.pickWorker(record.agentId);
    if (!worker) return undefined;
    this.lanes.claim(laneKey, record.runId);
    active.worker = worker;
    this.workers.take(worker, record.runId);
    record.status = "running";
    record.startedAt = Date.now();
    record.attempts = 1;
    // Known at once, so `finish` (a failed input, a timeout) frees the slot and the lane.
    this.active.add(active);
    return worker;
  }

  /** The first write failed: the claim is given back, as if the run had never been created. */
  private unclaim(active: ActiveRun, worker: Connection): void {
    const record = active.record;
    const laneKey = laneKeyOf(record);
    this.active.delete(record.runId);
    this.workers.release(worker, record.runId);
    this.lanes.release(laneKey, record.runId);
    this.pump(laneKey);
    this.pumpStarved(this.workers.agentsOf(worker) ?? [record.agentId]);
  }

  /**
   * Writes the run's input into the transcript the run was made for only: a reset since began one
   * whose taint may be below the input's label, and its next run would be handed the input. The
   * run then fails (the caller hears it), as for any input that could not be recorded.
   */
  private async recordInput(record: RunRecord, label: Level): Promise<void> {
    const input: TranscriptEntryInput = {
      type: "message",
      label,
      runId: record.runId,
      ...(record.provenance ? { provenance: record.provenance } : {}),
      message: { role: "user", content: [{ type: "text", text: record.message }] },
    };
    const written = await this.sessions.appendFor(record.sessionKey, (entry) =>
      entry.sessionId === record.sessionId ? [input] : undefined,
    );
    if (written.length === 0)
      throw new SwitchboardError(
        "CONFLICT",
        `session ${record.sessionKey} was reset or deleted before the run's input was recorded`,
        { retryable: true },
      );
  }

  /** The session row with its taint raised to the run's input label (see `createOn`). */
  private async raisedFor(read: SessionEntry, spec: RunSpec): Promise<SessionEntry> {
    const source =
      spec.provenance.kind === "agent" ? spec.provenance.fromSessionKey : `run input (${spec.origin})`;
    // A reset may land between the rise and the read again: the new row is raised in turn.
    for (let attempt = 0; attempt < 3; attempt++) {
      await this.sessions.raiseTaint(read.key, spec.label, `input of a ${spec.origin} run`, source);
      const entry = await this.sessions.require(read.key);
      if (entry.archivedAt) throw archivedSessionError(spec.sessionKey);
      if (compareLevels(spec.label, entry.taint) <= 0) return entry;
    }
    throw new SwitchboardError("CONFLICT", `session ${read.key} was reset while a run was being made`, {
      retryable: true,
    });
  }

  /** After a crash: write the input of a queued run if the old process died before it did. */
  private async repairInput(record: RunRecord): Promise<void> {
    if (record.origin === "summarize") return;
    const found = await this.store.transcripts.read(record.sessionId, {
      limit: 1,
      filter: (entry) => entry.runId === record.runId && entry.message?.role === "user",
    });
    if (found.entries.length > 0) return;
    const entry = await this.sessions.get(record.sessionKey);
    if (!entry || entry.sessionId !== record.sessionId) return;
    await this.recordInput(record, record.label ?? entry.taint);
  }

  /**
   * `deadlineInMs`: the time the run has left as the cluster's database counts it (a run adopted
   * from the cluster's queue); without it the deadline is its `createdAt` plus its timeout, on this
   * instance's clock (which wrote `createdAt`, unless another instance created the run).
   */
  private armTimeout(active: ActiveRun, deadlineInMs?: number): void {
    const seconds = active.record.timeoutSeconds;
    if (!seconds || seconds <= 0) return;
    const wallNow = Date.now();
    const deadline =
      deadlineInMs === undefined ? active.record.createdAt + seconds * 1000 : wallNow + deadlineInMs;
    active.deadline = deadline;
    // Counted on the monotonic clock: a wall clock set back must not keep the run (and its lane) on.
    const due = monotonicDeadline(deadline, wallNow);
    this.dues.set(active, due);
    const arm = () => {
      active.timer = setTimeout(
        () => {
          // A deadline past setTimeout's range fires early: wait on.
          if (performance.now() < due) return arm();
          void this.finish(active.record, "timeout", { error: `run timed out after ${seconds}s` }).catch(
            (error) => this.log.error({ err: error, runId: active.record.runId }, "timeout handling failed"),
          );
        },
        timerDelay(due, performance.now()),
      );
      active.timer.unref();
    };
    arm();
  }

  private queue(record: RunRecord): void {
    this.lanes.enqueue(laneKeyOf(record), record.runId);
  }

  /** True when a worker serving this agent is connected. */
  hasWorker(agentId: string): boolean {
    // A worker on another instance counts: a run queued here is handed to it.
    return this.workers.count(agentId) > 0 || (this.cluster?.hasRemoteWorker(agentId) ?? false);
  }

  workerCount(agentId: string): number {
    return this.workers.count(agentId);
  }

  /** A connected worker; with `concurrency` it never holds more runs at once, the rest stay queued here. */
  addWorker(connection: Connection, agentIds: Iterable<string>, concurrency?: number): void {
    this.workers.add(connection, agentIds, concurrency);
    for (const laneKey of this.lanes.laneKeys()) this.pump(laneKey);
  }

  /**
   * A worker went away: its runs are reassigned once to another worker of the agent, else fail
   * (protocol.md). While the gateway is stopping, no run is handed to another worker: it stays
   * queued for the next start.
   */
  async removeWorker(connection: Connection): Promise<void> {
    const held = this.workers.remove(connection);
    for (const runId of held) {
      const active = this.active.get(runId);
      if (!active || active.worker !== connection) continue;
      active.worker = undefined;
      try {
        if (active.record.attempts >= 2 || !this.hasWorker(active.record.agentId)) {
          await this.finish(active.record, "error", { error: "worker disconnected" });
          continue;
        }
        const next = this.stopping ? undefined : this.pickWorker(active.record.agentId);
        this.log.info({ runId }, "worker disconnected mid-run; reassigning");
        if (next) await this.dispatch(active, next);
        else if (this.cluster) await this.handBack(active);
        else await this.requeueFront(active);
      } catch (error) {
        this.log.error({ err: error, runId }, "could not reassign the run of a disconnected worker");
        await this.finish(active.record, "error", { error: "worker disconnected" }).catch(() => undefined);
      }
    }
  }

  /**
   * Several instances, every other worker here busy: the run goes back to the head of its lane in the
   * cluster's queue, for the next free worker of any instance; waits for it here follow it there.
   */
  private async handBack(active: ActiveRun): Promise<void> {
    const record = active.record;
    const laneKey = laneKeyOf(record);
    record.status = "queued";
    // Stored first: the instance adopting it stores it `running` again (attempts counted).
    await this.store.runs.put(record);
    if (this.lanes.holder(laneKey) === record.runId) this.lanes.release(laneKey, record.runId);
    const left = this.timeLeft(active);
    this.active.delete(record.runId);
    if (active.timer) clearTimeout(active.timer);
    await this.cluster!.handBack(record, left);
    this.waiters.moved(record.runId);
    this.pump(laneKey);
  }

  /** Every other worker is busy: the run waits at the head of its lane for the next free slot. */
  private async requeueFront(active: ActiveRun): Promise<void> {
    const record = active.record;
    const laneKey = laneKeyOf(record);
    if (this.lanes.holder(laneKey) === record.runId) this.lanes.release(laneKey, record.runId);
    record.status = "queued";
    this.lanes.enqueue(laneKey, record.runId, true);
    await this.store.runs.put(record);
    this.pump(laneKey);
  }

  private pickWorker(agentId: string): Connection | undefined {
    return this.workers.pick(agentId);
  }

  private pump(laneKey: string): void {
    if (this.lanes.holder(laneKey) !== undefined || this.stopping) return;
    const runId = this.lanes.next(laneKey);
    if (runId === undefined) return;
    const active = this.active.get(runId);
    if (!active) {
      this.lanes.skip(laneKey);
      this.pump(laneKey);
      return;
    }
    const worker = this.pickWorker(active.record.agentId);
    if (!worker) {
      if (this.cluster && this.workers.count(active.record.agentId) === 0) {
        this.handOff(laneKey, active);
        return;
      }
      this.workers.starve(active.record.agentId, laneKey);
      return;
    }
    this.lanes.claim(laneKey, runId);
    void this.dispatch(active, worker).catch((error) => this.dispatchFailed(active, error));
  }

  /**
   * The time a run has left before its timeout, on this process's clocks (undefined: none): from
   * its armed timer, else from its `createdAt`. Only this duration crosses to the cluster, whose
   * database keeps the deadline on its own clock.
   */
  private timeLeft(active: ActiveRun): number | undefined {
    const seconds = active.record.timeoutSeconds;
    if (!seconds || seconds <= 0) return undefined;
    const due = this.dues.get(active);
    if (due !== undefined) return due - performance.now();
    return active.record.createdAt + seconds * 1000 - Date.now();
  }

  /** The run leaves this instance for the cluster's queue (waits here are answered from its events). */
  private handOffNow(active: ActiveRun): void {
    const runId = active.record.runId;
    const left = this.timeLeft(active);
    // Counted by the cluster from here on (`queuedLoad`), in the same synchronous step.
    this.active.delete(runId);
    if (active.timer) clearTimeout(active.timer);
    // The cluster tracks the run's end from here on (synchronously, before its first write), so a
    // wait started here before it left follows it there.
    const handing = this.cluster!.handOff(active.record, left).catch((error) =>
      this.dispatchFailed(active, error),
    );
    this.waiters.moved(runId);
    this.handingOff.set(runId, handing);
    void handing.then(() => this.handingOff.delete(runId));
  }

  /**
   * No worker of the run's agent is connected here: the run leaves this instance and waits in the
   * cluster's queue for a worker on any instance (which adopts it). Waits for it here are answered
   * from the cluster's events.
   */
  private handOff(laneKey: string, active: ActiveRun): void {
    this.lanes.skip(laneKey);
    this.handOffNow(active);
    this.pump(laneKey);
  }

  /**
   * A run from the cluster's queue, claimed for this instance: handed to a free local worker of its
   * agent. False when none is free any more or its lane is busy here (the caller hands it back).
   */
  adopt(
    record: RunRecord,
    options: {
      started?: boolean;
      session?: { session: SessionEntry | undefined };
      /** The time it has left, as the cluster's database counts it (see `armTimeout`). */
      deadlineInMs?: number;
    } = {},
  ): boolean {
    if (this.stopping || TERMINAL_RUN_STATUSES.includes(record.status)) return false;
    const laneKey = laneKeyOf(record);
    if (this.lanes.holder(laneKey) !== undefined || this.active.get(record.runId)) return false;
    const worker = this.pickWorker(record.agentId);
    if (!worker) return false;
    const active: ActiveRun = { record };
    this.active.add(active);
    this.armTimeout(active, options.deadlineInMs);
    this.lanes.claim(laneKey, record.runId);
    void this.dispatch(active, worker, options.started, options.session).catch((error) =>
      this.dispatchFailed(active, error),
    );
    return true;
  }

  /** Agents with a worker connected here. */
  connectedAgents(): string[] {
    return this.workers.agentIds();
  }

  /** Agents with a worker slot free here (what this instance may adopt from the cluster's queue). */
  agentsWithFreeSlot(): string[] {
    return this.workers.agentIds().filter((agentId) => this.pickWorker(agentId) !== undefined);
  }

  private dispatchFailed(active: ActiveRun, error: unknown): void {
    const runId = active.record.runId;
    this.log.error({ err: error, runId }, "dispatch failed");
    void this.finish(active.record, "error", {
      error: `dispatch failed: ${(error as Error).message}`,
    }).catch((finishError) => this.log.error({ err: finishError, runId }, "could not end the run"));
  }

  /** A worker slot came free: lanes that waited for one get it, oldest first. */
  private pumpStarved(agentIds: Iterable<string>): void {
    for (const agentId of agentIds) {
      for (const laneKey of this.workers.starvedLanes(agentId)) {
        if (!this.pickWorker(agentId)) break;
        this.workers.unstarve(agentId, laneKey);
        this.pump(laneKey);
      }
    }
  }

  /**
   * `stored`: the record is stored `running` already (a cluster claim did it, see `adopt`), which
   * also read the session's row (`known`).
   */
  private async dispatch(
    active: ActiveRun,
    worker: Connection,
    stored = false,
    known?: { session: SessionEntry | undefined },
  ): Promise<void> {
    const record = active.record;
    // The slot is taken before the first await, so concurrent pumps see the worker's true load.
    active.worker = worker;
    this.workers.take(worker, record.runId);
    const { gone, entry } = await this.sessionCheck(record, known);
    // Its timeout may have fired during the read: `finish` freed the slot and the lane and told the
    // waiters, and writing `running` now would bring the ended run back (and hand it to the worker).
    if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
    if (gone !== undefined) {
      await this.finish(record, "error", { error: gone });
      return;
    }
    if (!stored) {
      record.status = "running";
      record.startedAt ??= Date.now();
      record.attempts += 1;
      await this.store.runs.put(record);
    }
    if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
    // The row read for the check above goes on to `run.assigned`, which reads it no more.
    await this.started(active, worker, entry);
  }

  /**
   * The run is stored `running`: announce it and hand it to its worker. `session`: the run's
   * session row if the caller read it just before (`run.assigned` then reads it no more).
   */
  private async started(active: ActiveRun, worker: Connection, session?: SessionEntry): Promise<void> {
    const record = active.record;
    if (this.cluster) {
      await this.cluster.claim(record);
      // Ended (timed out) while another instance's run held the lane.
      if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
    }
    this.telemetry?.started(record);
    this.bus.publish(
      "run.started",
      {
        runId: record.runId,
        sessionKey: record.sessionKey,
        agentId: record.agentId,
        lane: record.lane,
        startedAt: record.startedAt ?? Date.now(),
      },
      { sessionKey: record.sessionKey, agentId: record.agentId },
    );
    await this.assign(record, worker, active.deadline, session);
  }

  /** The worker connection currently executing the run, checked against the caller. */
  requireHeldBy(runId: string, connection: Connection): RunRecord {
    const active = this.active.get(runId);
    if (!active || active.worker !== connection || active.record.status !== "running") {
      throw new SwitchboardError("FORBIDDEN", `run ${runId} is not held by this worker`, {
        details: { runId },
      });
    }
    return active.record;
  }

  async complete(runId: string, connection: Connection, reply: string, usage?: Usage): Promise<void> {
    // A run handed out while its input was being written ends only after it is durable (or, when
    // it failed, the run has ended `error` and this is refused).
    await this.inputsPending.get(runId)?.catch(() => undefined);
    const record = this.requireHeldBy(runId, connection);
    const entry = await this.sessions.get(record.sessionKey);
    // A reset on another instance ends only that instance's runs (and one here ends those it finds
    // active): a run of the old transcript learns of it now, before its reply — or its error, also
    // the worker's text — could be taken in at the new transcript's lower taint.
    if (entry && entry.sessionId !== record.sessionId) {
      await this.finish(record, "error", { error: RESET_WHILE_RUNNING });
      return;
    }
    await this.finish(record, "ok", { reply, ...(usage ? { usage } : {}), ...endLabelOf(record, entry) });
  }

  async fail(runId: string, connection: Connection, error: string): Promise<void> {
    await this.inputsPending.get(runId)?.catch(() => undefined);
    const record = this.requireHeldBy(runId, connection);
    const entry = await this.sessions.get(record.sessionKey);
    if (entry && entry.sessionId !== record.sessionId) {
      await this.finish(record, "error", { error: RESET_WHILE_RUNNING });
      return;
    }
    await this.finish(record, "error", { error, ...endLabelOf(record, entry) });
  }

  /** Ends a run once: persists, records the reply, wakes waiters, frees the lane, notifies flows. */
  async finish(
    record: RunRecord,
    status: "ok" | "error" | "timeout",
    outcome: {
      reply?: string;
      error?: string;
      usage?: Usage;
      lost?: RunRecord["lost"];
      endLabel?: Level;
    },
  ): Promise<void> {
    if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
    record.status = status;
    record.endedAt = Date.now();
    if (outcome.reply !== undefined) record.reply = outcome.reply;
    if (outcome.error !== undefined) record.error = outcome.error;
    if (outcome.endLabel !== undefined) record.endLabel = outcome.endLabel;
    if (outcome.lost !== undefined) record.lost = outcome.lost;
    if (outcome.usage) record.usage = outcome.usage;
    if (INPUT_DROPPED_AT_END.has(record.origin)) record.message = endedInput(record.message);
    const active = this.active.get(record.runId);
    if (active?.timer) clearTimeout(active.timer);
    active?.ending?.abort(
      new SwitchboardError("CONFLICT", `run ${record.runId} ended (${status}) while this call was in flight`),
    );
    const freedWorker = active?.worker;
    if (freedWorker) this.workers.release(freedWorker, record.runId);
    const laneKey = laneKeyOf(record);
    // A lane emptied by timeouts while no worker came must not linger in the starved set.
    if (this.lanes.release(laneKey, record.runId)) this.workers.unstarve(record.agentId, laneKey);

    // The transcript entry and the run record are written side by side (one group-commit round, not
    // two), and both are awaited before anyone hears of the end. A crash in that round keeps either,
    // both or neither: a run found `running` at restart ends `error`; an ended run whose transcript
    // entry was lost still answers `agent.wait` from its record. Several instances: the record
    // first, since it is written only if this instance still holds the run.
    let recorded = this.cluster ? undefined : this.recordEnd(record, status, outcome);
    const saving = this.saveEnd(record);
    if (recorded) {
      // Waiters hear the end as soon as its writes are issued, with their settling to hold their
      // answers for: a waiting send records its own toolCall/toolResult in the same group commit
      // as the reply (one durable round less on its path), and answers once both are durable.
      const settled = Promise.allSettled([saving, recorded]).then(() => undefined);
      if (active) active.endSettled = settled;
      this.waiters.ended(record, settled);
    }
    // The end is announced, waiters woken and the lane freed even when the store refuses the write
    // (disk full): the caller still hears about the failure, and nothing waits forever.
    let persistError: unknown;
    try {
      if (!(await saving)) {
        await this.droppedEnd(record, laneKey, freedWorker);
        return;
      }
    } catch (error) {
      persistError = error;
      this.log.error({ err: error, runId: record.runId }, "could not persist the end of a run; retrying");
      this.active.keepUnsaved(record);
      this.retryUnsaved();
    }
    recorded ??= this.recordEnd(record, status, outcome);
    const replyLabel = await recorded;
    const end: RunEnd = replyLabel ? { replyLabel } : {};
    this.active.delete(record.runId);
    this.bus.publish("run.ended", runEndedPayload(record, status), {
      sessionKey: record.sessionKey,
      agentId: record.agentId,
    });
    this.waiters.ended(record);
    const notify = () =>
      this.telemetry
        ? this.telemetry.ended(record, () => this.notifyEnded(record, end))
        : this.notifyEnded(record, end);
    let notified: Promise<void> | undefined;
    if (this.cluster) {
      // Flows hear of the end before the release's round trip, as they do without a cluster: a wait
      // answered above is never ahead of the flows the end starts (reply delivery, announce), so a
      // `flows.idle()` after it (shutdown, tests) covers them.
      notified = notify();
      // The lane is free cluster-wide before its next run here claims it (no claim retry).
      await this.releaseInCluster(record);
    }
    this.pump(laneKey);
    if (freedWorker) this.pumpStarved(this.workers.agentsOf(freedWorker) ?? [record.agentId]);
    await (notified ?? notify());
    if (persistError !== undefined) throw persistError;
  }

  /**
   * This instance was declared lost (its lease ran out while it was cut off or stalled): the
   * cluster has put the runs it held back in their lanes or ended them. They are let go here, not
   * ended (their ends belong to the cluster now): their workers' tool calls and ends are refused
   * from now on (`requireHeldBy`), so a run reassigned elsewhere never acts twice through this
   * instance, and waiters here wait for it elsewhere. Returns how many were let go.
   */
  abandonHeld(): number {
    let count = 0;
    for (const active of [...this.active.all()]) {
      const { record, worker } = active;
      if (!worker || record.status !== "running") continue;
      count++;
      if (active.timer) clearTimeout(active.timer);
      active.ending?.abort(
        new SwitchboardError("CONFLICT", `run ${record.runId} was taken over by another gateway instance`),
      );
      this.active.delete(record.runId);
      // Its end is the cluster's now: its span here ends, or it would stay open until shutdown.
      this.telemetry?.dropped(record);
      this.workers.release(worker, record.runId);
      const laneKey = laneKeyOf(record);
      if (this.lanes.release(laneKey, record.runId)) this.workers.unstarve(record.agentId, laneKey);
      this.waiters.moved(record.runId);
      this.pump(laneKey);
      this.pumpStarved(this.workers.agentsOf(worker) ?? [record.agentId]);
    }
    return count;
  }

  /**
   * Frees an ended run's lane cluster-wide. A claim left behind (the database out for a moment)
   * would hold the lane for every instance: no sweep takes the claims of a live instance. So a
   * failed release is tried again in the background, backing off to every 30 s, until it goes
   * through or this instance stops (then the claims go with its lease).
   */
  private async releaseInCluster(record: RunRecord, attempt = 0): Promise<void> {
    try {
      await this.cluster!.release(record);
    } catch (error) {
      if (attempt === 0 || attempt % 10 === 0)
        this.log.warn(
          { err: error, runId: record.runId, attempt },
          "could not release a run's lane; trying again",
        );
      if (this.stopping) return;
      const timer = setTimeout(
        () => void this.releaseInCluster(record, attempt + 1),
        Math.min(30_000, 250 * 2 ** Math.min(attempt, 7)),
      );
      timer.unref();
    }
  }

  /**
   * Writes a run's end. Several instances: only while this instance holds the run — one cut off
   * from the database past its lease had its runs reassigned or ended by the others, and a result
   * its worker delivers late must not overwrite theirs (false: not written).
   */
  private async saveEnd(record: RunRecord): Promise<boolean> {
    if (!this.cluster) {
      await this.store.runs.put(record);
      return true;
    }
    const kept = await this.cluster.end(record);
    if (!kept) {
      this.log.warn(
        { runId: record.runId, status: record.status },
        "late end of a run dropped: this instance no longer holds the run (it was declared lost while cut off, and the run was reassigned or ended elsewhere)",
      );
    }
    return kept;
  }

  /**
   * A late end that was not written: the run is no longer this instance's. Its local lane and
   * worker are free; waiters here hear the end the cluster stored (or time out, and wait again on
   * the cluster's events like for any run held elsewhere).
   */
  private async droppedEnd(
    record: RunRecord,
    laneKey: string,
    freedWorker: Connection | undefined,
  ): Promise<void> {
    this.active.delete(record.runId);
    this.telemetry?.dropped(record);
    const stored = await this.store.runs.get(record.runId).catch(() => undefined);
    if (stored && TERMINAL_RUN_STATUSES.includes(stored.status)) this.waiters.ended(stored);
    this.pump(laneKey);
    if (freedWorker) this.pumpStarved(this.workers.agentsOf(freedWorker) ?? [record.agentId]);
  }

  /**
   * The run's end in its session's transcript: the reply, or an event saying how it ended. Resolves
   * with the label the reply was written with (undefined: none written).
   */
  private async recordEnd(
    record: RunRecord,
    status: "ok" | "error" | "timeout",
    outcome: { reply?: string; error?: string; usage?: Usage },
  ): Promise<Level | undefined> {
    let replyLabel: Level | undefined;
    try {
      // Into the transcript the run was started in (not one a reset began since), the reply labelled
      // with the session's taint as it is when the entry is written.
      if (status === "ok" && outcome.reply !== undefined && record.origin !== "summarize") {
        const reply = outcome.reply;
        const tokens = outcome.usage ? outcome.usage.inputTokens + outcome.usage.outputTokens : 0;
        await this.sessions.appendFor(
          record.sessionKey,
          (entry) => {
            if (entry.sessionId !== record.sessionId) return undefined;
            replyLabel = entry.taint;
            return [
              {
                type: "message",
                label: entry.taint,
                runId: record.runId,
                message: { role: "assistant", content: [{ type: "text", text: reply }] },
              },
            ];
          },
          // Added by the store to the row as it is then, so concurrent ends never lose tokens.
          tokens ? { addTokens: tokens } : {},
        );
      } else if (status !== "ok") {
        await this.sessions.appendFor(record.sessionKey, (entry) =>
          entry.sessionId !== record.sessionId
            ? undefined
            : [
                {
                  type: "event",
                  label: "PUBLIC",
                  runId: record.runId,
                  event: { name: "run.ended", data: { status, error: outcome.error ?? "" } },
                },
              ],
        );
      }
    } catch (error) {
      this.log.warn({ err: error, runId: record.runId }, "could not record run end in transcript");
      return undefined;
    }
    return replyLabel;
  }

  private async notifyEnded(record: RunRecord, end: RunEnd): Promise<void> {
    for (const listener of this.endedListeners) {
      try {
        await listener(record, end);
      } catch (error) {
        this.log.error({ err: error, runId: record.runId }, "run-ended listener failed");
      }
    }
  }

  private retryUnsaved(): void {
    if (this.unsavedTimer) return;
    this.unsavedTimer = setTimeout(() => {
      this.unsavedTimer = undefined;
      void (async () => {
        for (const record of this.active.unsavedRecords()) {
          await this.saveEnd(record);
          this.active.saved(record.runId);
        }
      })().catch(() => this.retryUnsaved());
    }, UNSAVED_RETRY_MS);
    this.unsavedTimer.unref();
  }

  /** Waits for a run's end up to `timeoutMs`; answers at once for ended runs (also across restarts). */
  async wait(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<WaitResult> {
    const { result, settled } = await this.waitIssued(runId, timeoutMs, signal);
    await settled;
    return result;
  }

  /**
   * `wait`, answering as soon as the end's writes are issued: `settled` (when present) settles once
   * they are durable or failed, and whatever the caller answers from `result` must wait for it.
   */
  async waitIssued(
    runId: string,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<{ result: WaitResult; settled?: Promise<void> }> {
    const active = this.active.get(runId);
    if (active?.endSettled) return { result: toWaitResult(active.record), settled: active.endSettled };
    if (!active) return { result: await this.waitInactive(runId, timeoutMs, signal) };
    const until = Date.now() + timeoutMs;
    const outcome = await this.waiters.wait(runId, timeoutMs, signal);
    // Handed to another instance meanwhile: its end comes from there.
    if ("moved" in outcome)
      return { result: await this.waitInactive(runId, Math.max(0, until - Date.now()), signal) };
    if ("ended" in outcome) {
      const result = toWaitResult(outcome.ended);
      return outcome.settled ? { result, settled: outcome.settled } : { result };
    }
    return { result: { runId, status: "timeout", error: outcome.stopped, stillRunning: true } };
  }

  private async waitInactive(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<WaitResult> {
    const unsaved = this.active.unsaved(runId);
    // Not held here: the cluster's wait reads the run itself, after subscribing to its end.
    if (this.cluster && !unsaved) return this.cluster.wait(runId, timeoutMs, signal);
    const stored = unsaved ?? (await this.store.runs.get(runId));
    if (!stored) throw new SwitchboardError("NOT_FOUND", `run not found: ${runId}`, { details: { runId } });
    if (!TERMINAL_RUN_STATUSES.includes(stored.status)) {
      // Held by another instance (or queued there): its end comes through the cluster's events.
      if (this.cluster) return this.cluster.wait(runId, timeoutMs, signal);
      // Ended between the two lookups, or not yet active after recovery: poll once via the store.
      return { runId, status: "timeout", error: "run has not ended yet", stillRunning: true };
    }
    return toWaitResult(stored);
  }

  /** Spawned runs of a requester that have not ended yet (for `maxChildren`). */
  activeSpawnsOf(requesterKey: string): number {
    let count = 0;
    for (const active of this.active.all())
      if (active.record.spawn?.requesterKey === requesterKey) count += 1;
    return count;
  }

  /** Every run of this process not ended yet (for `runs.list`). */
  activeRecords(): RunRecord[] {
    return this.active.all().map((active) => active.record);
  }

  /** Runs of a session waiting in its lanes (for session_status: "queued, no worker"). */
  queuedFor(sessionKey: string): number {
    return this.lanes.queuedUnder(`${sessionKey}|`);
  }

  /**
   * Whether a run of the session is still to come from this process: executing, waiting in a lane,
   * or being created. Synchronous, so a caller can act on the answer before anything else runs.
   */
  hasRunsToComeOn(sessionKey: string): boolean {
    return (
      this.activeRunFor(sessionKey) !== undefined ||
      this.queuedFor(sessionKey) > 0 ||
      this.active.creatingOn(sessionKey)
    );
  }

  /** The run currently executing on a session, if any (for session_status). */
  activeRunFor(sessionKey: string): RunRecord | undefined {
    const runId = this.lanes.holderUnder(`${sessionKey}|`);
    return runId === undefined ? undefined : this.active.get(runId)?.record;
  }

  /**
   * What `session_status` shows of a session's runs: the one executing and how many wait. Several
   * instances: a run held by another instance, and runs in the cluster's queue, are read from the
   * store (this process knows only its own).
   */
  async runsOf(sessionKey: string): Promise<{ running?: RunRecord; queued: number }> {
    const running = this.activeRunFor(sessionKey);
    const queued = this.queuedFor(sessionKey);
    if (!this.cluster) return { ...(running ? { running } : {}), queued };
    const stored = await this.store.runs.list({ sessionKey, statuses: ["running", "queued"], limit: 200 });
    const elsewhere = running ?? stored.find((run) => run.status === "running");
    return {
      ...(elsewhere ? { running: elsewhere } : {}),
      queued: Math.max(queued, stored.filter((run) => run.status === "queued").length),
    };
  }

  /**
   * Ends `error` the runs executing here for `sessionKey` that belong to an earlier transcript than
   * `sessionId` (a reset began a new one). What they read was under the old taint, and the new
   * transcript starts PUBLIC, so letting them go on would launder it. The worker's later
   * `run.complete` and tool calls are then refused (the run is no longer held). Queued runs of the
   * old transcript end when they come up (`sessionCheck`), with their own reason.
   */
  async endRunsBefore(sessionKey: string, sessionId: string, error: string): Promise<number> {
    const doomed = this.active
      .all()
      .map((active) => active.record)
      .filter(
        (record) =>
          record.sessionKey === sessionKey && record.sessionId !== sessionId && record.status === "running",
      );
    for (const record of doomed) {
      await this.finish(record, "error", { error }).catch((failure) =>
        this.log.error({ err: failure, runId: record.runId }, "could not end a run of a reset session"),
      );
    }
    return doomed.length;
  }

  /**
   * The first step of a stop: no run is handed to a worker any more (queued runs stay queued, for
   * the next start) and new runs are refused; running runs go on until `stop`.
   */
  stopDispatching(): void {
    this.stopping = true;
  }

  /** Stop dispatching; runs still active end `error` so nothing waits forever. */
  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.unsavedTimer);
    for (const record of this.active.unsavedRecords()) {
      const runId = record.runId;
      await this.saveEnd(record).then(
        () => this.active.saved(runId),
        (error) => this.log.error({ err: error, runId }, "the end of a run is not durable"),
      );
    }
    for (const active of this.active.all()) {
      if (active.record.status === "running") {
        await this.finish(active.record, "error", { error: LOST_AT_SHUTDOWN, lost: "shutdown" }).catch(
          (error) =>
            this.log.error({ err: error, runId: active.record.runId }, "could not end a run at shutdown"),
        );
      } else if (active.timer) {
        clearTimeout(active.timer);
      }
    }
  }
}

const UNSAVED_RETRY_MS = 2_000;

/**
 * The run an idempotency key already names, for a spec of the same session: one key is one input,
 * so the same key sent to another session is refused, not answered with the first session's run.
 */
function sameSession(record: RunRecord, spec: Pick<RunSpec, "sessionKey" | "idempotencyKey">): RunRecord {
  if (record.sessionKey !== spec.sessionKey)
    throw new SwitchboardError(
      "CONFLICT",
      `idempotencyKey: already used for a run of another session (${record.sessionKey})`,
      { details: { field: "idempotencyKey", runId: record.runId } },
    );
  return record;
}

/** The errors of runs that ended with their process rather than by their worker's answer. */
const LOST_AT_RESTART = "gateway restarted";
const LOST_AT_SHUTDOWN = "gateway shutting down";

/** Several instances: how a run of an instance that was lost ends (its worker never answered here). */
export function lostInstanceError(instance: string, detail = ""): string {
  return `gateway instance ${instance} was lost while running the run${detail}`;
}

/**
 * A run ended because its process stopped or died (its worker never gave an answer). Told by the
 * record's `lost`, which only the gateway sets: a worker failing a run with the same words as the
 * gateway's (`run.fail` with "gateway restarted") must not have its flow step made twice.
 */
export function isLostWithProcess(record: Pick<RunRecord, "status" | "lost"> | undefined): boolean {
  return record?.status === "error" && record.lost !== undefined;
}

function laneKeyOf(record: Pick<RunRecord, "sessionKey" | "lane" | "origin">): string {
  // Summaries are isolated runs: they must never queue behind (or block) the session's own lanes.
  return record.origin === "summarize"
    ? `${record.sessionKey}|summary`
    : `${record.sessionKey}|${record.lane}`;
}

/**
 * A run's `run.ended` event: everything a wait answers with, so an instance waiting for a run that
 * another one ended needs no read of the record.
 */
export function runEndedPayload(
  record: RunRecord,
  status: "ok" | "error" | "timeout",
): EventPayload<"run.ended"> {
  return {
    runId: record.runId,
    sessionKey: record.sessionKey,
    status,
    ...(record.reply !== undefined ? { reply: record.reply } : {}),
    ...(record.error !== undefined ? { error: record.error } : {}),
    ...(record.endLabel !== undefined ? { label: record.endLabel } : {}),
    ...(record.usage ? { usage: record.usage } : {}),
    ...(record.startedAt !== undefined ? { startedAt: record.startedAt } : {}),
    ...(record.endedAt !== undefined ? { endedAt: record.endedAt } : {}),
  };
}

/** The wait result a `run.ended` event carries; undefined for one without `endedAt` (older instances). */
export function waitResultOfEnded(payload: EventPayload<"run.ended">): WaitResult | undefined {
  if (payload.endedAt === undefined) return undefined;
  const { label, ...rest } = payload;
  return toWaitResult(label !== undefined ? { ...rest, endLabel: label } : rest);
}

/**
 * The label a run's reply or error is taken in at, at the least (`RunRecord.endLabel`): absent when
 * the session is gone or a reset began another transcript (the run's end is then the gateway's).
 */
function endLabelOf(record: RunRecord, entry: SessionEntry | undefined): { endLabel?: Level } {
  return entry && entry.sessionId === record.sessionId ? { endLabel: entry.taint } : {};
}

/** What a wait answers for a run record (a run not ended yet reads as `timeout`). */
export function toWaitResult(
  record: Pick<RunRecord, "runId" | "reply" | "error" | "endLabel" | "startedAt" | "endedAt"> & {
    status: string;
  },
): WaitResult {
  const status =
    record.status === "ok" || record.status === "error" || record.status === "timeout"
      ? record.status
      : "timeout";
  return {
    runId: record.runId,
    status,
    ...(record.reply !== undefined ? { reply: record.reply } : {}),
    ...(record.error !== undefined ? { error: record.error } : {}),
    ...(record.endLabel !== undefined ? { label: record.endLabel } : {}),
    ...(record.startedAt !== undefined ? { startedAt: record.startedAt } : {}),
    ...(record.endedAt !== undefined ? { endedAt: record.endedAt } : {}),
  };
}
