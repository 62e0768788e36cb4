import type { TranscriptEntry } from "@switchboard/core";

/**
 * Bytes of history JSON a `run.assigned` carries at most, whichever way its entries were read
 * (this cache or a tail read): the newest messages that fit, the newest clipped when it alone does
 * not. Far under the default send buffer, so a session's history never makes its run unsendable.
 */
export const RUN_HISTORY_MAX_BYTES = 256 * 1024;

/**
 * Each hot session's newest message entries (what `run.assigned.history` needs), kept beside the
 * store so a run's start does not re-read the transcript. A cache only this process fills: another
 * gateway appending to the same session would make it stale, so a shared store needs another one.
 */
export interface RecentMessagesCache {
  readonly depth: number;
  get(sessionId: string): TranscriptEntry[] | undefined;
  /** Seeds the cache from a tail read; a read cut short by its byte cap is not cached. */
  fill(sessionId: string, entries: TranscriptEntry[], truncated: boolean): void;
  /** Entries this process just wrote (only message entries are kept). */
  add(sessionId: string, written: TranscriptEntry[]): void;
}

/** Bounded LRU over sessions. */
export class InProcessRecentMessages implements RecentMessagesCache {
  readonly depth = 24;
  private readonly bySession = new Map<string, TranscriptEntry[]>();

  constructor(private readonly maxSessions = 2048) {}

  get(sessionId: string): TranscriptEntry[] | undefined {
    const entries = this.bySession.get(sessionId);
    if (entries) {
      this.bySession.delete(sessionId);
      this.bySession.set(sessionId, entries);
    }
    return entries;
  }

  fill(sessionId: string, entries: TranscriptEntry[], truncated: boolean): void {
    if (truncated) return;
    this.bySession.set(sessionId, entries.slice(-this.depth));
    if (this.bySession.size > this.maxSessions) {
      const oldest = this.bySession.keys().next().value;
      if (oldest !== undefined) this.bySession.delete(oldest);
    }
  }

  add(sessionId: string, written: TranscriptEntry[]): void {
    const entries = this.bySession.get(sessionId);
    if (!entries) return;
    for (const item of written) if (item.type === "message") entries.push(item);
    if (entries.length > this.depth) entries.splice(0, entries.length - this.depth);
  }
}

/**
 * No cache: every read goes to the store. For several instances on one store, where another
 * instance's appends (a run's input written where the send was accepted) would not reach a cache
 * filled here, and `run.assigned` would carry a history with holes.
 */
export class UncachedRecentMessages implements RecentMessagesCache {
  readonly depth = 24;

  get(): undefined {
    return undefined;
  }

  fill(): void {}

  add(): void {}
}
