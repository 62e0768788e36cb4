import type { AuditRecord } from "../audit/index";
import type { WriteOptions } from "./row-versions";
import type { RunOrigin, RunRecord, RunStatus } from "./run-record";
import type { SessionEntry, SessionTouch } from "./session-entry";
import type { ResidualVisibility, SessionVisibility } from "./session-visibility";
import type { TranscriptEntry, TranscriptEntryInput, TranscriptHeader } from "./transcript-entry";

/**
 * Store interfaces. Every method is async so that a networked store (PostgreSQL, several gateway
 * instances) can implement the same contract later. A resolved write promise means durable.
 */

export interface SessionListQuery {
  agentId?: string;
  /** Canonical session kinds to keep; the kind is derived from the key by core's key rules (`mainKey`). */
  kinds?: readonly string[];
  /** The gateway's main session key (default `main`), which decides the `main` kind. */
  mainKey?: string;
  /** Only sessions with `updatedAt >= activeSince` (ms epoch). */
  activeSince?: number;
  spawnedBy?: string;
  label?: string;
  /** Case-insensitive substring over key, displayName and label. */
  search?: string;
  includeArchived?: boolean;
  /**
   * Paging: only rows after this position in list order (`updatedAt` descending, then key), i.e. the
   * last row of the previous page. A row updated meanwhile moves ahead and is not seen again.
   */
  after?: ListPosition;
  limit: number;
}

/** A position in a session list: the `updatedAt` and key of a row. */
export interface ListPosition {
  updatedAt: number;
  key: string;
}

/**
 * A row with the version a compare-and-set write must name (see `WriteOptions`). Versions are
 * only compared for equality; a networked store keeps them in a column, the embedded stores
 * (one process) start them again at each open.
 */
export interface Versioned<T> {
  row: T;
  version: number;
}

export interface SessionListOptions {
  /** What the caller may see, as data (a networked store applies it in its query). */
  visibility?: SessionVisibility;
  /**
   * Per-row check the data cannot express (user policy rules). Runs in the gateway process, not in
   * the store: a SQL store applies `visibility` in SQL and this to the rows that come back.
   */
  residual?: ResidualVisibility;
}

export interface SessionListResult {
  /** Sorted by `updatedAt` descending (ties: key ascending), at most `limit`. */
  entries: SessionEntry[];
  /**
   * Rows that matched the query but were withheld by visibility (and residual), among the rows the
   * listing went through: those newer than the last row returned, or every matching row when fewer
   * than `limit` were visible. Rows past a full page are not looked at (a list costs what it returns).
   */
  hidden: number;
}

export interface SessionIndexStore {
  get(key: string): Promise<SessionEntry | undefined>;
  /** The row and its version, for a compare-and-set `put`. */
  getVersioned(key: string): Promise<Versioned<SessionEntry> | undefined>;
  /** Keys whose *current* sessionId is this one (normally 0 or 1). */
  keysForSessionId(sessionId: string): Promise<string[]>;
  /**
   * Insert or replace the whole row; resolves to the row's new version. With `expectedVersion`,
   * a compare-and-set: CONFLICT (naming the key and both versions) when the row changed meanwhile.
   */
  put(entry: SessionEntry, options?: WriteOptions): Promise<number>;
  /**
   * Marks activity on the row of `key` (see `SessionTouch`): true when its current sessionId is
   * `touch.sessionId` and it was touched. Reads see it at once and the row's version moves on (a
   * compare-and-set based on an older read is refused), but it need not be durable when this
   * resolves: a store may gather touches and write them within a short interval (the file store:
   * 100 ms, and at close). A crash can lose the touches of that last interval, nothing else, which
   * is why only the activity mark goes this way.
   */
  touch(key: string, touch: SessionTouch): Promise<boolean>;
  /** Removes the row; false when there was none. `expectedVersion` as for `put`. */
  delete(key: string, options?: WriteOptions): Promise<boolean>;
  /** Query the index: the plain filters of `query`, then the caller's visibility (see `SessionListOptions`). */
  list(query: SessionListQuery, options?: SessionListOptions): Promise<SessionListResult>;
  count(): Promise<number>;
}

export interface TranscriptReadOptions {
  /** Maximum entries returned (newest kept). */
  limit: number;
  /** Only entries with `seq < before`. */
  before?: number;
  /** Output byte cap over the serialised entries; whole entries are dropped from the old end. */
  maxBytes?: number;
  /** Keep only entries this returns true for (filtered during the reverse scan). */
  filter?: (entry: TranscriptEntry) => boolean;
}

export interface TranscriptReadResult {
  /** Oldest first. */
  entries: TranscriptEntry[];
  /** True when entries matching the query were left out because of `maxBytes`. */
  truncated: boolean;
  /** A `before` cursor for the next older page, when older matching entries may exist. */
  nextBefore?: number;
  /**
   * Lines in the scanned range that could not be read (damaged on disk) and were skipped; absent
   * when there were none. The rest of the transcript is still served.
   */
  damaged?: number;
}

export interface TranscriptStore {
  /** Create the transcript file for a new sessionId (idempotent for the same header). */
  create(header: Omit<TranscriptHeader, "type" | "version">): Promise<void>;
  /**
   * Append entries in order; the store assigns `seq` (strictly increasing per session) and fills
   * `id`/`ts` when absent. Resolves only after the bytes are durable. Validates every entry first:
   * one bad entry rejects the whole call and nothing is written.
   */
  append(sessionId: string, entries: readonly TranscriptEntryInput[]): Promise<TranscriptEntry[]>;
  /** Tail read: cost proportional to what is returned, not to the file size. */
  read(sessionId: string, options: TranscriptReadOptions): Promise<TranscriptReadResult>;
  lastSeq(sessionId: string): Promise<number>;
  exists(sessionId: string): Promise<boolean>;
  /** Keep the transcript as an archive (renamed, not erased). */
  archive(sessionId: string, reason: "reset" | "delete" | "archive"): Promise<void>;
  /** Erase the transcript for good (spawn cleanup "delete"). */
  remove(sessionId: string): Promise<void>;
  /** Where the transcript lives, for display (`transcriptPath`). */
  locate(sessionId: string): string;
  /**
   * Retention: erase at most `limit` archived transcripts archived before `archivedBefore` (ms epoch),
   * oldest first; resolves to how many went. Live transcripts are never touched.
   */
  pruneArchives(options: ArchivePruneOptions): Promise<number>;
}

export interface ArchivePruneOptions {
  archivedBefore: number;
  limit: number;
}

export interface RunListQuery {
  statuses?: readonly RunStatus[];
  /** Runs whose spawn announce is still `pending`. */
  pendingAnnounce?: boolean;
  /** Runs whose send follow-up is still `pending` (`RunRecord.followUp`). */
  pendingFollowUp?: boolean;
  /** Runs whose reply post to its channel is still `pending` (`RunRecord.replyPost`). */
  pendingReplyPost?: boolean;
  /** Runs of these origins only. */
  origins?: readonly RunOrigin[];
  sessionKey?: string;
  agentId?: string;
  limit?: number;
}

export interface RunRegistryStore {
  /**
   * Insert or replace a run record (durable on resolve); resolves to its new version. An
   * `idempotencyKey` is unique: a record naming one another run holds rejects with CONFLICT (a
   * UNIQUE index in SQL), so two instances can never both create the run for one key.
   * `expectedVersion` makes it a compare-and-set (`0`: insert only). An insert-only put — how a new
   * run is made — is refused with NOT_FOUND (`session not found: <key> (archived)`) while the row of
   * the run's `sessionKey` is archived, in the same step as the insert (see
   * `Store.archiveIdleSession`); a key without a row is not checked.
   */
  put(run: RunRecord, options?: WriteOptions): Promise<number>;
  get(runId: string): Promise<RunRecord | undefined>;
  /** The record and its version, for a compare-and-set `put`. */
  getVersioned(runId: string): Promise<Versioned<RunRecord> | undefined>;
  getByIdempotencyKey(idempotencyKey: string): Promise<RunRecord | undefined>;
  list(query: RunListQuery): Promise<RunRecord[]>;
  /**
   * Retention: delete at most `limit` ended runs (ok, error, timeout) whose `endedAt` is before
   * `endedBefore`, oldest first, except runs whose spawn announce or send follow-up is still pending,
   * runs of `exceptOrigins` and the runs named in `keep`; resolves to how many went (their
   * idempotency keys are free again).
   */
  prune(options: RunPruneOptions): Promise<number>;
  /** How many ended runs (ok, error, timeout) the registry holds: retention's count cap. */
  countEnded(): Promise<number>;
}

export interface RunPruneOptions {
  endedBefore: number;
  limit: number;
  keep?: ReadonlySet<string>;
  exceptOrigins?: readonly RunOrigin[];
}

export interface AuditStore {
  /** Persist records already chained by core's `AuditChain` (durable on resolve). */
  append(records: readonly AuditRecord[]): Promise<void>;
  last(): Promise<AuditRecord | undefined>;
  /** Records with `index > after`, oldest first, at most `limit` (no limit = all). */
  read(options?: { after?: number; limit?: number }): Promise<AuditRecord[]>;
  /** The newest `limit` records, oldest first. */
  tail(limit: number): Promise<AuditRecord[]>;
  count(): Promise<number>;
  /**
   * Every record in the order stored, `pageSize` (>= 1) at a time: what a check of the whole log
   * walks (`audit.verify`), in memory bounded by the page. Not `read({ after })` pages: those select
   * by index, so a record stored out of order (a tampered log) would be skipped, not reported.
   */
  scan(pageSize: number): AsyncIterable<AuditRecord[]>;
}

/** Small durable key/value space for gateway bookkeeping (event seq high-water mark, keys, tokens). */
export interface MetaStore {
  get(name: string): Promise<string | undefined>;
  set(name: string, value: string): Promise<void>;
}

/**
 * A session's taint rising, as one unit: the transcript's `taint` entry, the row with its new taint
 * and the audit record of the rise. A store commits all three or none, also across a crash (kill
 * -9): a networked store in one transaction, the file store through an intent record replayed at
 * open.
 */
export interface TaintRise {
  /** The session's whole row with its taint raised; `row.sessionId` names the transcript. */
  row: SessionEntry;
  /** The transcript's entry of type `taint` (the store assigns `seq`; fills `id` and `ts` when absent). */
  entry: TranscriptEntryInput;
  /** The rise's audit record, already chained: it must follow the log's last record. */
  audit: AuditRecord;
  /**
   * Compare-and-set on the row, as for `SessionIndexStore.put`: CONFLICT, and nothing of the rise
   * written, when the row's version is another (another gateway instance wrote it meanwhile).
   */
  expectedVersion?: number;
}

export interface TaintRiseResult {
  /** The transcript entry as written. */
  entry: TranscriptEntry;
  /** The row's new version (see `SessionIndexStore.put`). */
  version: number;
}

export interface ArchiveIdleOptions {
  /** The transcript the caller found idle: a row reset since (another sessionId) is left alone. */
  sessionId: string;
  /** When it is archived (ms epoch). */
  at: number;
}

/** A part of the store that cannot write right now, and why. */
export interface StoreDegradation {
  /** What failed, naming the cause and the file, e.g. "disk full (ENOSPC) writing …; free space and retry". */
  cause: string;
  /** ISO time of the first failure of this kind since the store was last healthy. */
  since: string;
}

export interface StoreHealth {
  /** False while writes are being refused (reads keep working). */
  ok: boolean;
  /** One entry per failing part (e.g. `sessions journal`, `transcripts`), when not ok. */
  degraded?: Record<string, StoreDegradation>;
}

export interface Store {
  readonly sessions: SessionIndexStore;
  readonly transcripts: TranscriptStore;
  readonly runs: RunRegistryStore;
  readonly audit: AuditStore;
  readonly meta: MetaStore;
  /**
   * Commits a taint rise as one unit (see `TaintRise`): resolves once all three parts are durable.
   * Everything is checked before anything is written (INVALID_REQUEST naming the field, NOT_FOUND
   * for a missing transcript, CONFLICT for an audit record that does not follow the log's last);
   * a rejected call leaves none of the three behind. No compare-and-set: the caller holds the
   * session's write lock.
   */
  commitTaintRise(rise: TaintRise): Promise<TaintRiseResult>;
  /**
   * Marks the row of `key` archived (a finished sub-agent's session) when it is still on
   * `sessionId`, not archived yet, and no run of the key is `queued` or `running`: resolves to the
   * archived row (`archivedAt` = `at`, `updatedAt` moved up to it), else undefined with nothing
   * written. It is one step against the insert-only `runs.put` that makes a run, which refuses an
   * archived row: of an archive and a new run of the key at the same moment, on any instance, exactly
   * one happens, so no run ever goes on against an archived transcript. The transcript is left to
   * the caller (core's `archiveSession`).
   */
  archiveIdleSession(key: string, options: ArchiveIdleOptions): Promise<SessionEntry | undefined>;
  /**
   * Whether writes currently succeed. A store that hit a storage fault (disk full, too many open
   * files, permissions) reports it here until writes work again; it never needs a restart.
   */
  health(): Promise<StoreHealth>;
  /**
   * Starts background work the store was asked to leave until its owner serves (the file store's
   * `deferIndexing`: building its kind and search indexes), so that work does not slow the owner's
   * own start-up. Optional; a no-op when nothing was deferred.
   */
  startDeferredWork?(): void;
  /** Flush everything and release resources (and locks). */
  close(): Promise<void>;
}
