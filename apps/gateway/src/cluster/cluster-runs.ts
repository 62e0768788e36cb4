import { createHash } from "node:crypto";
import {
  type EventPayload,
  type RunRecord,
  type SessionEntry,
  type Store,
  SwitchboardError,
  TERMINAL_RUN_STATUSES,
  timerDelay,
} from "@switchboard/core";
import type { Cluster, ClusterRunLanes, LostRun } from "@switchboard/store-pg";
import type { Logger } from "pino";
import { KeyedCounts } from "../keyed-counts";
import { type RunLoad, runInputBytes } from "../ports/active-runs";
import type { EventLog } from "../ports/event-log";
import {
  lostInstanceError,
  runEndedPayload,
  toWaitResult,
  type WaitResult,
  waitResultOfEnded,
} from "../run-scheduler";

/** How often a run waiting for its lane (held by another instance) tries the claim again. */
const CLAIM_RETRY_MS = 25;
/** Safety-net poll of the cluster's queue (a wake-up lost with a half-open listener connection). */
const PULL_POLL_MS = 1000;
const PARALLEL_DRAINS = 4;
/** Wake-up names kept for runs not yet tried here (see `wakeups`). */
const MAX_WAKEUPS = 10_000;
/** How long the end of a run this instance handed off is kept for waits that come late. */
const HANDED_OFF_KEEP_MS = 5_000;
/** How long a run of a lost instance waits in the queue for another worker before it fails. */
const REASSIGN_WAIT_MS = 1500;
/**
 * A wait for a run held elsewhere re-reads its record after this long without its `run.ended`, then
 * at doubling intervals up to `WAIT_REREAD_MAX_MS`: an end whose event was never published (the log
 * refused the write, or the instance died between the record and the event) is found within that.
 * A wait the event answers sooner costs no read.
 */
const WAIT_REREAD_FIRST_MS = 1_000;
const WAIT_REREAD_MAX_MS = 5_000;
/**
 * How long an end found by a re-read waits for its event before it answers: the event goes out once
 * the run's transcript entry is written too (after the record), so while it can still come, it does
 * the answering, and a caller reading the history after its wait finds the reply there.
 */
const WAIT_EVENT_GRACE_MS = 1_000;
/**
 * How long an `ok` end found by a re-read waits for its reply's transcript entry: the writer may be
 * slow (lock contention, a group-commit backlog) or gone for good (it died between the two writes).
 */
const WAIT_REPLY_PATIENCE_MS = 10_000;
/**
 * How long a wait gives its first read of the run's record (where it is, whether it ended) at the
 * least, when its own time is shorter: a wait of 0 ms still answers from the record. Past that, and
 * past the wait's time, the wait answers UNAVAILABLE rather than hang on a database that stalls
 * (the pool's own read timeout is the statement timeout plus 5 s: 35 s by default).
 */
const WAIT_FIRST_READ_MIN_MS = 2_000;
/**
 * A run handed off from here whose end was not heard after this long is looked up in the store
 * (its `run.ended` may have been lost: the log refused it, or its instance died before publishing
 * it), so it stops counting against this instance's limits (`queuedLoad`). One read for all of them.
 */
const UNHEARD_CHECK_MS = 10_000;
const UNHEARD_CHECK_BATCH = 1_000;

/** A handed-off run's weight against this instance's limits, while counted (see `queuedLoad`). */
interface Weight {
  sessionKey: string;
  bytes: number;
  /** Monotonic time it was counted from. */
  since: number;
}

/** A run this instance handed to the cluster's queue (see `ClusterRuns.handedOff`). */
interface HandedOff {
  ended?: WaitResult;
  until: number;
  /** Set while it counts against this instance's limits. */
  weight?: Weight | undefined;
}

/**
 * The time a run created on this instance has left before its timeout, on this instance's clock
 * (which wrote its `createdAt`); undefined when it has none.
 */
function timeLeftOf(record: RunRecord): number | undefined {
  const seconds = record.timeoutSeconds;
  if (!seconds || seconds <= 0) return undefined;
  return record.createdAt + seconds * 1000 - Date.now();
}

/** A wait whose caller went away before anything was known. */
function cancelled(runId: string): WaitResult {
  return { runId, status: "timeout", error: "the wait was cancelled", stillRunning: true };
}

/** What the cluster asks of this instance's scheduler. */
export interface LocalRuns {
  agentsWithFreeSlot(): string[];
  connectedAgents(): string[];
  /**
   * `started`: the claim stored the record `running` already (attempts counted, startedAt set).
   * `session`: the run's session row as the claim read it (absent: not read; `session` undefined: gone).
   */
  adopt(
    record: RunRecord,
    options?: {
      started?: boolean;
      session?: { session: SessionEntry | undefined };
      /** The time the run has left, as the database counts it at the claim. */
      deadlineInMs?: number;
    },
  ): boolean;
}

/** The LISTEN channel on which instances are told a run waits in the cluster's queue. */
export function runChannel(schema: string): string {
  return `sb_runs_${createHash("sha256").update(schema).digest("hex").slice(0, 24)}`;
}

/** Lane key of a run, as the scheduler forms it (summaries have a lane of their own). */
export function clusterLaneKey(record: Pick<RunRecord, "sessionKey" | "lane" | "origin">): string {
  return record.origin === "summarize"
    ? `${record.sessionKey}|summary`
    : `${record.sessionKey}|${record.lane}`;
}

/**
 * The cluster's part of running runs, beside the scheduler's local lanes and workers:
 *
 * - **One active run per lane cluster-wide**: a run is claimed in `run_claims` (UNIQUE lane key,
 *   held under this instance's membership lease) before its worker gets it; while another instance
 *   holds the lane the run waits for it. The claim is released when the run ends.
 * - **Lost instances**: a run held by an instance whose lease ran out is ended `error` with a reason
 *   naming that instance (the leader's sweep, within the lease + one sweep: ≈ 6 s), and the end is
 *   announced, so waits anywhere answer.
 * - **`agent.wait` on any instance**: a run not held here is awaited on the cluster's event log
 *   (`run.ended`), with the store as the source of truth before and after subscribing.
 */
export class ClusterRuns {
  private readonly lanes: ClusterRunLanes;
  private local: LocalRuns | undefined;
  /** Drain loops running: a few at once, since each claim is a few round trips (SKIP LOCKED keeps them apart). */
  private pulling = 0;
  /**
   * Runs named by wake-ups and not tried here yet, oldest first. Each is claimed by its key by one
   * drain only, and no claim of "whatever heads the queue" runs while names wait: such claims raced
   * the named ones for the same runs (in B9 ~18 % of all claims found nothing).
   */
  private readonly wakeups = new Set<string>();
  /**
   * The queue may hold runs for this instance that no pending wake-up names: at start, after each
   * poll, when a worker connects, on a wake-up without a name, when a released lane has runs behind
   * it, and after a named claim failed (its lane busy, or no free slot for its agent). While false, a
   * run ending here frees its lane without asking the queue. `unnamedEpoch` counts the times it was
   * set, so a claim that found nothing clears it only if nothing set it meanwhile.
   */
  private unnamedMayHold = true;
  private unnamedEpoch = 0;
  private pullAgain = false;
  /** Set while the run channel is listened to (see `listenWhileWorkers`). */
  private unlisten: (() => Promise<void>) | undefined;
  /** Changes of listening, one at a time. */
  private listenChange: Promise<void> = Promise.resolve();
  private stopped = false;
  private readonly poll: NodeJS.Timeout;
  /** Reads of ended runs in flight (see `readEnded`). */
  private readonly endReads = new Map<string, Promise<RunRecord | undefined>>();
  /**
   * Re-reads in flight of runs waited for (see `wait`), apart from `endReads`: those must be issued
   * after the event, and one of these may have been issued before it.
   */
  private readonly waitReads = new Map<string, Promise<RunRecord | undefined>>();
  /** Runs whose lane claim this instance holds already (taken by `claimNext` or `claimAtOnce`). */
  private readonly adopted = new Set<string>();
  /** Deadlines of runs this instance handed to the cluster's queue. */
  private readonly queuedTimers = new Set<NodeJS.Timeout>();
  /**
   * Runs this instance handed to the cluster's queue, heard on the event log from before they could
   * start anywhere: a wait for one needs no store read to learn whether it ended before the wait
   * subscribed (see `wait`). `ended` is kept for a few seconds after the end (`forgetHandedOff`).
   */
  private readonly handedOff = new Map<string, HandedOff>();
  private handedOffSubscription: (() => void) | undefined;
  /**
   * What the handed-off runs not heard ended weigh (each entry's `weight`): they count against this
   * instance's `gateway.limits` as its runs not ended do (see `queuedLoad`).
   */
  private readonly owedPerSession = new KeyedCounts();
  private owedRuns = 0;
  private owedBytes = 0;
  private lastUnheardCheck = performance.now();
  private unheardCheck: Promise<void> | undefined;

  constructor(
    private readonly cluster: Cluster,
    private readonly store: Pick<Store, "runs" | "transcripts">,
    private readonly bus: EventLog,
    private readonly log: Logger,
  ) {
    this.lanes = cluster.lanes;
    this.poll = setInterval(() => {
      this.forgetHandedOff(Date.now());
      this.checkUnheard();
      // Names older than a poll were taken elsewhere, or are found by claiming the queue's heads.
      this.wakeups.clear();
      this.pull();
      void this.refreshPresence().catch((error: unknown) =>
        this.log.warn({ err: error }, "could not read which agents have workers elsewhere"),
      );
    }, PULL_POLL_MS);
    this.poll.unref();
  }

  /** Binds the scheduler and starts listening for runs handed to the cluster's queue. */
  async start(local: LocalRuns): Promise<void> {
    this.local = local;
    await this.refreshPresence().catch((error: unknown) =>
      this.log.warn({ err: error }, "could not read which agents have workers elsewhere"),
    );
    await this.listenWhileWorkers();
    this.pull();
  }

  /**
   * Listens for queued runs only while this instance has workers to run them: an instance with no
   * workers (callers only) could not adopt a run anyway. The channel is one of the instance's
   * listener connection (shared with the event log, which always listens), which re-opens itself
   * when lost; each (re)connection is followed by a look at the queue for runs queued meanwhile.
   */
  private listenWhileWorkers(): Promise<void> {
    this.listenChange = this.listenChange
      .then(async () => {
        const wanted = !this.stopped && this.hasWorkers();
        if (wanted && !this.unlisten) {
          this.unlisten = await this.cluster.coordination.listener.listen(
            runChannel(this.cluster.coordination.schema),
            {
              notify: (payload) => {
                // One notification per queued run, naming it: take that one (asking again found
                // nothing almost every time). A wake-up without a name (a reassignment) takes
                // whichever heads the queue.
                if (payload) this.addWakeup(payload);
                else this.markUnnamed();
                this.drainSoon();
              },
              connected: () => this.pull(),
            },
          );
        } else if (!wanted && this.unlisten) {
          const unlisten = this.unlisten;
          this.unlisten = undefined;
          await unlisten();
        }
      })
      .catch((error: unknown) => this.log.warn({ err: error }, "could not change listening for queued runs"));
    return this.listenChange;
  }

  private hasWorkers(): boolean {
    return (this.local?.connectedAgents().length ?? 0) > 0;
  }

  stop(): void {
    this.stopped = true;
    for (const timer of this.queuedTimers) clearTimeout(timer);
    clearInterval(this.poll);
    this.handedOffSubscription?.();
    for (const tracked of this.handedOff.values()) this.uncount(tracked);
    this.handedOff.clear();
    void this.listenWhileWorkers();
  }

  /**
   * The runs this instance handed to the cluster's queue and has not heard end (nor adopted back,
   * where `active` counts them): the scheduler adds them to its own load when it admits a run, so a
   * session's runs not ended stay bounded (`gateway.limits`) when no worker here takes them. They
   * count here wherever they run; an instance adopting one counts it there too while it runs.
   */
  queuedLoad(sessionKey: string): RunLoad {
    return { sessionRuns: this.owedPerSession.get(sessionKey), runs: this.owedRuns, bytes: this.owedBytes };
  }

  private count(record: RunRecord): Weight {
    const weight = { sessionKey: record.sessionKey, bytes: runInputBytes(record), since: performance.now() };
    this.owedPerSession.add(weight.sessionKey, 1);
    this.owedRuns += 1;
    this.owedBytes += weight.bytes;
    return weight;
  }

  private uncount(tracked: HandedOff): void {
    const weight = tracked.weight;
    if (!weight) return;
    tracked.weight = undefined;
    this.owedPerSession.add(weight.sessionKey, -1);
    this.owedRuns -= 1;
    this.owedBytes -= weight.bytes;
  }

  /** The run leaves the handed-off runs (its end heard, its hand-off failed, its keep time past). */
  private untrack(runId: string): void {
    const tracked = this.handedOff.get(runId);
    if (!tracked) return;
    this.uncount(tracked);
    this.handedOff.delete(runId);
  }

  /**
   * Handed-off runs counted for longer than `UNHEARD_CHECK_MS` are looked up in one read, at most
   * every `UNHEARD_CHECK_MS`: one found ended (its event lost) stops counting. Waits are not
   * answered from this (they re-read the record themselves).
   */
  private checkUnheard(): void {
    const now = performance.now();
    if (this.unheardCheck || this.owedRuns === 0 || now - this.lastUnheardCheck < UNHEARD_CHECK_MS) return;
    this.lastUnheardCheck = now;
    const ids: string[] = [];
    for (const [runId, tracked] of this.handedOff) {
      if (tracked.weight && now - tracked.weight.since >= UNHEARD_CHECK_MS) ids.push(runId);
      if (ids.length >= UNHEARD_CHECK_BATCH) break;
    }
    if (ids.length === 0) return;
    const { db, q } = this.cluster.coordination;
    this.unheardCheck = db
      .read<{ run_id: string }>(
        "looking up handed-off runs not heard ended",
        `SELECT run_id FROM ${q("runs")} WHERE run_id = ANY($1::text[]) AND status IN ('ok', 'error', 'timeout')`,
        [ids],
      )
      .then(
        (ended) => {
          for (const row of ended.rows) {
            const tracked = this.handedOff.get(row.run_id);
            if (tracked) this.uncount(tracked);
          }
        },
        (error: unknown) => this.log.warn({ err: error }, "could not look up handed-off runs"),
      )
      .finally(() => {
        this.unheardCheck = undefined;
      });
  }

  /** Agents with a worker on another live instance (read every second). */
  private remoteAgents = new Set<string>();
  private presenceWrite: Promise<void> = Promise.resolve();

  hasRemoteWorker(agentId: string): boolean {
    return this.remoteAgents.has(agentId);
  }

  /**
   * This instance's workers changed: its row in `cluster_meta` (`workers.<instanceId>`) names the
   * agents it has workers of, for other instances' `delivery.status` and `agents.list`.
   */
  workersChanged(): void {
    void this.listenWhileWorkers();
    const agents = JSON.stringify(this.local?.connectedAgents().sort() ?? []);
    const { db, q } = this.cluster.coordination;
    this.presenceWrite = this.presenceWrite
      .then(() =>
        db.query(
          "recording this instance's workers",
          `INSERT INTO ${q("cluster_meta")} (name, value) VALUES ($1, $2)
           ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`,
          [`workers.${this.cluster.instanceId}`, agents],
        ),
      )
      .then(
        () => undefined,
        (error: unknown) => this.log.warn({ err: error }, "could not record this instance's workers"),
      );
  }

  private async refreshPresence(): Promise<void> {
    const { db, q } = this.cluster.coordination;
    const [rows, alive] = await Promise.all([
      db.read<{ name: string; value: string }>(
        "reading which agents have workers",
        `SELECT name, value FROM ${q("cluster_meta")} WHERE name LIKE 'workers.%'`,
      ),
      this.cluster.membership.alive(),
    ]);
    const live = new Set(alive);
    const remote = new Set<string>();
    const gone: string[] = [];
    for (const row of rows.rows) {
      const instanceId = row.name.slice("workers.".length);
      if (instanceId === this.cluster.instanceId) continue;
      if (!live.has(instanceId)) {
        gone.push(row.name);
        continue;
      }
      for (const agentId of JSON.parse(row.value) as string[]) remote.add(agentId);
    }
    this.remoteAgents = remote;
    // Rows of instances that are gone are removed by the leader.
    if (gone.length > 0 && this.cluster.leader.isLeader) {
      await db.query(
        "forgetting the workers of lost instances",
        `DELETE FROM ${q("cluster_meta")} WHERE name = ANY($1::text[])`,
        [gone],
      );
    }
  }

  /** Takes the run's lane for this instance; waits while another instance's run holds it. */
  async claim(record: RunRecord): Promise<void> {
    // Adopted from the queue just now, or claimed at its creation: `claimNext` or `claimAtOnce` took
    // its lane for this instance already (asking again was a refused insert, a rollback and a holder
    // lookup per run).
    if (this.adopted.delete(record.runId)) return;
    const laneKey = clusterLaneKey(record);
    for (;;) {
      if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
      // One statement in the common case (the lane is free); a refusal says who holds it.
      const deadlineInMs = timeLeftOf(record);
      if (await this.lanes.claim(laneKey, record.runId, record.agentId, { deadlineInMs })) return;
      const holder = await this.lanes.holder(laneKey);
      if (holder?.runId === record.runId) {
        // Adopted from the queue (claimed by `claimNext`), or reassigned to another worker here.
        if (holder.instanceId === this.cluster.instanceId) return;
        throw new Error(`run ${record.runId} is held by gateway instance ${holder.instanceId}`);
      }
      await new Promise((resolve) => setTimeout(resolve, CLAIM_RETRY_MS));
    }
  }

  /**
   * A new run about to start here at once: takes its lane for this instance in one statement,
   * unless another run holds the lane or a run of the lane waits in the cluster's queue (accepted
   * before this one, on any instance): false, and the run joins the queue behind them.
   */
  async claimAtOnce(record: RunRecord): Promise<boolean> {
    const taken = await this.lanes.claim(clusterLaneKey(record), record.runId, record.agentId, {
      unlessQueued: true,
      deadlineInMs: timeLeftOf(record),
    });
    // Its dispatch's `claim` then has nothing left to do.
    if (taken) this.adopted.add(record.runId);
    return taken;
  }

  /**
   * No worker of the agent on this instance: the run waits in the cluster's queue for any.
   * `deadlineInMs`: the time it has left on this instance's clock (undefined: no timeout); the
   * queue stores its deadline on the database's clock, which every instance then goes by.
   */
  async handOff(record: RunRecord, deadlineInMs: number | undefined): Promise<void> {
    this.trackHandedOff(record, deadlineInMs);
    try {
      await this.lanes.enqueue(clusterLaneKey(record), record.runId, {
        agentId: record.agentId,
        notify: runChannel(this.cluster.coordination.schema),
        ...(deadlineInMs === undefined ? {} : { deadlineInMs }),
      });
    } catch (error) {
      this.untrack(record.runId);
      throw error;
    }
    // Armed once the deadline is stored: it fires no sooner than the database's deadline.
    this.armQueuedTimeout(record, deadlineInMs);
  }

  /**
   * The run's worker went away and no worker here is free: the run goes back to the head of its
   * lane in the cluster's queue (its claim given up in the same statement) for a worker of any
   * instance. Waits here hear its end from the event log, as for any handed-off run.
   */
  async handBack(record: RunRecord, deadlineInMs: number | undefined): Promise<void> {
    this.adopted.delete(record.runId);
    this.trackHandedOff(record, deadlineInMs);
    try {
      await this.lanes.handBack(
        clusterLaneKey(record),
        record.runId,
        record.agentId,
        runChannel(this.cluster.coordination.schema),
        deadlineInMs === undefined ? {} : { deadlineInMs },
      );
    } catch (error) {
      this.untrack(record.runId);
      throw error;
    }
    this.armQueuedTimeout(record, deadlineInMs);
  }

  /** Listens for the run's end before it can start elsewhere (see `handedOff`); counts it here. */
  private trackHandedOff(record: RunRecord, deadlineInMs: number | undefined): void {
    this.handedOffSubscription ??= this.bus.subscribe({
      accepts: (event) => event.event === "run.ended" && this.handedOff.has(event.payload.runId as string),
      deliver: (event) => {
        const payload = event.payload as EventPayload<"run.ended">;
        const tracked = this.handedOff.get(payload.runId);
        if (!tracked || tracked.ended) return;
        const heard = waitResultOfEnded(payload);
        // An end without its fields (an older instance): waits read the record, as for any run.
        if (!heard) this.untrack(payload.runId);
        else {
          this.uncount(tracked);
          tracked.ended = heard;
          tracked.until = Date.now() + HANDED_OFF_KEEP_MS;
        }
      },
    });
    const now = Date.now();
    // Kept past the run's deadline only until the leader's sweep must have ended it.
    const left = deadlineInMs ?? (record.timeoutSeconds ? undefined : 3_600_000);
    const deadline = left === undefined ? now : now + left;
    const existing = this.handedOff.get(record.runId);
    // Handed back after being handed off from here and adopted here: counted once.
    const weight = existing?.weight ?? this.count(record);
    this.handedOff.set(record.runId, { until: Math.max(deadline, now) + HANDED_OFF_KEEP_MS, weight });
  }

  private forgetHandedOff(now: number): void {
    for (const [runId, tracked] of this.handedOff) if (tracked.until <= now) this.untrack(runId);
  }

  /**
   * A handed-off run still in the queue at its deadline ends `timeout` then, as it would on one
   * process (the leader's one-second sweep is the net for runs whose instance died). `deadlineInMs`
   * is what was stored with it: the database's deadline is no later than this timer.
   */
  private armQueuedTimeout(record: RunRecord, deadlineInMs: number | undefined): void {
    const seconds = record.timeoutSeconds;
    if (!seconds || seconds <= 0 || deadlineInMs === undefined) return;
    const due = performance.now() + deadlineInMs;
    const arm = () => {
      const timer = setTimeout(
        () => {
          this.queuedTimers.delete(timer);
          // A deadline past setTimeout's range fires early: wait on (a wall clock set back does not).
          if (performance.now() < due) return arm();
          void this.expire(record.runId).catch((error: unknown) =>
            this.log.warn({ err: error, runId: record.runId }, "could not end a queued run at its timeout"),
          );
        },
        timerDelay(due, performance.now()),
      );
      timer.unref();
      this.queuedTimers.add(timer);
    };
    arm();
  }

  /** Wakes every instance: a run waits in the cluster's queue. */
  private async notifyQueued(): Promise<void> {
    await this.cluster.coordination.db.query("announcing a queued run", "SELECT pg_notify($1, '')", [
      runChannel(this.cluster.coordination.schema),
    ]);
  }

  /**
   * Adopts runs from the cluster's queue while this instance has free worker slots for their
   * agents (called on a worker connecting and every second; wake-ups and freed slots drain too).
   */
  pull(): void {
    this.markUnnamed();
    this.drainSoon();
  }

  private markUnnamed(): void {
    this.unnamedMayHold = true;
    this.unnamedEpoch += 1;
  }

  private addWakeup(runId: string): void {
    if (this.wakeups.size >= MAX_WAKEUPS) {
      // A burst no free slot here could follow: the oldest names are found by claiming the heads.
      for (const oldest of this.wakeups) {
        this.wakeups.delete(oldest);
        break;
      }
      this.markUnnamed();
    }
    this.wakeups.add(runId);
  }

  private takeWakeup(): string | undefined {
    for (const runId of this.wakeups) {
      this.wakeups.delete(runId);
      return runId;
    }
    return undefined;
  }

  private drainSoon(): void {
    if (this.pulling >= PARALLEL_DRAINS) {
      this.pullAgain = true;
      return;
    }
    this.pulling += 1;
    void this.drain()
      .catch((error: unknown) =>
        this.log.warn({ err: error }, "could not take runs from the cluster's queue"),
      )
      .finally(() => {
        this.pulling -= 1;
        if (this.pullAgain) {
          this.pullAgain = false;
          this.drainSoon();
        }
      });
  }

  /** Named runs first, by their key; then, if the queue may hold others, whichever heads it. */
  private async drain(): Promise<void> {
    const local = this.local;
    if (!local || this.stopped) return;
    for (;;) {
      const agents = local.agentsWithFreeSlot();
      if (agents.length === 0) return;
      const runId = this.takeWakeup();
      if (runId === undefined && !this.unnamedMayHold) return;
      const epoch = this.unnamedEpoch;
      // The claim stores the run `running` too: the worker's slot is free now, so it is adopted.
      const startAt = Date.now();
      const claim = await this.lanes.claimNext(agents, { startAt, ...(runId ? { runId } : {}) });
      if (!claim) {
        // A named run not claimable now: taken elsewhere, not the head of its lane, its lane busy,
        // or no free slot here for its agent. The last three are found again among the heads.
        if (runId !== undefined) this.markUnnamed();
        else if (this.unnamedEpoch === epoch) this.unnamedMayHold = false;
        continue;
      }
      const record = claim.record ?? (await this.store.runs.get(claim.runId));
      if (!record || TERMINAL_RUN_STATUSES.includes(record.status)) {
        await this.lanes.release(claim.laneKey, claim.runId);
        continue;
      }
      this.adopted.add(record.runId);
      // With the record, the claim read the session's row too (none: the session is gone).
      const session = claim.record ? { session: claim.session } : undefined;
      const adopted = local.adopt(record, {
        started: claim.started === true,
        ...(session ? { session } : {}),
        ...(claim.deadlineInMs === undefined ? {} : { deadlineInMs: claim.deadlineInMs }),
      });
      if (adopted) {
        // Handed off from here, and back: `active` counts it now.
        const tracked = this.handedOff.get(record.runId);
        if (tracked) this.uncount(tracked);
      } else {
        this.adopted.delete(record.runId);
        // Taken meanwhile here: back to `queued` as it was, and to the head of its lane for the next
        // free worker anywhere.
        if (claim.started) {
          const { startedAt, ...rest } = record;
          await this.store.runs.put({
            ...rest,
            ...(startedAt !== undefined && startedAt !== startAt ? { startedAt } : {}),
            status: "queued",
            attempts: Math.max(0, record.attempts - 1),
          });
        }
        // One statement gives the claim up and puts the run at the head of its lane with the claim's
        // reassignment count (a re-insert started it at 0: a reassigned run could be reassigned
        // again where it should end `error`), and wakes every instance.
        await this.lanes.handBack(
          claim.laneKey,
          claim.runId,
          claim.agentId,
          runChannel(this.cluster.coordination.schema),
        );
        this.markUnnamed();
        return;
      }
    }
  }

  /** Writes the run's end only while this instance holds the run (see `ClusterRunEnds`). */
  end(record: RunRecord): Promise<boolean> {
    return this.cluster.runEnds.write(record);
  }

  /** Takes a run out of the cluster's queue (false: it was not there, e.g. adopted meanwhile). */
  async withdraw(record: RunRecord): Promise<boolean> {
    const { db, q } = this.cluster.coordination;
    const taken = await db.query(
      "taking a run out of the queue",
      `DELETE FROM ${q("run_queue")} WHERE run_id = $1 RETURNING run_id`,
      [record.runId],
    );
    return (taken.rowCount ?? 0) > 0;
  }

  /** The run ended: its lane is free for any instance. */
  async release(record: RunRecord): Promise<void> {
    this.adopted.delete(record.runId);
    const laneEmpty = await this.lanes.release(clusterLaneKey(record), record.runId);
    // A slot came free here, and the lane is free for any instance: take what waits (the lane's
    // next run first of all; instances elsewhere hear of it on their next poll).
    if (!laneEmpty) this.markUnnamed();
    if (this.unnamedMayHold || this.wakeups.size > 0) this.drainSoon();
  }

  /**
   * The leader's sweep found runs of lost instances. A run lost for the first time is reassigned
   * once: the sweep put it back at the head of its lane and its record back to `queued` (one
   * transaction, so nothing here writes the record: an instance may have adopted or even ended it
   * since), and an instance with a free worker of its agent adopts it (the workers of the lost instance reconnect
   * elsewhere). If none takes it within `REASSIGN_WAIT_MS` it ends `error` naming the instance, so a
   * wait still answers within the spec's 10 s. A run lost again (`failed`) ends `error` at once.
   * Idempotent: a run already ended is only released and acknowledged.
   */
  async lost(runs: { requeued: LostRun[]; failed: LostRun[] }): Promise<void> {
    for (const lost of runs.failed) {
      await this.endLost(lost, lost.reason ?? lostInstanceError(lost.lostInstance));
      await this.lanes.release(lost.laneKey, lost.runId);
      await this.lanes.acknowledgeFailure(lost.runId);
    }
    let requeued = 0;
    for (const lost of runs.requeued) {
      const record = await this.store.runs.get(lost.runId);
      if (!record || TERMINAL_RUN_STATUSES.includes(record.status)) {
        await this.lanes.release(lost.laneKey, lost.runId);
        continue;
      }
      requeued += 1;
      this.log.info(
        { runId: record.runId, lostInstance: lost.lostInstance },
        "run of a lost instance reassigned",
      );
      const timer = setTimeout(() => {
        void this.failUnadopted(lost).catch((error: unknown) =>
          this.log.warn(
            { err: error, runId: lost.runId },
            "could not end an unadopted run of a lost instance",
          ),
        );
      }, REASSIGN_WAIT_MS);
      timer.unref();
    }
    if (requeued > 0) await this.notifyQueued();
  }

  /** Still in the queue after the reassignment window: no worker anywhere took it. */
  private async failUnadopted(lost: LostRun): Promise<void> {
    const { db, q } = this.cluster.coordination;
    const taken = await db.query(
      "taking an unadopted run out of the queue",
      `DELETE FROM ${q("run_queue")} WHERE run_id = $1 RETURNING run_id`,
      [lost.runId],
    );
    if (taken.rowCount === 0) return;
    await this.endLost(
      lost,
      lostInstanceError(
        lost.lostInstance,
        `, and no other worker of agent ${lost.agentId} took it within ${REASSIGN_WAIT_MS / 1000} s`,
      ),
    );
  }

  private async endLost(lost: LostRun, reason: string): Promise<void> {
    const record = await this.store.runs.get(lost.runId);
    if (!record || TERMINAL_RUN_STATUSES.includes(record.status)) return;
    record.status = "error";
    record.error = reason;
    record.lost = "instance";
    record.endedAt = Date.now();
    await this.store.runs.put(record);
    this.bus.publish("run.ended", runEndedPayload(record, "error"), {
      sessionKey: record.sessionKey,
      agentId: record.agentId,
    });
    this.log.warn({ runId: record.runId, lostInstance: lost.lostInstance }, "run of a lost instance ended");
  }

  /**
   * The leader's timer: runs waiting in the cluster's queue past their `timeoutSeconds` end
   * `timeout` (their instance let go of them, timer included, when it handed them off). A run is
   * taken out of the queue by one conditional delete first, so one that an instance adopts at the
   * same moment is either adopted or timed out, never both.
   */
  async expireQueued(): Promise<number> {
    const { db, q } = this.cluster.coordination;
    // Past their deadline on the database's clock (never this instance's: the run's instance
    // counted its time on its own clock, and only that duration went to the database). A run
    // queued by an instance that stores no deadline is checked from its record, as before.
    const queued = await db.read<{ run_id: string; lane_key: string }>(
      "listing queued runs past their deadline",
      `SELECT run_id, lane_key FROM ${q("run_queue")}
       WHERE deadline_at <= now() OR deadline_at IS NULL ORDER BY position LIMIT 1000`,
    );
    let expired = 0;
    for (const row of queued.rows) if (await this.expire(row.run_id)) expired += 1;
    return expired;
  }

  /**
   * Ends one queued run `timeout` if it is past its deadline (on the database's clock) and still in
   * the queue.
   */
  private async expire(runId: string): Promise<boolean> {
    const { db, q } = this.cluster.coordination;
    const record = await this.store.runs.get(runId);
    const seconds = record?.timeoutSeconds;
    if (!record || !seconds) return false;
    // Only for a row without a deadline (queued by an earlier version): its record's deadline, as
    // such an instance checked it.
    const pastByRecord = record.createdAt + seconds * 1000 <= Date.now();
    const taken = await db.query(
      "taking an expired run out of the queue",
      `DELETE FROM ${q("run_queue")}
       WHERE run_id = $1 AND (deadline_at <= now() OR (deadline_at IS NULL AND $2::boolean))
       RETURNING run_id`,
      [runId, pastByRecord],
    );
    if (taken.rowCount === 0 || TERMINAL_RUN_STATUSES.includes(record.status)) return false;
    const error = `run timed out after ${seconds}s`;
    record.status = "timeout";
    record.error = error;
    record.endedAt = Date.now();
    await this.store.runs.put(record);
    this.bus.publish("run.ended", runEndedPayload(record, "timeout"), {
      sessionKey: record.sessionKey,
      agentId: record.agentId,
    });
    return true;
  }

  /**
   * The run as stored after its `run.ended` event: one read for every wait that heard the event
   * (a send with wait has two, its own and its reply-back flow's); reads are issued after the event.
   */
  private readEnded(runId: string): Promise<RunRecord | undefined> {
    let read = this.endReads.get(runId);
    if (!read) {
      read = this.store.runs.get(runId);
      this.endReads.set(runId, read);
      const forget = () => {
        if (this.endReads.get(runId) === read) this.endReads.delete(runId);
      };
      read.then(forget, forget);
    }
    return read;
  }

  /** One read of a waited-for run's record for every wait re-reading it at the same moment. */
  private rereadWaited(runId: string): Promise<RunRecord | undefined> {
    let read = this.waitReads.get(runId);
    if (!read) {
      read = this.store.runs.get(runId);
      this.waitReads.set(runId, read);
      const forget = () => {
        if (this.waitReads.get(runId) === read) this.waitReads.delete(runId);
      };
      read.then(forget, forget);
    }
    return read;
  }

  /** Waits for a run held by another instance (or not started yet) to end, up to `timeoutMs`. */
  async wait(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<WaitResult> {
    // Its caller is gone already: nothing to wait for on its behalf.
    if (signal?.aborted)
      return { runId, status: "timeout", error: "the wait was cancelled", stillRunning: true };
    let finish: (result: WaitResult | undefined) => void = () => undefined;
    let waiting = true;
    const ended = new Promise<WaitResult | undefined>((resolve) => {
      finish = (result) => {
        waiting = false;
        resolve(result);
      };
    });
    const unsubscribe = this.bus.subscribe({
      accepts: (event) => event.event === "run.ended" && event.payload.runId === runId,
      deliver: (event) => {
        // The event carries the stored end (published once it is written); one from an instance
        // that does not send `endedAt` yet is answered from the record.
        const heard = waitResultOfEnded(event.payload as EventPayload<"run.ended">);
        if (heard) return finish(heard);
        void this.readEnded(runId).then(
          (record) =>
            finish(
              record && TERMINAL_RUN_STATUSES.includes(record.status) ? toWaitResult(record) : undefined,
            ),
          () => finish(undefined),
        );
      },
    });
    const timer = setTimeout(() => finish(undefined), timeoutMs);
    const onAbort = () => finish(undefined);
    signal?.addEventListener("abort", onAbort, { once: true });
    // The event is the only word of the end otherwise, and it can be lost: the record is the truth.
    let reread: NodeJS.Timeout | undefined;
    let endSeen: number | undefined;
    const rereadAfter = (delay: number) => {
      reread = setTimeout(() => {
        void this.rereadWaited(runId).then(
          async (record) => {
            if (!waiting) return;
            if (record && TERMINAL_RUN_STATUSES.includes(record.status)) {
              // The record is written before the reply's transcript entry: an answer promises the
              // reply is in the history, so an `ok` end waits for its entry (while the writer may
              // still come; past that the record is the answer).
              endSeen ??= Date.now();
              if (
                record.status === "ok" &&
                Date.now() - endSeen < WAIT_REPLY_PATIENCE_MS &&
                !(await this.replyRecorded(record))
              ) {
                if (waiting) rereadAfter(Math.min(delay * 2, WAIT_REREAD_MAX_MS));
                return;
              }
              if (!waiting) return;
              const result = toWaitResult(record);
              reread = setTimeout(() => {
                this.heardEnd(runId, result);
                finish(result);
              }, WAIT_EVENT_GRACE_MS);
              reread.unref();
            } else rereadAfter(Math.min(delay * 2, WAIT_REREAD_MAX_MS));
          },
          () => {
            if (waiting) rereadAfter(Math.min(delay * 2, WAIT_REREAD_MAX_MS));
          },
        );
      }, delay);
      reread.unref();
    };
    try {
      // Handed off by this instance: its end was heard since before it could start, so it either was
      // heard already or will be heard by the subscription above (no await since the check).
      const tracked = this.handedOff.get(runId);
      if (tracked?.ended) return tracked.ended;
      if (!tracked) {
        // Subscribed first: an end committed from now on is heard; one committed before is stored.
        const first = await this.firstRead(runId, timeoutMs, ended, signal);
        if ("heard" in first) return first.heard ?? cancelled(runId);
        const stored = first.stored;
        if (!stored)
          throw new SwitchboardError("NOT_FOUND", `run not found: ${runId}`, { details: { runId } });
        if (TERMINAL_RUN_STATUSES.includes(stored.status)) return toWaitResult(stored);
      }
      if (waiting) rereadAfter(WAIT_REREAD_FIRST_MS);
      const result = await ended;
      if (result) return result;
      return {
        runId,
        status: "timeout",
        error: signal?.aborted ? "the wait was cancelled" : "run has not ended yet",
        stillRunning: true,
      };
    } finally {
      waiting = false;
      clearTimeout(timer);
      clearTimeout(reread);
      signal?.removeEventListener("abort", onAbort);
      unsubscribe();
    }
  }

  /**
   * A wait's first read of the run, within the wait's own time (at least `WAIT_FIRST_READ_MIN_MS`):
   * a database that stalls (no answer, no error) must not hold the wait past it. Answers the end
   * when it is heard first, or nothing when the caller went away; past the time, UNAVAILABLE
   * (retryable): whether the run exists, or ended, is not known.
   */
  private async firstRead(
    runId: string,
    timeoutMs: number,
    ended: Promise<WaitResult | undefined>,
    signal: AbortSignal | undefined,
  ): Promise<{ stored: RunRecord | undefined } | { heard: WaitResult | undefined }> {
    const limitMs = Math.max(timeoutMs, WAIT_FIRST_READ_MIN_MS);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), limitMs);
      timer.unref();
    });
    try {
      const outcome = await Promise.race([
        this.store.runs.get(runId).then((stored) => ({ stored })),
        // The end heard, or the caller gone; the wait's timer alone does not cut the read short (a
        // wait of 0 ms still answers from the record).
        ended.then((heard) => (heard || signal?.aborted ? { heard } : new Promise<never>(() => undefined))),
        late,
      ]);
      if (outcome !== "late") return outcome;
    } finally {
      clearTimeout(timer);
    }
    throw new SwitchboardError(
      "UNAVAILABLE",
      `could not read run ${runId} within ${limitMs} ms: the database did not answer in time`,
      { retryable: true, details: { runId } },
    );
  }

  /** Whether an ended run's reply is in its session's transcript yet (its newest entries). */
  private async replyRecorded(record: RunRecord): Promise<boolean> {
    try {
      const page = await this.store.transcripts.read(record.sessionId, {
        limit: 1,
        filter: (entry) => entry.runId === record.runId && entry.message?.role === "assistant",
      });
      return page.entries.length > 0;
    } catch {
      // Unreadable now (or the session is gone): the record answers.
      return true;
    }
  }

  /** A handed-off run's end found by a read: later waits for it here answer at once, as if heard. */
  private heardEnd(runId: string, result: WaitResult): void {
    const tracked = this.handedOff.get(runId);
    if (!tracked || tracked.ended) return;
    tracked.ended = result;
    tracked.until = Date.now() + HANDED_OFF_KEEP_MS;
  }
}
