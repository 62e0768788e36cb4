import type { RunRecord } from "@switchboard/core";

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
   * or the store): the sub-agent archiver must not archive the session meanwhile. Returns the end.
   */
  startCreatingOn(sessionKey: string): () => void;
  creatingOn(sessionKey: string): boolean;
  /** An ended run whose final record is not durable yet. */
  keepUnsaved(record: RunRecord): void;
  unsaved(runId: string): RunRecord | undefined;
  /** Ended runs not durable yet (live: entries kept while iterating are visited). */
  unsavedRecords(): Iterable<RunRecord>;
  saved(runId: string): void;
}

export class InProcessActiveRuns<W> implements ActiveRuns<W> {
  private readonly active = new Map<string, ActiveRun<W>>();
  private readonly inflight = new Map<string, Promise<RunRecord>>();
  private readonly pending = new Map<string, RunRecord>();
  /** Creations in flight per session key; keys with none hold no memory. */
  private readonly creatingPerSession = new Map<string, number>();

  get(runId: string): ActiveRun<W> | undefined {
    return this.active.get(runId);
  }

  add(run: ActiveRun<W>): void {
    this.active.set(run.record.runId, run);
  }

  delete(runId: string): void {
    this.active.delete(runId);
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

  startCreatingOn(sessionKey: string): () => void {
    this.creatingPerSession.set(sessionKey, (this.creatingPerSession.get(sessionKey) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.creatingPerSession.get(sessionKey) ?? 1) - 1;
      if (left > 0) this.creatingPerSession.set(sessionKey, left);
      else this.creatingPerSession.delete(sessionKey);
    };
  }

  creatingOn(sessionKey: string): boolean {
    return this.creatingPerSession.has(sessionKey);
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
