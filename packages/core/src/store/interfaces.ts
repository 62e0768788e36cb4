import type { AuditRecord } from "../audit/index";
import type { RunRecord, RunStatus } from "./run-record";
import type { SessionEntry } from "./session-entry";
import type { TranscriptEntry, TranscriptEntryInput, TranscriptHeader } from "./transcript-entry";

/**
 * Store interfaces. Every method is async so that a networked store (PostgreSQL, several gateway
 * instances) can implement the same contract later. A resolved write promise means durable.
 */

export interface SessionListQuery {
  agentId?: string;
  /** Canonical session kinds to keep; the kind is derived from the key by the caller-supplied classifier. */
  kinds?: readonly string[];
  /** Only sessions with `updatedAt >= activeSince` (ms epoch). */
  activeSince?: number;
  spawnedBy?: string;
  label?: string;
  /** Case-insensitive substring over key, displayName and label. */
  search?: string;
  includeArchived?: boolean;
  limit: number;
}

export interface SessionListResult {
  /** Sorted by `updatedAt` descending (ties: key ascending), at most `limit`. */
  entries: SessionEntry[];
  /** Rows that matched the query but were withheld by the `visible` predicate. */
  hidden: number;
}

export interface SessionIndexStore {
  get(key: string): Promise<SessionEntry | undefined>;
  /** Keys whose *current* sessionId is this one (normally 0 or 1). */
  keysForSessionId(sessionId: string): Promise<string[]>;
  /** Insert or replace the whole row. */
  put(entry: SessionEntry): Promise<void>;
  delete(key: string): Promise<boolean>;
  /**
   * Query the index. `classify` maps an entry to its kind (kept in core's key rules, not in the
   * store); `visible` is the caller's policy predicate, applied after the plain filters.
   */
  list(
    query: SessionListQuery,
    options?: { classify?: (entry: SessionEntry) => string; visible?: (entry: SessionEntry) => boolean },
  ): Promise<SessionListResult>;
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
}

export interface RunListQuery {
  statuses?: readonly RunStatus[];
  /** Runs whose spawn announce is still `pending`. */
  pendingAnnounce?: boolean;
  sessionKey?: string;
  limit?: number;
}

export interface RunRegistryStore {
  /** Insert or replace a run record (durable on resolve). */
  put(run: RunRecord): Promise<void>;
  get(runId: string): Promise<RunRecord | undefined>;
  getByIdempotencyKey(idempotencyKey: string): Promise<RunRecord | undefined>;
  list(query: RunListQuery): Promise<RunRecord[]>;
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
}

/** Small durable key/value space for gateway bookkeeping (event seq high-water mark, keys, tokens). */
export interface MetaStore {
  get(name: string): Promise<string | undefined>;
  set(name: string, value: string): Promise<void>;
}

export interface Store {
  readonly sessions: SessionIndexStore;
  readonly transcripts: TranscriptStore;
  readonly runs: RunRegistryStore;
  readonly audit: AuditStore;
  readonly meta: MetaStore;
  /** Flush everything and release resources (and locks). */
  close(): Promise<void>;
}
