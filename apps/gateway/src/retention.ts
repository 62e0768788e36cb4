import type { Config, Store } from "@switchboard/core";
import { longestArchiveWindowMinutes } from "@switchboard/core";
import type { Logger } from "pino";

const DAY_MS = 86_400_000;
/** Deletions per store call: small enough that one batch never holds the event loop (B7). */
const BATCH = 500;

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
  /** Totals since start, for logs and metrics. */
  readonly totals: RetentionTotals = { runs: 0, archives: 0 };

  constructor(
    private readonly store: Pick<Store, "runs" | "transcripts">,
    private readonly config: Config,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

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

  private async pass(): Promise<RetentionTotals> {
    const { runsDays, archiveDays } = this.config.gateway.retention;
    const now = this.now();
    // The sub-agent archiver finds children to archive through their spawn runs: never prune those first.
    const archiverMs = longestArchiveWindowMinutes(this.config) * 60_000;
    const endedBefore = now - Math.max(runsDays * DAY_MS, archiverMs + 2 * 60_000);
    const pruned: RetentionTotals = { runs: 0, archives: 0 };
    for (;;) {
      const count = await this.store.runs.prune({ endedBefore, limit: BATCH });
      pruned.runs += count;
      if (count < BATCH) break;
      await yieldTurn();
    }
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
