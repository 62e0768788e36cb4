import { randomUUID } from "node:crypto";
import {
  type Lane,
  type Level,
  type Provenance,
  type RunRecord,
  type SpawnRecord,
  type Store,
  SwitchboardError,
  TERMINAL_RUN_STATUSES,
  type Usage,
} from "@switchboard/core";
import type { Logger } from "pino";
import type { Connection } from "./connection";
import type { EventBus } from "./event-bus";
import type { SessionsService } from "./sessions-service";

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
  flow?: Record<string, unknown>;
  /** Record the input in the transcript (false for isolated runs such as summaries). */
  recordInput?: boolean;
}

export interface WaitResult {
  runId: string;
  status: "ok" | "error" | "timeout";
  reply?: string;
  error?: string;
  startedAt?: number;
  endedAt?: number;
}

interface ActiveRun {
  record: RunRecord;
  worker?: Connection;
  timer?: NodeJS.Timeout;
  deadline?: number;
  waiters: Set<(record: RunRecord) => void>;
}

export type RunEndedListener = (record: RunRecord) => void | Promise<void>;

/**
 * Runs: lanes per session (one run at a time per session+lane, FIFO), idempotency keys, timeouts,
 * worker dispatch, and waiting for results. Run records are durable, so `agent.wait` answers for
 * runs that ended before a restart.
 */
export class RunScheduler {
  private readonly active = new Map<string, ActiveRun>();
  private readonly lanes = new Map<string, string[]>();
  private readonly busyLanes = new Map<string, string>();
  private readonly workers = new Map<string, Set<Connection>>();
  private readonly workerLoad = new Map<Connection, Set<string>>();
  private readonly inflightIdempotency = new Map<string, Promise<RunRecord>>();
  private readonly endedListeners: RunEndedListener[] = [];
  private stopping = false;

  constructor(
    private readonly store: Store,
    private readonly sessions: SessionsService,
    private readonly bus: EventBus,
    private readonly log: Logger,
    private readonly assign: (
      record: RunRecord,
      worker: Connection,
      deadline: number | undefined,
    ) => Promise<void>,
  ) {}

  onRunEnded(listener: RunEndedListener): void {
    this.endedListeners.push(listener);
  }

  /** Re-creates lanes after a restart: queued runs wait again, runs that were running died with the old process. */
  async recover(): Promise<void> {
    const unfinished = await this.store.runs.list({ statuses: ["queued", "running"] });
    unfinished.sort((a, b) => a.createdAt - b.createdAt);
    for (const record of unfinished) {
      if (record.status === "running") {
        await this.finish(record, "error", { error: "gateway restarted" });
        continue;
      }
      await this.repairInput(record);
      const active: ActiveRun = { record, waiters: new Set() };
      this.active.set(record.runId, active);
      this.armTimeout(active);
      this.queue(record);
    }
    for (const laneKey of this.lanes.keys()) this.pump(laneKey);
  }

  get(runId: string): ActiveRun | undefined {
    return this.active.get(runId);
  }

  async enqueue(spec: RunSpec): Promise<{ record: RunRecord; existing: boolean }> {
    if (this.stopping)
      throw new SwitchboardError("UNAVAILABLE", "gateway is shutting down", { retryable: true });
    if (spec.idempotencyKey) {
      const inflight = this.inflightIdempotency.get(spec.idempotencyKey);
      if (inflight) return { record: await inflight, existing: true };
      const stored = await this.store.runs.getByIdempotencyKey(spec.idempotencyKey);
      if (stored) return { record: this.active.get(stored.runId)?.record ?? stored, existing: true };
      const creating = this.create(spec);
      this.inflightIdempotency.set(spec.idempotencyKey, creating);
      try {
        return { record: await creating, existing: false };
      } finally {
        this.inflightIdempotency.delete(spec.idempotencyKey);
      }
    }
    return { record: await this.create(spec), existing: false };
  }

  private async create(spec: RunSpec): Promise<RunRecord> {
    const entry = await this.sessions.require(spec.sessionKey);
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
      ...(spec.flow ? { flow: spec.flow } : {}),
      label: spec.label,
    };
    // The run record goes first: a crash between the two writes leaves a run whose input is
    // missing (recovery writes it), never an input without a run (a retry would duplicate it).
    await this.store.runs.put(record);
    if (spec.recordInput !== false) await this.recordInput(record, spec.label);
    const active: ActiveRun = { record, waiters: new Set() };
    this.active.set(runId, active);
    this.armTimeout(active);
    this.queue(record);
    this.pump(laneKeyOf(record));
    return record;
  }

  private async recordInput(record: RunRecord, label: Level): Promise<void> {
    await this.sessions.append(record.sessionKey, [
      {
        type: "message",
        label,
        runId: record.runId,
        ...(record.provenance ? { provenance: record.provenance } : {}),
        message: { role: "user", content: [{ type: "text", text: record.message }] },
      },
    ]);
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

  private armTimeout(active: ActiveRun): void {
    const seconds = active.record.timeoutSeconds;
    if (!seconds || seconds <= 0) return;
    active.deadline = active.record.createdAt + seconds * 1000;
    const delay = Math.max(0, active.deadline - Date.now());
    active.timer = setTimeout(() => {
      void this.finish(active.record, "timeout", { error: `run timed out after ${seconds}s` }).catch(
        (error) => this.log.error({ err: error, runId: active.record.runId }, "timeout handling failed"),
      );
    }, delay);
    active.timer.unref();
  }

  private queue(record: RunRecord): void {
    const laneKey = laneKeyOf(record);
    const queue = this.lanes.get(laneKey) ?? [];
    queue.push(record.runId);
    this.lanes.set(laneKey, queue);
  }

  /** True when a worker serving this agent is connected. */
  hasWorker(agentId: string): boolean {
    return (this.workers.get(agentId)?.size ?? 0) > 0;
  }

  workerCount(agentId: string): number {
    return this.workers.get(agentId)?.size ?? 0;
  }

  addWorker(connection: Connection, agentIds: Iterable<string>): void {
    for (const agentId of agentIds) {
      const set = this.workers.get(agentId) ?? new Set();
      set.add(connection);
      this.workers.set(agentId, set);
    }
    this.workerLoad.set(connection, new Set());
    for (const laneKey of [...this.lanes.keys()]) this.pump(laneKey);
  }

  /** A worker went away: its runs are reassigned once to another worker of the agent, else fail. */
  async removeWorker(connection: Connection): Promise<void> {
    for (const set of this.workers.values()) set.delete(connection);
    const held = this.workerLoad.get(connection) ?? new Set();
    this.workerLoad.delete(connection);
    for (const runId of held) {
      const active = this.active.get(runId);
      if (!active || active.worker !== connection) continue;
      active.worker = undefined;
      const next = this.pickWorker(active.record.agentId);
      if (next && active.record.attempts < 2) {
        this.log.info({ runId }, "worker disconnected mid-run; reassigning");
        await this.dispatch(active, next);
      } else {
        await this.finish(active.record, "error", { error: "worker disconnected" });
      }
    }
  }

  private pickWorker(agentId: string): Connection | undefined {
    let best: Connection | undefined;
    let bestLoad = Number.POSITIVE_INFINITY;
    for (const connection of this.workers.get(agentId) ?? []) {
      if (!connection.isOpen) continue;
      const load = this.workerLoad.get(connection)?.size ?? 0;
      if (load < bestLoad) {
        best = connection;
        bestLoad = load;
      }
    }
    return best;
  }

  private pump(laneKey: string): void {
    if (this.busyLanes.has(laneKey) || this.stopping) return;
    const queue = this.lanes.get(laneKey);
    if (!queue || queue.length === 0) {
      this.lanes.delete(laneKey);
      return;
    }
    const runId = queue[0]!;
    const active = this.active.get(runId);
    if (!active) {
      queue.shift();
      this.pump(laneKey);
      return;
    }
    const worker = this.pickWorker(active.record.agentId);
    if (!worker) return;
    queue.shift();
    this.busyLanes.set(laneKey, runId);
    void this.dispatch(active, worker).catch((error) => {
      this.log.error({ err: error, runId }, "dispatch failed");
      void this.finish(active.record, "error", { error: `dispatch failed: ${(error as Error).message}` });
    });
  }

  private async dispatch(active: ActiveRun, worker: Connection): Promise<void> {
    const record = active.record;
    record.status = "running";
    record.startedAt ??= Date.now();
    record.attempts += 1;
    active.worker = worker;
    this.workerLoad.get(worker)?.add(record.runId);
    await this.store.runs.put(record);
    if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
    this.bus.publish(
      "run.started",
      {
        runId: record.runId,
        sessionKey: record.sessionKey,
        agentId: record.agentId,
        lane: record.lane,
        startedAt: record.startedAt,
      },
      { sessionKey: record.sessionKey, agentId: record.agentId },
    );
    await this.assign(record, worker, active.deadline);
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
    const record = this.requireHeldBy(runId, connection);
    await this.finish(record, "ok", { reply, ...(usage ? { usage } : {}) });
  }

  async fail(runId: string, connection: Connection, error: string): Promise<void> {
    const record = this.requireHeldBy(runId, connection);
    await this.finish(record, "error", { error });
  }

  /** Ends a run once: persists, records the reply, wakes waiters, frees the lane, notifies flows. */
  async finish(
    record: RunRecord,
    status: "ok" | "error" | "timeout",
    outcome: { reply?: string; error?: string; usage?: Usage },
  ): Promise<void> {
    if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
    record.status = status;
    record.endedAt = Date.now();
    if (outcome.reply !== undefined) record.reply = outcome.reply;
    if (outcome.error !== undefined) record.error = outcome.error;
    if (outcome.usage) record.usage = outcome.usage;
    const active = this.active.get(record.runId);
    if (active?.timer) clearTimeout(active.timer);
    if (active?.worker) this.workerLoad.get(active.worker)?.delete(record.runId);
    const laneKey = laneKeyOf(record);
    if (this.busyLanes.get(laneKey) === record.runId) this.busyLanes.delete(laneKey);
    else {
      const queue = this.lanes.get(laneKey);
      const index = queue?.indexOf(record.runId) ?? -1;
      if (queue && index >= 0) queue.splice(index, 1);
    }

    try {
      if (status === "ok" && outcome.reply !== undefined && record.origin !== "summarize") {
        const entry = await this.sessions.get(record.sessionKey);
        if (entry && entry.sessionId === record.sessionId) {
          const label = entry.taint;
          const tokens = outcome.usage ? outcome.usage.inputTokens + outcome.usage.outputTokens : 0;
          await this.sessions.append(
            record.sessionKey,
            [
              {
                type: "message",
                label,
                runId: record.runId,
                message: { role: "assistant", content: [{ type: "text", text: outcome.reply }] },
              },
            ],
            tokens ? { totalTokens: (entry.totalTokens ?? 0) + tokens } : {},
          );
        }
      } else if (status !== "ok") {
        const entry = await this.sessions.get(record.sessionKey);
        if (entry && entry.sessionId === record.sessionId) {
          await this.sessions.append(record.sessionKey, [
            {
              type: "event",
              label: "PUBLIC",
              runId: record.runId,
              event: { name: "run.ended", data: { status, error: outcome.error ?? "" } },
            },
          ]);
        }
      }
    } catch (error) {
      this.log.warn({ err: error, runId: record.runId }, "could not record run end in transcript");
    }

    await this.store.runs.put(record);
    this.active.delete(record.runId);
    this.bus.publish(
      "run.ended",
      {
        runId: record.runId,
        sessionKey: record.sessionKey,
        status,
        ...(record.reply !== undefined ? { reply: record.reply } : {}),
        ...(record.error !== undefined ? { error: record.error } : {}),
        ...(record.usage ? { usage: record.usage } : {}),
      },
      { sessionKey: record.sessionKey, agentId: record.agentId },
    );
    for (const waiter of active?.waiters ?? []) waiter(record);
    this.pump(laneKey);
    for (const listener of this.endedListeners) {
      try {
        await listener(record);
      } catch (error) {
        this.log.error({ err: error, runId: record.runId }, "run-ended listener failed");
      }
    }
  }

  /** Waits for a run's end up to `timeoutMs`; answers at once for ended runs (also across restarts). */
  async wait(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<WaitResult> {
    const active = this.active.get(runId);
    if (!active) {
      const stored = await this.store.runs.get(runId);
      if (!stored) throw new SwitchboardError("NOT_FOUND", `run not found: ${runId}`, { details: { runId } });
      if (!TERMINAL_RUN_STATUSES.includes(stored.status)) {
        // Ended between the two lookups, or not yet active after recovery: poll once via the store.
        return { runId, status: "timeout", error: "run has not ended yet" };
      }
      return toWaitResult(stored);
    }
    return new Promise<WaitResult>((resolve) => {
      const done = (record: RunRecord) => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        active.waiters.delete(done);
        resolve(toWaitResult(record));
      };
      const onAbort = () => {
        clearTimeout(timer);
        active.waiters.delete(done);
        resolve({ runId, status: "timeout", error: "wait aborted" });
      };
      const timer = setTimeout(() => {
        active.waiters.delete(done);
        signal?.removeEventListener("abort", onAbort);
        resolve({ runId, status: "timeout", error: `run still in progress after waiting ${timeoutMs} ms` });
      }, timeoutMs);
      timer.unref();
      signal?.addEventListener("abort", onAbort, { once: true });
      active.waiters.add(done);
    });
  }

  /** Spawned runs of a requester that have not ended yet (for `maxChildren`). */
  activeSpawnsOf(requesterKey: string): number {
    let count = 0;
    for (const active of this.active.values())
      if (active.record.spawn?.requesterKey === requesterKey) count += 1;
    return count;
  }

  /** The run currently executing on a session, if any (for session_status). */
  activeRunFor(sessionKey: string): RunRecord | undefined {
    for (const [laneKey, runId] of this.busyLanes) {
      if (laneKey.startsWith(`${sessionKey}|`)) return this.active.get(runId)?.record;
    }
    return undefined;
  }

  /** Stop dispatching; runs still active end `error` so nothing waits forever. */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const active of [...this.active.values()]) {
      if (active.record.status === "running") {
        await this.finish(active.record, "error", { error: "gateway shutting down" });
      } else if (active.timer) {
        clearTimeout(active.timer);
      }
    }
  }
}

function laneKeyOf(record: Pick<RunRecord, "sessionKey" | "lane" | "origin">): string {
  // Summaries are isolated runs: they must never queue behind (or block) the session's own lanes.
  return record.origin === "summarize"
    ? `${record.sessionKey}|summary`
    : `${record.sessionKey}|${record.lane}`;
}

function toWaitResult(record: RunRecord): WaitResult {
  const status =
    record.status === "ok" || record.status === "error" || record.status === "timeout"
      ? record.status
      : "timeout";
  return {
    runId: record.runId,
    status,
    ...(record.reply !== undefined ? { reply: record.reply } : {}),
    ...(record.error !== undefined ? { error: record.error } : {}),
    ...(record.startedAt !== undefined ? { startedAt: record.startedAt } : {}),
    ...(record.endedAt !== undefined ? { endedAt: record.endedAt } : {}),
  };
}
