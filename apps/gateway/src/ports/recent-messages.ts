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
  /**
   * Seeds the cache from a tail read started now: call the function it returns with the read (a
   * read cut short by its byte cap is not cached), or with nothing when the read failed. Entries
   * `add`ed while the read was out are merged in by seq: the read may or may not have seen them.
   */
  fillFrom(sessionId: string): (read?: { entries: TranscriptEntry[]; truncated: boolean }) => void;
  /** Entries this process just wrote (only message entries are kept). */
  add(sessionId: string, written: TranscriptEntry[]): void;
}

/** `a` and `b` (each in seq order) as one list in seq order, each seq once. */
function mergeBySeq(a: readonly TranscriptEntry[], b: readonly TranscriptEntry[]): TranscriptEntry[] {
  const bySeq = new Map<number, TranscriptEntry>();
  for (const item of a) bySeq.set(item.seq, item);
  for (const item of b) bySeq.set(item.seq, item);
  return [...bySeq.values()].sort((x, y) => x.seq - y.seq);
}

/** Bounded LRU over sessions. */
export class InProcessRecentMessages implements RecentMessagesCache {
  readonly depth = 24;
  private readonly bySession = new Map<string, TranscriptEntry[]>();
  /**
   * Per session with a tail read out: the messages added meanwhile. Without them an append that
   * completed during the read was lost (it found no cache to add to, and the read began before
   * it), or, seen by the read and added after, cached twice.
   */
  private readonly filling = new Map<string, { added: TranscriptEntry[]; reads: number }>();

  constructor(private readonly maxSessions = 2048) {}

  get(sessionId: string): TranscriptEntry[] | undefined {
    const entries = this.bySession.get(sessionId);
    if (entries) {
      this.bySession.delete(sessionId);
      this.bySession.set(sessionId, entries);
    }
    return entries;
  }

  fillFrom(sessionId: string): (read?: { entries: TranscriptEntry[]; truncated: boolean }) => void {
    const filling = this.filling.get(sessionId) ?? { added: [], reads: 0 };
    filling.reads++;
    this.filling.set(sessionId, filling);
    let done = false;
    return (read) => {
      if (done) return;
      done = true;
      if (--filling.reads === 0) this.filling.delete(sessionId);
      if (!read || read.truncated) return;
      const cached = this.bySession.get(sessionId) ?? [];
      const entries = mergeBySeq(mergeBySeq(read.entries, cached), filling.added);
      this.bySession.set(sessionId, entries.slice(-this.depth));
      if (this.bySession.size > this.maxSessions) {
        const oldest = this.bySession.keys().next().value;
        if (oldest !== undefined) this.bySession.delete(oldest);
      }
    };
  }

  add(sessionId: string, written: TranscriptEntry[]): void {
    const messages = written.filter((item) => item.type === "message");
    if (messages.length === 0) return;
    const filling = this.filling.get(sessionId);
    if (filling) {
      filling.added.push(...messages);
      if (filling.added.length > this.depth) filling.added.splice(0, filling.added.length - this.depth);
    }
    const entries = this.bySession.get(sessionId);
    if (!entries) return;
    // Appends come in seq order (one session's are serialised), but one a read already brought in
    // is not added again.
    const last = entries.at(-1)?.seq ?? -1;
    for (const item of messages) if (item.seq > last) entries.push(item);
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

  fillFrom(): () => void {
    return () => undefined;
  }

  add(): void {}
}
