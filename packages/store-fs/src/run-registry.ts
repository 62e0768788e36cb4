import {
  archivedSessionError,
  checkIdempotencyKeyFree,
  checkPruneOptions,
  compareRunsNewestFirst,
  compileRunFilter,
  RowVersions,
  type RunListQuery,
  type RunPruneOptions,
  type RunRecord,
  type RunRegistryStore,
  runPrunable,
  TERMINAL_RUN_STATUSES,
  type Versioned,
  validateRunRecord,
  type WriteOptions,
} from "@switchboard/core";
import { yieldToEventLoop } from "./fs-io";
import { JournaledMap } from "./journaled-map";
import type { StoreLogger } from "./logger";
import type { StoreHealthTracker } from "./store-health";

/** Runs tested against a list's filter, and records copied for its answer, between two yields. */
const LIST_SLICE = 5_000;
const CLONE_SLICE = 500;

export interface FileRunRegistryOptions {
  dir: string;
  durable: boolean;
  snapshotEvery: number;
  logger: StoreLogger;
  health?: StoreHealthTracker;
  /**
   * Whether the row of a session key is archived: an insert-only put of a run on such a key is
   * refused (see `RunRegistryStore.put`), checked in the same synchronous step as the write.
   */
  sessionArchived?: (sessionKey: string) => boolean;
}

const isActive = (run: RunRecord) => !TERMINAL_RUN_STATUSES.includes(run.status);

/** The run registry's key: what its journal and snapshot records are stored under. */
export const runKey = (run: RunRecord): string => run.runId;

/** The run registry: records in memory, persisted through a journal + snapshot pair. */
export class FileRunRegistry implements RunRegistryStore {
  private readonly runIdByIdempotencyKey = new Map<string, string>();
  private readonly versions = new RowVersions("run");

  /** Runs queued or running, per session key: the archive's check without a walk of every run. */
  private readonly activeBySession = new Map<string, number>();
  /** Runs queued or running in all: the ended ones are the rest (`countEnded`). */
  private activeTotal = 0;

  private constructor(
    private readonly journal: JournaledMap<RunRecord>,
    private readonly sessionArchived: (sessionKey: string) => boolean,
  ) {
    for (const run of journal.values.values()) {
      if (run.idempotencyKey !== undefined) this.runIdByIdempotencyKey.set(run.idempotencyKey, run.runId);
      if (isActive(run)) this.countActive(run.sessionKey, 1);
    }
  }

  /** Whether a run of `sessionKey` is queued or running (synchronous: see `archiveIdleSession`). */
  hasActiveRun(sessionKey: string): boolean {
    return this.activeBySession.has(sessionKey);
  }

  private countActive(sessionKey: string, delta: number): void {
    this.activeTotal += delta;
    const count = (this.activeBySession.get(sessionKey) ?? 0) + delta;
    if (count > 0) this.activeBySession.set(sessionKey, count);
    else this.activeBySession.delete(sessionKey);
  }

  /** Moves the active-run counts from `before` to `after` (either may be absent). */
  private recount(before: RunRecord | undefined, after: RunRecord | undefined): void {
    if (before && isActive(before)) this.countActive(before.sessionKey, -1);
    if (after && isActive(after)) this.countActive(after.sessionKey, 1);
  }

  static async open(options: FileRunRegistryOptions): Promise<FileRunRegistry> {
    const journal = await JournaledMap.open<RunRecord>({
      dir: options.dir,
      format: "runs",
      keyOf: runKey,
      durable: options.durable,
      snapshotEvery: options.snapshotEvery,
      logger: options.logger,
      ...(options.health ? { health: options.health } : {}),
    });
    return new FileRunRegistry(journal, options.sessionArchived ?? (() => false));
  }

  async put(run: RunRecord, options: WriteOptions = {}): Promise<number> {
    const record = validateRunRecord(run);
    const previous = this.journal.get(record.runId);
    // Checks and write happen in one synchronous step, so no other write can come in between.
    this.versions.check(record.runId, previous !== undefined, options.expectedVersion);
    if (options.expectedVersion === 0 && this.sessionArchived(record.sessionKey))
      throw archivedSessionError(record.sessionKey);
    if (record.idempotencyKey !== undefined)
      checkIdempotencyKeyFree(record, this.runIdByIdempotencyKey.get(record.idempotencyKey), previous);
    const { version, undo } = this.versions.bump(record.runId);
    if (previous?.idempotencyKey !== undefined && previous.idempotencyKey !== record.idempotencyKey) {
      this.runIdByIdempotencyKey.delete(previous.idempotencyKey);
    }
    if (record.idempotencyKey !== undefined)
      this.runIdByIdempotencyKey.set(record.idempotencyKey, record.runId);
    this.recount(previous, record);
    await this.journal.put(record, (restored) => {
      undo();
      this.recount(record, restored);
      if (record.idempotencyKey !== undefined) this.runIdByIdempotencyKey.delete(record.idempotencyKey);
      if (restored?.idempotencyKey !== undefined)
        this.runIdByIdempotencyKey.set(restored.idempotencyKey, restored.runId);
    });
    return version;
  }

  async get(runId: string): Promise<RunRecord | undefined> {
    const run = this.journal.get(runId);
    return run ? structuredClone(run) : undefined;
  }

  async getVersioned(runId: string): Promise<Versioned<RunRecord> | undefined> {
    const run = this.journal.get(runId);
    return run ? { row: structuredClone(run), version: this.versions.of(runId, true) } : undefined;
  }

  async getByIdempotencyKey(idempotencyKey: string): Promise<RunRecord | undefined> {
    const runId = this.runIdByIdempotencyKey.get(idempotencyKey);
    return runId === undefined ? undefined : this.get(runId);
  }

  async list(query: RunListQuery): Promise<RunRecord[]> {
    const matches = compileRunFilter(query);
    const selected: RunRecord[] = [];
    // A registry of 100k runs is walked and copied in slices, letting other requests in between: a
    // list that returns most of it (the archiver's, retention's) must not hold the loop for its whole
    // length. A put meanwhile replaces its record rather than changing the one already taken.
    let seen = 0;
    for (const run of this.journal.values.values()) {
      if (matches(run)) selected.push(run);
      if (++seen % LIST_SLICE === 0) await yieldToEventLoop();
    }
    selected.sort(compareRunsNewestFirst);
    const limited = query.limit === undefined ? selected : selected.slice(0, query.limit);
    const copies: RunRecord[] = [];
    for (const run of limited) {
      copies.push(structuredClone(run));
      if (copies.length % CLONE_SLICE === 0) await yieldToEventLoop();
    }
    return copies;
  }

  async prune(options: RunPruneOptions): Promise<number> {
    checkPruneOptions(options, "endedBefore", options.endedBefore);
    const doomed: RunRecord[] = [];
    let seen = 0;
    for (const run of this.journal.values.values()) {
      if (runPrunable(run, options)) doomed.push(run);
      if (++seen % LIST_SLICE === 0) await yieldToEventLoop();
    }
    // Checked again: a record may have been written while the scan let other work in.
    const batch = oldestEnded(doomed, options.limit).filter((run) => {
      const current = this.journal.get(run.runId);
      return current !== undefined && runPrunable(current, options);
    });
    // Issued together so they share group commits; a crash keeps a prefix of them.
    const results = await Promise.all(
      batch.map((run) => {
        const key = run.idempotencyKey;
        if (key !== undefined && this.runIdByIdempotencyKey.get(key) === run.runId)
          this.runIdByIdempotencyKey.delete(key);
        const version = this.versions.forget(run.runId);
        return this.journal.delete(run.runId, (restored) => {
          this.versions.restore(run.runId, version);
          if (restored.idempotencyKey !== undefined)
            this.runIdByIdempotencyKey.set(restored.idempotencyKey, restored.runId);
        });
      }),
    );
    const pruned = results.filter(Boolean).length;
    return pruned;
  }

  count(): number {
    return this.journal.size;
  }

  async countEnded(): Promise<number> {
    return this.journal.size - this.activeTotal;
  }

  compact(): Promise<void> {
    return this.journal.compact();
  }

  stats() {
    return this.journal.stats();
  }

  close(): Promise<void> {
    return this.journal.close();
  }
}

/**
 * The `limit` runs that ended first, oldest first, without sorting them all: retention takes a small
 * batch at a time from what may be every run of the registry.
 */
function oldestEnded(runs: RunRecord[], limit: number): RunRecord[] {
  const endedAt = (run: RunRecord) => run.endedAt ?? 0;
  if (runs.length > limit) {
    const threshold = Float64Array.from(runs, endedAt).sort()[limit - 1]!;
    const below = runs.filter((run) => endedAt(run) < threshold);
    for (const run of runs) {
      if (below.length >= limit) break;
      if (endedAt(run) === threshold) below.push(run);
    }
    runs = below;
  }
  return runs.sort((a, b) => endedAt(a) - endedAt(b));
}
