import {
  classifyKey,
  compareSessionsByRecency,
  compileListVisibility,
  compileSessionFilter,
  keyRest,
  parseSessionId,
  RowVersions,
  type SessionClassifier,
  type SessionEntry,
  type SessionIndexStore,
  type SessionListOptions,
  type SessionListQuery,
  type SessionListResult,
  type SessionTouch,
  touchedRow,
  type Versioned,
  validateSessionEntry,
  validateSessionTouch,
  type WriteOptions,
} from "@switchboard/core";
import { yieldToEventLoop } from "./fs-io";
import { JournaledMap } from "./journaled-map";
import type { StoreLogger } from "./logger";
import { SortedList } from "./sorted-list";
import type { StoreHealthTracker } from "./store-health";
import { TrigramIndex } from "./trigram-index";

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
/** Rows a pass checks between two yields to the event loop. */
const VISIBLE_SLICE = 2000;
/** Rows the deferred index build handles between two yields (a few ms). */
const BUILD_SLICE = 1000;
/**
 * A search whose rarest trigram is in more rows than this is answered by a scan in recency order
 * (its matches are common, so a page fills quickly); below it, the candidates are sorted instead.
 */
const SEARCH_MAX_CANDIDATES = 8192;
/** A `mainKey` no key's rest can equal: classifying with it gives a row's kind when it is not a main session. */
const NO_MAIN_KEY = "\u0000";

/** The kind a row has whatever the gateway's `mainKey` (unless it is that main session). */
function kindOutsideMain(row: SessionEntry): string {
  return classifyKey(row.key, { mainKey: NO_MAIN_KEY, ...(row.chatType ? { chatType: row.chatType } : {}) });
}

/** The texts `search` looks in (core's `compileSessionFilter`): key, display name, label. */
const searchTexts = (row: SessionEntry) => [row.key, row.displayName, row.label];

/**
 * Rows in recency order, from a position: `cursorAfter(row)` gives the rows strictly after `row`
 * (all without it). A cursor is valid until the index changes; scans make a new one after a yield.
 */
interface RowSource {
  readonly size: number;
  cursorAfter(after: SessionEntry | undefined): () => SessionEntry | undefined;
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

/** The sessions index's key: what its journal and snapshot records are stored under. */
export const sessionRowKey = (row: SessionEntry): string => row.key;

/**
 * What the index applies to each row read from disk (shares repeated strings, freezes it); it throws
 * on a row of the wrong shape, which the reader then counts as damaged. `doctor --repair` checks
 * rows with it too, so it drops exactly what the open refuses.
 */
export function sessionRowReviver(): (row: SessionEntry) => SessionEntry {
  const pool = new StringPool();
  return (row) => {
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
}

/**
 * The sessions index: all rows in memory (frozen, compact), kept sorted by recency for `list`,
 * persisted through a journal + snapshot pair. Derived indexes make a filtered `list` cost what it
 * returns: rows by kind and by agent (each in recency order), the main sessions by key, and a
 * trigram index for `search`. All of them are built at open and kept current by every write.
 */
export class FileSessionIndex implements SessionIndexStore {
  private readonly byRecency = new SortedList<SessionEntry>(compareSessionsByRecency);
  /** sessionId → key, or keys when several rows share it. */
  private readonly keysBySessionId = new Map<string, string | string[]>();
  private readonly versions = new RowVersions("session");
  /** The JSON `prepare` made of each row it returned (rows are frozen, so it stays true). */
  private readonly preparedJson = new WeakMap<SessionEntry, string>();
  /** Each row's kind when it is not a main session (rows are immutable, so it holds). */
  private readonly kindOf = new WeakMap<SessionEntry, string>();
  private readonly byKind = new Map<string, SortedList<SessionEntry>>();
  private readonly byAgent = new Map<string, SortedList<SessionEntry>>();
  /**
   * The `<id>` of every `agent:<id>:…` key, with its count: the main sessions of a `mainKey` are
   * among `agent:<id>:<mainKey>` (plus `global` and the bare key), found without a scan.
   */
  private readonly keyAgents = new Map<string, number>();
  private readonly search = new TrigramIndex();
  /**
   * Kinds and search postings of the rows loaded at open, built in slices after open (they cost
   * ~0.4 s for 100k rows, which would delay start-up); lists that need them wait for it.
   */
  private building: Promise<void> | undefined;
  /** Loaded rows whose deferred build has not started yet. */
  private unbuilt: readonly SessionEntry[] | undefined;

  private constructor(
    private readonly journal: JournaledMap<SessionEntry>,
    private readonly revive: (row: SessionEntry) => SessionEntry,
  ) {
    const rows = [...journal.values.values()].sort(compareSessionsByRecency);
    this.byRecency.reset(rows, true);
    // What every list needs is built now: rows by agent (filled in order), the keys' agents.
    const byAgent = new Map<string, SessionEntry[]>();
    for (const row of rows) {
      this.link(row);
      const list = byAgent.get(row.agentId);
      if (list) list.push(row);
      else byAgent.set(row.agentId, [row]);
      countKeyAgent(this.keyAgents, row.key, 1);
    }
    for (const [agentId, sorted] of byAgent) listIn(this.byAgent, agentId).reset(sorted, true);
    this.unbuilt = rows;
  }

  /**
   * Starts the deferred build (the store calls it once it is open, so the build does not compete
   * with the rest of the start-up); a list that needs it before then starts it too.
   */
  startIndexing(): Promise<void> {
    const rows = this.unbuilt;
    if (rows === undefined) return this.building ?? Promise.resolve();
    this.unbuilt = undefined;
    this.building = this.buildDeferred(rows).finally(() => {
      this.building = undefined;
    });
    return this.building;
  }

  static async open(options: FileSessionIndexOptions): Promise<FileSessionIndex> {
    const revive = sessionRowReviver();
    const journal = await JournaledMap.open<SessionEntry>({
      dir: options.dir,
      format: "sessions",
      keyOf: sessionRowKey,
      durable: options.durable,
      snapshotEvery: options.snapshotEvery,
      logger: options.logger,
      revive,
      ...(options.health ? { health: options.health } : {}),
    });
    return new FileSessionIndex(journal, revive);
  }

  async get(key: string): Promise<SessionEntry | undefined> {
    const row = this.journal.get(key);
    return row ? copySession(row) : undefined;
  }

  /** The stored row itself (frozen, not a copy), read synchronously: for checks made with a write. */
  peek(key: string): SessionEntry | undefined {
    return this.journal.get(key);
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
    return this.putChecked(this.prepare(entry), options);
  }

  /** A validated, frozen, compact copy of `entry`, as the index stores it. */
  prepare(entry: SessionEntry): SessionEntry {
    // The JSON round trip gives every row the same plain shape as rows loaded from disk, which
    // keeps the list scan's property reads fast (validator output objects are slower to read).
    // Its JSON is kept for the journal line, so a put serialises the row once.
    const json = JSON.stringify(validateSessionEntry(entry));
    const row = this.revive(JSON.parse(json) as SessionEntry);
    this.preparedJson.set(row, json);
    return row;
  }

  /** CONFLICT unless the row's version is `expected` (undefined: no check), as `put` checks it. */
  checkVersion(key: string, expected: number | undefined): void {
    this.versions.check(key, this.journal.get(key) !== undefined, expected);
  }

  /** `put` of a row from `prepare`. */
  async putChecked(row: SessionEntry, options: WriteOptions = {}): Promise<number> {
    const previous = this.journal.get(row.key);
    // Check and write happen in one synchronous step, so no other write can come in between.
    this.versions.check(row.key, previous !== undefined, options.expectedVersion);
    const { version, undo } = this.versions.bump(row.key);
    const json = this.preparedJson.get(row);
    const done = this.journal.put(
      row,
      (restored) => {
        // The write failed: the derived indexes follow the map back.
        undo();
        this.replace(row, restored);
      },
      json,
    );
    this.replace(previous, row);
    await done;
    return version;
  }

  async touch(key: string, touch: SessionTouch): Promise<boolean> {
    const valid = validateSessionTouch(touch);
    // Applied to the row as it is once its pending write is durable or undone (see `settledFor`).
    const pending = this.journal.settledFor(key);
    if (pending) await pending;
    const previous = this.journal.get(key);
    if (!previous || previous.sessionId !== valid.sessionId) return false;
    // The row's other fields are already shared and frozen: only the copy needs freezing.
    const row = Object.freeze(touchedRow(previous, valid));
    this.versions.bump(key);
    this.journal.putLazily(row);
    this.retime(previous, row);
    return true;
  }

  async delete(key: string, options: WriteOptions = {}): Promise<boolean> {
    const previous = this.journal.get(key);
    this.versions.check(key, previous !== undefined, options.expectedVersion);
    if (!previous) return false;
    const version = this.versions.forget(key);
    const done = this.journal.delete(key, (restored) => {
      this.versions.restore(key, version);
      this.replace(undefined, restored);
    });
    this.replace(previous, undefined);
    return done;
  }

  async list(query: SessionListQuery, options: SessionListOptions = {}): Promise<SessionListResult> {
    const mainKey = typeof query?.mainKey === "string" ? query.mainKey : "main";
    const classify = this.classifier(mainKey);
    // Validates the query (INVALID_REQUEST naming the field) before anything reads it.
    const matches = compileSessionFilter(query, classify);
    const visible = compileListVisibility(options);
    // Only the main sessions and the agents' rows are there from the start.
    const needsBuild =
      query.kinds?.some((kind) => kind !== "main") || (query.search !== undefined && query.search !== "");
    if (needsBuild && (this.building || this.unbuilt)) await this.startIndexing();
    return this.collect(this.plan(query, mainKey, matches), query, matches, visible);
  }

  /** Core's key rules for `mainKey`, from what the index keeps per row (no key parsing per row). */
  private classifier(mainKey: string): SessionClassifier {
    return (row) => {
      if (row.key === "global" || keyRest(row.key) === mainKey) return "main";
      return this.kindOf.get(row) ?? kindOutsideMain(row);
    };
  }

  /**
   * The smallest row source that holds every match: the rows of the wanted kinds, of the agent, the
   * search candidates, or all rows. Each is in recency order, so a page stops at `limit`.
   */
  private plan(query: SessionListQuery, mainKey: string, matches: (row: SessionEntry) => boolean): RowSource {
    let best: RowSource = this.byRecency;
    const consider = (source: RowSource) => {
      if (source.size < best.size) best = source;
    };
    if (query.agentId !== undefined) consider(this.byAgent.get(query.agentId) ?? emptySource);
    if (query.kinds !== undefined) {
      const sources: RowSource[] = [];
      for (const kind of new Set(query.kinds)) {
        if (kind !== "main") {
          const list = this.byKind.get(kind);
          if (list) sources.push(list);
        } else {
          // A superset of the main sessions (the filter checks each with core's key rules).
          const keys = ["global", mainKey];
          for (const agent of this.keyAgents.keys()) keys.push(`agent:${agent}:${mainKey}`);
          sources.push(this.arraySource(keys));
        }
      }
      consider(mergeSources(sources));
    }
    if (query.search !== undefined && best.size > 0) {
      const keys = this.search.candidates(query.search, Math.min(SEARCH_MAX_CANDIDATES, best.size));
      if (keys !== undefined) consider(this.arraySource(keys, matches));
    }
    return best;
  }

  /** The current rows of `keys` (those `keep` admits), sorted by recency. */
  private arraySource(keys: readonly string[], keep?: (row: SessionEntry) => boolean): RowSource {
    const rows: SessionEntry[] = [];
    for (const key of keys) {
      const row = this.journal.get(key);
      if (row && (!keep || keep(row))) rows.push(row);
    }
    rows.sort(compareSessionsByRecency);
    const current = (row: SessionEntry) => this.journal.get(row.key) === row;
    return {
      size: rows.length,
      cursorAfter(after) {
        let index = 0;
        if (after !== undefined) {
          let high = rows.length;
          while (index < high) {
            const middle = (index + high) >>> 1;
            if (compareSessionsByRecency(rows[middle]!, after) <= 0) index = middle + 1;
            else high = middle;
          }
        }
        // A row replaced meanwhile moved ahead of the cursor (it is newer): it is not visited again.
        return () => {
          while (index < rows.length) {
            const row = rows[index++]!;
            if (current(row)) return row;
          }
          return undefined;
        };
      },
    };
  }

  /**
   * One pass over `source` in slices that yield to the event loop between them, resuming after the
   * last row it visited (a row updated meanwhile moves ahead of the cursor, so it is never visited
   * twice). With the caller's visibility predicate, `hidden` counts the withheld rows among those the
   * pass went through (newer than the last row returned; every matching row when fewer than `limit`
   * are visible).
   */
  private async collect(
    source: RowSource,
    query: SessionListQuery,
    matches: (entry: SessionEntry) => boolean,
    visible: ((entry: SessionEntry) => boolean) | undefined,
  ): Promise<SessionListResult> {
    const { activeSince, limit } = query;
    const entries: SessionEntry[] = [];
    let hidden = 0;
    // A page of a paged list starts right after the previous page's last row (sources seek to it).
    let after: SessionEntry | undefined = query.after
      ? ({ updatedAt: query.after.updatedAt, key: query.after.key } as SessionEntry)
      : undefined;
    for (;;) {
      const next = source.cursorAfter(after);
      for (let inSlice = 0; inSlice < VISIBLE_SLICE; inSlice++) {
        const row = next();
        // Rows are newest first, so nothing past `activeSince` can be active enough.
        if (row === undefined || (activeSince !== undefined && row.updatedAt < activeSince)) {
          return { entries, hidden };
        }
        after = row;
        if (!matches(row)) continue;
        if (visible && !visible(row)) hidden++;
        else {
          entries.push(copySession(row));
          if (entries.length >= limit) return { entries, hidden };
        }
      }
      await yieldToEventLoop();
    }
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

  /** Whether the kind and search indexes of the rows loaded at open are built (see `startIndexing`). */
  get indexed(): boolean {
    return this.unbuilt === undefined && this.building === undefined;
  }

  close(): Promise<void> {
    return this.journal.close();
  }

  /** Current sessionIds and their keys, for the doctor and tests. */
  sessionIds(): ReadonlyMap<string, string | string[]> {
    return this.keysBySessionId;
  }

  /** Kinds and search postings of the rows loaded at open, a slice at a time; rows written meanwhile index themselves. */
  private async buildDeferred(rows: readonly SessionEntry[]): Promise<void> {
    for (let start = 0; start < rows.length; start += BUILD_SLICE) {
      await yieldToEventLoop();
      const end = Math.min(rows.length, start + BUILD_SLICE);
      for (let index = start; index < end; index++) {
        const row = rows[index]!;
        if (this.journal.get(row.key) !== row || this.kindOf.has(row)) continue;
        const kind = kindOutsideMain(row);
        this.kindOf.set(row, kind);
        // Rows come newest first, so each insert lands at the end of its list.
        listIn(this.byKind, kind).insert(row);
        this.search.add(row.key, searchTexts(row));
      }
    }
  }

  /** Moves every index from `previous` (the key's row until now) to `row` (either may be absent). */
  private replace(previous: SessionEntry | undefined, row: SessionEntry | undefined): void {
    if (previous) {
      this.byRecency.remove(previous);
      this.unlink(previous);
      dropFrom(this.byAgent, previous.agentId, previous);
      if (!row) countKeyAgent(this.keyAgents, previous.key, -1);
    }
    if (row) {
      this.byRecency.insert(row);
      this.link(row);
      listIn(this.byAgent, row.agentId).insert(row);
      if (!previous) countKeyAgent(this.keyAgents, row.key, 1);
    }
    // A loaded row the deferred build has not reached yet has no kind or postings to move.
    const built = previous !== undefined && this.kindOf.has(previous) ? previous : undefined;
    if (built) {
      dropFrom(this.byKind, this.kindOf.get(built)!, built);
      if (!row || !sameSearchTexts(built, row)) this.search.remove(built.key, searchTexts(built));
    }
    if (row) {
      const kind =
        built !== undefined && built.chatType === row.chatType
          ? this.kindOf.get(built)!
          : kindOutsideMain(row);
      this.kindOf.set(row, kind);
      listIn(this.byKind, kind).insert(row);
      if (!built || !sameSearchTexts(built, row)) this.search.add(row.key, searchTexts(row));
    }
  }

  /**
   * `replace` for a row whose `updatedAt` alone changed (a touch): only the recency-ordered lists
   * move it; its key, sessionId, agent, kind and search texts are the same.
   */
  private retime(previous: SessionEntry, row: SessionEntry): void {
    const kind = this.kindOf.get(previous);
    // A loaded row the deferred build has not reached yet: the new row indexes itself in full.
    if (kind === undefined) {
      this.replace(previous, row);
      return;
    }
    this.byRecency.remove(previous);
    this.byRecency.insert(row);
    const byAgent = this.byAgent.get(row.agentId);
    if (byAgent?.remove(previous)) byAgent.insert(row);
    this.kindOf.set(row, kind);
    const byKind = this.byKind.get(kind);
    if (byKind?.remove(previous)) byKind.insert(row);
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

const emptySource: RowSource = { size: 0, cursorAfter: () => () => undefined };

/** Rows of one key whose `search` texts are the same (the key is the same by construction). */
const sameSearchTexts = (a: SessionEntry, b: SessionEntry) =>
  a.displayName === b.displayName && a.label === b.label;

/** Counts the `<id>` of an `agent:<id>:…` key up or down in `counts`. */
function countKeyAgent(counts: Map<string, number>, key: string, change: 1 | -1): void {
  if (!key.startsWith("agent:")) return;
  const end = key.indexOf(":", 6);
  if (end < 0) return;
  const agent = key.slice(6, end);
  const count = (counts.get(agent) ?? 0) + change;
  if (count > 0) counts.set(agent, count);
  else counts.delete(agent);
}

function listIn(map: Map<string, SortedList<SessionEntry>>, name: string): SortedList<SessionEntry> {
  let list = map.get(name);
  if (!list) {
    list = new SortedList<SessionEntry>(compareSessionsByRecency, 256);
    map.set(name, list);
  }
  return list;
}

function dropFrom(map: Map<string, SortedList<SessionEntry>>, name: string, row: SessionEntry): void {
  const list = map.get(name);
  if (!list) return;
  list.remove(row);
  if (list.size === 0) map.delete(name);
}

/** Several recency-ordered sources as one (a row in two of them comes out once). */
function mergeSources(sources: readonly RowSource[]): RowSource {
  if (sources.length === 0) return emptySource;
  if (sources.length === 1) return sources[0]!;
  return {
    size: sources.reduce((sum, source) => sum + source.size, 0),
    cursorAfter(after) {
      const cursors = sources.map((source) => source.cursorAfter(after));
      const heads = cursors.map((cursor) => cursor());
      let last: SessionEntry | undefined;
      return () => {
        for (;;) {
          let best = -1;
          for (let index = 0; index < heads.length; index++) {
            const head = heads[index];
            if (head !== undefined && (best < 0 || compareSessionsByRecency(head, heads[best]!) < 0))
              best = index;
          }
          if (best < 0) return undefined;
          const row = heads[best]!;
          heads[best] = cursors[best]!();
          if (row !== last) {
            last = row;
            return row;
          }
        }
      };
    },
  };
}
