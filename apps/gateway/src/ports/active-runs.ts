import type { RunRecord } from "@switchboard/core";
import { KeyedCounts } from "../keyed-counts";

/** A run that has not ended: its record, the worker holding it and its timeout. */
export interface ActiveRun<W> {
  record: RunRecord;
  worker?: W;
  timer?: NodeJS.Timeout;
  deadline?: number;
  /**
   * Set once the run has ended and its end's writes (record, transcript entry) are issued: settles
   * when they are durable or failed. A waiter arriving in between hears the end at once and holds
   * its answer for this.
   */
  endSettled?: Promise<void>;
  /** Aborted when the run ends: its tool calls still in flight stop with it (made on first ask). */
  ending?: AbortController;
}

/**
 * Runs of this process that have not ended, creations in flight per idempotency key, and ended
 * runs whose final record the store refused (answered from here until written). Several instances
 * need these in a shared place (or the store) behind this interface.
 */
export interface ActiveRuns<W> {
  get(runId: string): ActiveRun<W> | undefined;
  add(run: ActiveRun<W>): void;
  delete(runId: string): void;
  /** Every active run (a snapshot). */
  all(): ActiveRun<W>[];
  /** The creation in flight for an idempotency key. */
  creating(idempotencyKey: string): Promise<RunRecord> | undefined;
  startCreating(idempotencyKey: string, creation: Promise<RunRecord>): void;
  doneCreating(idempotencyKey: string): void;
  /**
   * A run of the session is being created (from before its session is read until it is in a lane
   * or the store): the sub-agent archiver must not archive the session meanwhile, and its input's
   * `bytes` count towards `load` already. Returns the end.
   */
  startCreatingOn(sessionKey: string, bytes?: number): () => void;
  creatingOn(sessionKey: string): boolean;
  /**
   * What runs not ended yet hold here: the session's runs and all runs (active or being created),
   * and the input bytes of every such run of this process. Admission bounds both (`gateway.limits`), so a flood of
   * sends with no worker to take them cannot grow the process without bound.
   */
  load(sessionKey: string): RunLoad;
  /** An ended run whose final record is not durable yet. */
  keepUnsaved(record: RunRecord): void;
  unsaved(runId: string): RunRecord | undefined;
  /** Ended runs not durable yet (live: entries kept while iterating are visited). */
  unsavedRecords(): Iterable<RunRecord>;
  saved(runId: string): void;
}

export interface RunLoad {
  sessionRuns: number;
  /** Runs of every session, active or being created. */
  runs: number;
  bytes: number;
}

/** What a run's input holds in memory while it waits: its message and context, in UTF-8 bytes. */
export function runInputBytes(run: Pick<RunRecord, "message" | "context">): number {
  return Buffer.byteLength(run.message) + (run.context === undefined ? 0 : Buffer.byteLength(run.context));
}

export class InProcessActiveRuns<W> implements ActiveRuns<W> {
  private readonly active = new Map<string, ActiveRun<W>>();
  /** Each active run's weight as counted when added (its record may be clipped before it leaves). */
  private readonly weights = new Map<string, { sessionKey: string; bytes: number }>();
  private readonly activePerSession = new KeyedCounts();
  private heldBytes = 0;
  private creatingBytes = 0;
  private creatingCount = 0;
  private readonly inflight = new Map<string, Promise<RunRecord>>();
  private readonly pending = new Map<string, RunRecord>();
  /** Creations in flight per session key; keys with none hold no memory. */
  private readonly creatingPerSession = new KeyedCounts();

  get(runId: string): ActiveRun<W> | undefined {
    return this.active.get(runId);
  }

  add(run: ActiveRun<W>): void {
    const { runId, sessionKey } = run.record;
    this.active.set(runId, run);
    if (this.weights.has(runId)) return;
    const bytes = runInputBytes(run.record);
    this.weights.set(runId, { sessionKey, bytes });
    this.heldBytes += bytes;
    this.activePerSession.add(sessionKey, 1);
  }

  delete(runId: string): void {
    this.active.delete(runId);
    const weight = this.weights.get(runId);
    if (!weight) return;
    this.weights.delete(runId);
    this.heldBytes -= weight.bytes;
    this.activePerSession.add(weight.sessionKey, -1);
  }

  all(): ActiveRun<W>[] {
    return [...this.active.values()];
  }

  creating(idempotencyKey: string): Promise<RunRecord> | undefined {
    return this.inflight.get(idempotencyKey);
  }

  startCreating(idempotencyKey: string, creation: Promise<RunRecord>): void {
    this.inflight.set(idempotencyKey, creation);
  }

  doneCreating(idempotencyKey: string): void {
    this.inflight.delete(idempotencyKey);
  }

  startCreatingOn(sessionKey: string, bytes = 0): () => void {
    this.creatingPerSession.add(sessionKey, 1);
    this.creatingBytes += bytes;
    this.creatingCount++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.creatingPerSession.add(sessionKey, -1);
      this.creatingBytes -= bytes;
      this.creatingCount--;
    };
  }

  creatingOn(sessionKey: string): boolean {
    return this.creatingPerSession.has(sessionKey);
  }

  load(sessionKey: string): RunLoad {
    // A run counts twice between its `add` and the end of its creation: briefly over, never under.
    return {
      sessionRuns: this.activePerSession.get(sessionKey) + this.creatingPerSession.get(sessionKey),
      runs: this.weights.size + this.creatingCount,
      bytes: this.heldBytes + this.creatingBytes,
    };
  }

  keepUnsaved(record: RunRecord): void {
    this.pending.set(record.runId, record);
  }

  unsaved(runId: string): RunRecord | undefined {
    return this.pending.get(runId);
  }

  unsavedRecords(): Iterable<RunRecord> {
    return this.pending.values();
  }

  saved(runId: string): void {
    this.pending.delete(runId);
  }
}
