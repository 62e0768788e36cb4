import type { Config, RunOrigin, Store } from "@switchboard/core";
import { DEFAULT_MAX_ENDED_RUNS_FS, longestArchiveWindowMinutes } from "@switchboard/core";
import type { Logger } from "pino";

const DAY_MS = 86_400_000;
/** Deletions per store call: small enough that one batch never holds the event loop (B7). */
const BATCH = 500;
/**
 * The count cap's batches are larger: each batch is one walk of the file store's whole registry, and
 * under a sustained load a pass removes a tenth of the cap.
 */
const CAP_BATCH = 2_000;
/** The count cap never takes a run that ended this recently: its caller may still be reading it. */
const COUNT_CAP_MIN_AGE_MS = 60_000;
/**
 * Runs the count cap leaves to the age rule: the sub-agent archiver finds children through their spawn
 * runs, and a spawn's announce is settled from its announce run. Both are bounded by spawn budgets.
 */
const COUNT_CAP_KEEPS: readonly RunOrigin[] = ["spawn", "spawn-announce"];

/** The ended-run cap in force: the configured one, else the store kind's default (null: none). */
export function maxEndedRuns(config: Config): number | null {
  const configured = config.gateway.retention.maxEndedRuns;
  if (configured !== undefined) return configured;
  return config.store.kind === "fs" ? DEFAULT_MAX_ENDED_RUNS_FS : null;
}

export interface RetentionTotals {
  runs: number;
  archives: number;
}

/**
 * Prunes ended runs after `gateway.retention.runsDays` and archived transcripts after `archiveDays`
 * (operations.md). The audit log is never pruned. Runs whose spawn announce is pending are kept by
 * the store; spawn runs are also kept until the sub-agent archiver (which reads them) is past them.
 * Work goes in batches with a turn of the event loop between them.
 */
export class Retention {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<RetentionTotals> | undefined;
  private readonly cap: number | null;
  /** Runs ended since the last pass, and how many may end before the cap is looked at again. */
  private endedSincePass = 0;
  private readonly checkEvery: number;
  /** Totals since start, for logs and metrics. */
  readonly totals: RetentionTotals = { runs: 0, archives: 0 };

  constructor(
    private readonly store: Pick<Store, "runs" | "transcripts">,
    private readonly config: Config,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {
    this.cap = maxEndedRuns(config);
    this.checkEvery = this.cap === null ? Number.POSITIVE_INFINITY : Math.max(100, Math.floor(this.cap / 10));
  }

  /**
   * A run ended: past a tenth of the cap since the last pass, a pass starts at once, so a sustained
   * load cannot grow the registry far past the cap between the hourly passes.
   */
  noteEnded(): void {
    if (++this.endedSincePass < this.checkEvery || this.running) return;
    void this.runOnce().catch((error) => this.log.error({ err: error }, "retention pass failed"));
  }

  /** First pass a minute after start (start-up stays fast), then every `intervalMs`. */
  start(intervalMs = 3_600_000, firstAfterMs = 60_000): void {
    const tick = () => {
      void this.runOnce().catch((error) => this.log.error({ err: error }, "retention pass failed"));
    };
    const first = setTimeout(() => {
      tick();
      this.timer = setInterval(tick, intervalMs);
      this.timer.unref();
    }, firstAfterMs);
    first.unref();
    this.timer = first;
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** One pass (a pass already running is joined, not doubled). */
  runOnce(): Promise<RetentionTotals> {
    this.running ??= this.pass().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** The oldest ended runs past `cap`, in batches (see `COUNT_CAP_MIN_AGE_MS`, `COUNT_CAP_KEEPS`). */
  private async pruneOverCap(cap: number, now: number): Promise<number> {
    let excess = (await this.store.runs.countEnded()) - cap;
    let pruned = 0;
    while (excess > 0) {
      const limit = Math.min(CAP_BATCH, excess);
      const count = await this.store.runs.prune({
        endedBefore: now - COUNT_CAP_MIN_AGE_MS,
        limit,
        exceptOrigins: COUNT_CAP_KEEPS,
      });
      pruned += count;
      excess -= count;
      if (count < limit) break;
      await yieldTurn();
    }
    if (excess > 0)
      this.log.warn(
        { maxEndedRuns: cap, over: excess },
        "more ended runs than gateway.retention.maxEndedRuns, and none left old enough to prune",
      );
    return pruned;
  }

  private async pass(): Promise<RetentionTotals> {
    const { runsDays, archiveDays } = this.config.gateway.retention;
    const now = this.now();
    // The sub-agent archiver finds children to archive through their spawn runs: never prune those first.
    const archiverMs = longestArchiveWindowMinutes(this.config) * 60_000;
    const endedBefore = now - Math.max(runsDays * DAY_MS, archiverMs + 2 * 60_000);
    const pruned: RetentionTotals = { runs: 0, archives: 0 };
    this.endedSincePass = 0;
    for (;;) {
      const count = await this.store.runs.prune({ endedBefore, limit: BATCH });
      pruned.runs += count;
      if (count < BATCH) break;
      await yieldTurn();
    }
    if (this.cap !== null) pruned.runs += await this.pruneOverCap(this.cap, now);
    if (archiveDays !== null) {
      const archivedBefore = now - archiveDays * DAY_MS;
      for (;;) {
        const count = await this.store.transcripts.pruneArchives({ archivedBefore, limit: BATCH });
        pruned.archives += count;
        if (count < BATCH) break;
        await yieldTurn();
      }
    }
    this.totals.runs += pruned.runs;
    this.totals.archives += pruned.archives;
    if (pruned.runs + pruned.archives > 0)
      this.log.info(
        { prunedRuns: pruned.runs, prunedArchives: pruned.archives },
        "retention pruned old data",
      );
    return pruned;
  }
}

function yieldTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
