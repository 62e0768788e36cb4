import {
  compareSessionsByRecency,
  compileListVisibility,
  compileSessionFilter,
  parseSessionId,
  RowVersions,
  type SessionClassifier,
  type SessionEntry,
  type SessionIndexStore,
  type SessionListOptions,
  type SessionListQuery,
  type SessionListResult,
  sessionClassifierFor,
  type Versioned,
  validateSessionEntry,
  type WriteOptions,
} from "@switchboard/core";
import { yieldToEventLoop } from "./fs-io";
import { JournaledMap } from "./journaled-map";
import type { StoreLogger } from "./logger";
import { SortedList } from "./sorted-list";
import type { StoreHealthTracker } from "./store-health";

/** Fields with few distinct values: sharing one string per value keeps 100k rows small in memory. */
const SHARED_FIELDS = [
  "agentId",
  "taint",
  "clearance",
  "channel",
  "chatType",
  "model",
  "sendPolicy",
  "spawnedBy",
  "lastChannel",
  "thinkingLevel",
  "verboseLevel",
] as const;
const MAX_SHARED_STRINGS = 50_000;
const MAX_CLASSIFIER_CACHES = 4;
/**
 * Rows a `list` may classify in one go (a few ms). A scan that needs more (a classifier new to
 * this index meeting a full scan of 100k rows would take ~100 ms) stops, the rows are classified
 * in slices of `KIND_SLICE` with the event loop served in between, and the scan runs again.
 */
const KIND_MISS_BUDGET = 2000;
const KIND_SLICE = 2000;
/** Rows a visibility pass checks between two yields to the event loop. */
const VISIBLE_SLICE = 2000;

/** Rows a list scan classified (cache misses) and how many it may before it stops. */
interface MissBudget {
  misses: number;
  allowed: number;
}

/** What one classifier said of each row (rows are immutable, so the answer holds). */
interface KindCache {
  readonly kinds: WeakMap<SessionEntry, string>;
  /** The running fill of `kinds` over all rows, shared by the lists waiting for it. */
  filling?: Promise<void>;
}

class StringPool {
  private readonly strings = new Map<string, string>();

  share(value: string): string {
    const known = this.strings.get(value);
    if (known !== undefined) return known;
    if (this.strings.size < MAX_SHARED_STRINGS) this.strings.set(value, value);
    return value;
  }
}

/** A caller's own copy of a stored (frozen) row. */
function copySession(row: SessionEntry): SessionEntry {
  const copy = { ...row };
  if (row.deliveryContext) copy.deliveryContext = { ...row.deliveryContext };
  return copy;
}

export interface FileSessionIndexOptions {
  dir: string;
  durable: boolean;
  snapshotEvery: number;
  logger: StoreLogger;
  health?: StoreHealthTracker;
  /** Core's key rules per `mainKey` (a seam for tests that count classifications). */
  classifierFor?: (mainKey: string) => SessionClassifier;
}

/**
 * The sessions index: all rows in memory (frozen, compact), kept sorted by recency for `list`,
 * persisted through a journal + snapshot pair.
 */
export class FileSessionIndex implements SessionIndexStore {
  private readonly byRecency = new SortedList<SessionEntry>(compareSessionsByRecency);
  /** sessionId → key, or keys when several rows share it. */
  private readonly keysBySessionId = new Map<string, string | string[]>();
  private readonly kindCaches = new Map<SessionClassifier, KindCache>();
  private readonly versions = new RowVersions("session");

  private constructor(
    private readonly journal: JournaledMap<SessionEntry>,
    private readonly revive: (row: SessionEntry) => SessionEntry,
    private readonly classifierFor: (mainKey: string) => SessionClassifier,
  ) {
    const rows = [...journal.values.values()];
    this.byRecency.reset(rows);
    for (const row of rows) this.link(row);
  }

  static async open(options: FileSessionIndexOptions): Promise<FileSessionIndex> {
    const pool = new StringPool();
    const revive = (row: SessionEntry): SessionEntry => {
      const record = row as unknown as Record<string, unknown>;
      for (const field of SHARED_FIELDS) {
        const value = record[field];
        if (typeof value === "string") record[field] = pool.share(value);
      }
      if (row.deliveryContext) {
        row.deliveryContext.channel = pool.share(row.deliveryContext.channel);
        Object.freeze(row.deliveryContext);
      }
      return Object.freeze(row);
    };
    const journal = await JournaledMap.open<SessionEntry>({
      dir: options.dir,
      format: "sessions",
      keyOf: (row) => row.key,
      durable: options.durable,
      snapshotEvery: options.snapshotEvery,
      logger: options.logger,
      revive,
      ...(options.health ? { health: options.health } : {}),
    });
    return new FileSessionIndex(journal, revive, options.classifierFor ?? sessionClassifierFor);
  }

  async get(key: string): Promise<SessionEntry | undefined> {
    const row = this.journal.get(key);
    return row ? copySession(row) : undefined;
  }

  async getVersioned(key: string): Promise<Versioned<SessionEntry> | undefined> {
    const row = this.journal.get(key);
    return row ? { row: copySession(row), version: this.versions.of(key, true) } : undefined;
  }

  async keysForSessionId(sessionId: string): Promise<string[]> {
    const keys = this.keysBySessionId.get(parseSessionId(sessionId));
    if (keys === undefined) return [];
    return typeof keys === "string" ? [keys] : keys.slice().sort();
  }

  async put(entry: SessionEntry, options: WriteOptions = {}): Promise<number> {
    // The JSON round trip gives every row the same plain shape as rows loaded from disk, which
    // keeps the list scan's property reads fast (validator output objects are slower to read).
    const row = this.revive(JSON.parse(JSON.stringify(validateSessionEntry(entry))) as SessionEntry);
    const previous = this.journal.get(row.key);
    // Check and write happen in one synchronous step, so no other write can come in between.
    this.versions.check(row.key, previous !== undefined, options.expectedVersion);
    const { version, undo } = this.versions.bump(row.key);
    const done = this.journal.put(row, (restored) => {
      // The write failed: the derived indexes follow the map back.
      undo();
      this.byRecency.remove(row);
      this.unlink(row);
      if (restored) {
        this.byRecency.insert(restored);
        this.link(restored);
      }
    });
    if (previous) {
      this.byRecency.remove(previous);
      this.unlink(previous);
    }
    this.byRecency.insert(row);
    this.link(row);
    await done;
    return version;
  }

  async delete(key: string, options: WriteOptions = {}): Promise<boolean> {
    const previous = this.journal.get(key);
    this.versions.check(key, previous !== undefined, options.expectedVersion);
    if (!previous) return false;
    const version = this.versions.forget(key);
    const done = this.journal.delete(key, (restored) => {
      this.versions.restore(key, version);
      this.byRecency.insert(restored);
      this.link(restored);
    });
    this.byRecency.remove(previous);
    this.unlink(previous);
    return done;
  }

  async list(query: SessionListQuery, options: SessionListOptions = {}): Promise<SessionListResult> {
    const classify = this.classifierFor(typeof query?.mainKey === "string" ? query.mainKey : "main");
    const cache = this.kindCache(classify);
    const { kinds } = cache;
    const budget: MissBudget = { misses: 0, allowed: KIND_MISS_BUDGET };
    const matches = compileSessionFilter(query, (row) => {
      let kind = kinds.get(row);
      if (kind === undefined) {
        budget.misses++;
        kind = classify(row);
        kinds.set(row, kind);
      }
      return kind;
    });
    const visible = compileListVisibility(options);
    // A selective filter (kinds, search) or a visibility predicate can make the pass long: it runs in
    // slices that yield to the event loop. A plain page stops after `limit` rows in one slice.
    const sliced = visible !== undefined || query.kinds !== undefined || query.search !== undefined;
    const scan = () =>
      sliced ? this.scanVisible(query, matches, visible, budget) : this.scan(query, matches, budget);
    const first = await scan();
    if (first) return first;
    await this.fillKinds(cache, classify);
    budget.allowed = Number.POSITIVE_INFINITY;
    return (await scan())!;
  }

  /**
   * A pass that may go far: in slices that yield to the event loop between them, resuming after the
   * last row it visited (a row updated meanwhile moves ahead of the cursor, so it is never visited
   * twice). With the caller's visibility predicate, `hidden` counts the withheld rows among those the
   * pass went through (newer than the last row returned; every matching row when fewer than `limit`
   * are visible).
   */
  private async scanVisible(
    query: SessionListQuery,
    matches: (entry: SessionEntry) => boolean,
    visible: ((entry: SessionEntry) => boolean) | undefined,
    budget: MissBudget,
  ): Promise<SessionListResult | undefined> {
    const { activeSince, limit } = query;
    const entries: SessionEntry[] = [];
    let hidden = 0;
    let stopped = false;
    let done = false;
    let after: SessionEntry | undefined;
    while (!done) {
      let inSlice = 0;
      const ranOff = this.byRecency.forEachAfter(after, (row) => {
        after = row;
        if (activeSince !== undefined && row.updatedAt < activeSince) {
          done = true;
          return false;
        }
        const match = matches(row);
        if (budget.misses > budget.allowed) {
          stopped = done = true;
          return false;
        }
        if (match) {
          if (visible && !visible(row)) hidden++;
          else {
            entries.push(copySession(row));
            if (entries.length >= limit) {
              done = true;
              return false;
            }
          }
        }
        return ++inSlice < VISIBLE_SLICE;
      });
      if (ranOff) done = true;
      if (!done) await yieldToEventLoop();
    }
    return stopped ? undefined : { entries, hidden };
  }

  /** One pass in recency order; undefined when it stopped because `budget` ran out. */
  private scan(
    query: SessionListQuery,
    matches: (entry: SessionEntry) => boolean,
    budget: MissBudget,
  ): SessionListResult | undefined {
    const { activeSince, limit } = query;
    const entries: SessionEntry[] = [];
    let stopped = false;
    this.byRecency.forEachUntil((row) => {
      // Rows are newest first, so nothing past this point can be active enough.
      if (activeSince !== undefined && row.updatedAt < activeSince) return false;
      const match = matches(row);
      if (budget.misses > budget.allowed) {
        stopped = true;
        return false;
      }
      if (!match) return true;
      entries.push(copySession(row));
      return entries.length < limit;
    });
    return stopped ? undefined : { entries, hidden: 0 };
  }

  /** Classifies every row not yet in `cache`, a slice at a time, yielding to the event loop in between. */
  private fillKinds(cache: KindCache, classify: SessionClassifier): Promise<void> {
    cache.filling ??= (async () => {
      let inSlice = 0;
      // A Map iterator stays valid across changes: rows put meanwhile are visited or classified by the next scan.
      for (const row of this.journal.values.values()) {
        if (!cache.kinds.has(row)) cache.kinds.set(row, classify(row));
        if (++inSlice === KIND_SLICE) {
          inSlice = 0;
          await yieldToEventLoop();
        }
      }
    })().finally(() => {
      cache.filling = undefined;
    });
    return cache.filling;
  }

  async count(): Promise<number> {
    return this.journal.size;
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

  /** Current sessionIds and their keys, for the doctor and tests. */
  sessionIds(): ReadonlyMap<string, string | string[]> {
    return this.keysBySessionId;
  }

  /**
   * Kinds are derived from keys, and rows are immutable, so a classifier's answer per row can be
   * kept. Caches are held for the few classifier functions seen last (normally one).
   */
  private kindCache(classify: SessionClassifier): KindCache {
    let cache = this.kindCaches.get(classify);
    if (!cache) {
      if (this.kindCaches.size >= MAX_CLASSIFIER_CACHES) {
        const oldest = this.kindCaches.keys().next().value;
        if (oldest) this.kindCaches.delete(oldest);
      }
      cache = { kinds: new WeakMap() };
      this.kindCaches.set(classify, cache);
    }
    return cache;
  }

  private link(row: SessionEntry): void {
    const existing = this.keysBySessionId.get(row.sessionId);
    if (existing === undefined) this.keysBySessionId.set(row.sessionId, row.key);
    else if (typeof existing === "string") this.keysBySessionId.set(row.sessionId, [existing, row.key]);
    else existing.push(row.key);
  }

  private unlink(row: SessionEntry): void {
    const existing = this.keysBySessionId.get(row.sessionId);
    if (existing === undefined) return;
    if (typeof existing === "string") {
      if (existing === row.key) this.keysBySessionId.delete(row.sessionId);
      return;
    }
    const rest = existing.filter((key) => key !== row.key);
    if (rest.length === 0) this.keysBySessionId.delete(row.sessionId);
    else this.keysBySessionId.set(row.sessionId, rest.length === 1 ? rest[0]! : rest);
  }
}
