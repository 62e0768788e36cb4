import type { AuditRecord } from "../audit/index";
import { SwitchboardError } from "../errors";
import type {
  AuditStore,
  MetaStore,
  RunListQuery,
  RunRegistryStore,
  SessionIndexStore,
  SessionListOptions,
  SessionListQuery,
  SessionListResult,
  Store,
  TranscriptReadOptions,
  TranscriptReadResult,
  TranscriptStore,
} from "./interfaces";
import { RowVersions } from "./row-versions";
import { type RunRecord, TERMINAL_RUN_STATUSES } from "./run-record";
import { type SessionEntry, touchedRow } from "./session-entry";
import { archivedSessionError, idleArchiveRow } from "./session-lifecycle";
import {
  buildTranscriptHeader,
  checkIdempotencyKeyFree,
  checkPruneOptions,
  compareRunsNewestFirst,
  compareSessionsByRecency,
  compileListVisibility,
  compileRunFilter,
  compileSessionFilter,
  DEFAULT_MAX_ENTRY_BYTES,
  normaliseAuditRead,
  normaliseReadOptions,
  parseSessionId,
  prepareTranscriptAppend,
  runPrunable,
  TailCollector,
  utf8ByteLength,
  validateAuditBatch,
  validateMetaName,
  validateMetaValue,
  validateRunRecord,
  validateScanPageSize,
  validateSessionEntry,
  validateSessionTouch,
  validateTailLimit,
  validateTaintRise,
} from "./store-rules";
import type { TranscriptEntry, TranscriptEntryInput, TranscriptHeader } from "./transcript-entry";

export interface MemoryStoreOptions {
  /** Largest serialised transcript entry accepted (default 1 MiB). */
  maxEntryBytes?: number;
  /**
   * The data to work on. Two stores given one backend behave like two gateway instances on one
   * database (compare-and-set and unique idempotency keys hold across them); default: a new one.
   */
  backend?: MemoryBackend;
}

/** Plain data is cloned in and out, so callers can never mutate stored state by reference. */
function clone<T>(value: T): T {
  return structuredClone(value);
}

/** One transcript of a memory backend. */
export interface MemoryTranscript {
  header: TranscriptHeader;
  entries: TranscriptEntry[];
  sizes: number[];
}

/** What a memory store holds; opaque to callers, who only pass it to `createMemoryStore`. */
export interface MemoryBackend {
  readonly sessionRows: Map<string, SessionEntry>;
  readonly sessionVersions: RowVersions;
  readonly transcriptFiles: Map<string, MemoryTranscript>;
  readonly runRows: Map<string, RunRecord>;
  readonly runVersions: RowVersions;
  readonly auditRecords: AuditRecord[];
  readonly metaValues: Map<string, string>;
  /** Archived transcripts in archive order (only their time is kept: retention prunes them). */
  readonly archives: { sessionId: string; archivedAt: number }[];
}

export function createMemoryBackend(): MemoryBackend {
  return {
    sessionRows: new Map(),
    sessionVersions: new RowVersions("session"),
    transcriptFiles: new Map(),
    runRows: new Map(),
    runVersions: new RowVersions("run"),
    auditRecords: [],
    metaValues: new Map(),
    archives: [],
  };
}

/**
 * A store that keeps everything in memory and loses it on exit: for tests, simulations and
 * embedding without a disk. It follows the same contract as the file store.
 */
export function createMemoryStore(options: MemoryStoreOptions = {}): Store {
  const maxEntryBytes = options.maxEntryBytes ?? DEFAULT_MAX_ENTRY_BYTES;
  const backend = options.backend ?? createMemoryBackend();
  const {
    sessionRows,
    sessionVersions,
    transcriptFiles,
    runRows,
    runVersions,
    auditRecords,
    metaValues,
    archives,
  } = backend;
  let closed = false;
  const assertOpen = () => {
    if (closed) throw new SwitchboardError("UNAVAILABLE", "store is closed");
  };

  const sessions: SessionIndexStore = {
    async get(key) {
      assertOpen();
      const row = sessionRows.get(key);
      return row ? clone(row) : undefined;
    },
    async getVersioned(key) {
      assertOpen();
      const row = sessionRows.get(key);
      return row ? { row: clone(row), version: sessionVersions.of(key, true) } : undefined;
    },
    async keysForSessionId(sessionId) {
      assertOpen();
      const id = parseSessionId(sessionId);
      return [...sessionRows.values()]
        .filter((row) => row.sessionId === id)
        .map((row) => row.key)
        .sort();
    },
    async put(entry, writeOptions = {}) {
      assertOpen();
      const row = validateSessionEntry(entry);
      sessionVersions.check(row.key, sessionRows.has(row.key), writeOptions.expectedVersion);
      sessionRows.set(row.key, clone(row));
      return sessionVersions.bump(row.key).version;
    },
    async touch(key, touch) {
      assertOpen();
      const valid = validateSessionTouch(touch);
      const row = sessionRows.get(key);
      if (!row || row.sessionId !== valid.sessionId) return false;
      sessionRows.set(key, touchedRow(row, valid));
      sessionVersions.bump(key);
      return true;
    },
    async delete(key, writeOptions = {}) {
      assertOpen();
      sessionVersions.check(key, sessionRows.has(key), writeOptions.expectedVersion);
      sessionVersions.forget(key);
      return sessionRows.delete(key);
    },
    async list(query: SessionListQuery, listOptions: SessionListOptions = {}): Promise<SessionListResult> {
      assertOpen();
      const matches = compileSessionFilter(query);
      const visible = compileListVisibility(listOptions);
      const sorted = [...sessionRows.values()].filter(matches).sort(compareSessionsByRecency);
      const entries: SessionEntry[] = [];
      let hidden = 0;
      for (const row of sorted) {
        if (entries.length >= query.limit) break;
        if (visible && !visible(row)) {
          hidden++;
          continue;
        }
        entries.push(clone(row));
      }
      return { entries, hidden };
    },
    async count() {
      assertOpen();
      return sessionRows.size;
    },
  };

  const getTranscript = (sessionId: string): MemoryTranscript => {
    const id = parseSessionId(sessionId);
    const transcript = transcriptFiles.get(id);
    if (!transcript) throw new SwitchboardError("NOT_FOUND", `no transcript for sessionId ${id}`);
    return transcript;
  };
  const transcripts: TranscriptStore = {
    async create(input) {
      assertOpen();
      const header = buildTranscriptHeader(input);
      const existing = transcriptFiles.get(header.sessionId);
      if (existing) {
        if (existing.header.key !== header.key) {
          throw new SwitchboardError(
            "CONFLICT",
            `transcript ${header.sessionId} already exists for key ${existing.header.key}`,
          );
        }
        return;
      }
      transcriptFiles.set(header.sessionId, { header, entries: [], sizes: [] });
    },
    async append(sessionId, entries: readonly TranscriptEntryInput[]) {
      assertOpen();
      const transcript = getTranscript(sessionId);
      const lastSeq = transcript.entries.at(-1)?.seq ?? 0;
      const final = prepareTranscriptAppend(entries, { lastSeq, maxEntryBytes });
      final.entries.forEach((entry, index) => {
        transcript.entries.push(entry);
        transcript.sizes.push(utf8ByteLength(final.lines[index]!));
      });
      return clone(final.entries);
    },
    async read(sessionId, readOptions: TranscriptReadOptions): Promise<TranscriptReadResult> {
      assertOpen();
      const normalised = normaliseReadOptions(readOptions);
      const transcript = getTranscript(sessionId);
      const collector = new TailCollector(normalised);
      let index = transcript.entries.length - 1;
      for (; index >= 0; index--) {
        if (!collector.offer(clone(transcript.entries[index]!), transcript.sizes[index]!)) break;
      }
      return collector.result(index < 0);
    },
    async lastSeq(sessionId) {
      assertOpen();
      return getTranscript(sessionId).entries.at(-1)?.seq ?? 0;
    },
    async exists(sessionId) {
      assertOpen();
      return transcriptFiles.has(parseSessionId(sessionId));
    },
    async archive(sessionId) {
      assertOpen();
      const id = parseSessionId(sessionId);
      if (transcriptFiles.delete(id)) archives.push({ sessionId: id, archivedAt: Date.now() });
    },
    async pruneArchives(options) {
      assertOpen();
      checkPruneOptions(options, "archivedBefore", options.archivedBefore);
      // Archived in time order, so the prunable ones are a prefix.
      let count = 0;
      while (count < options.limit && archives[count] && archives[count]!.archivedAt < options.archivedBefore)
        count++;
      archives.splice(0, count);
      return count;
    },
    async remove(sessionId) {
      assertOpen();
      transcriptFiles.delete(parseSessionId(sessionId));
    },
    locate(sessionId) {
      return `memory:${parseSessionId(sessionId)}`;
    },
  };

  const idempotencyOwner = (key: string | undefined): string | undefined => {
    if (key === undefined) return undefined;
    for (const run of runRows.values()) if (run.idempotencyKey === key) return run.runId;
    return undefined;
  };
  const runs: RunRegistryStore = {
    async put(run, writeOptions = {}) {
      assertOpen();
      const record = validateRunRecord(run);
      runVersions.check(record.runId, runRows.has(record.runId), writeOptions.expectedVersion);
      if (writeOptions.expectedVersion === 0 && sessionRows.get(record.sessionKey)?.archivedAt !== undefined)
        throw archivedSessionError(record.sessionKey);
      checkIdempotencyKeyFree(record, idempotencyOwner(record.idempotencyKey), runRows.get(record.runId));
      runRows.set(record.runId, clone(record));
      return runVersions.bump(record.runId).version;
    },
    async get(runId) {
      assertOpen();
      const run = runRows.get(runId);
      return run ? clone(run) : undefined;
    },
    async getVersioned(runId) {
      assertOpen();
      const run = runRows.get(runId);
      return run ? { row: clone(run), version: runVersions.of(runId, true) } : undefined;
    },
    async getByIdempotencyKey(idempotencyKey) {
      assertOpen();
      for (const run of runRows.values()) if (run.idempotencyKey === idempotencyKey) return clone(run);
      return undefined;
    },
    async list(query: RunListQuery) {
      assertOpen();
      const matches = compileRunFilter(query);
      const sorted = [...runRows.values()].filter(matches).sort(compareRunsNewestFirst);
      return clone(query.limit === undefined ? sorted : sorted.slice(0, query.limit));
    },
    async prune(options) {
      assertOpen();
      checkPruneOptions(options, "endedBefore", options.endedBefore);
      const doomed = [...runRows.values()]
        .filter((run) => runPrunable(run, options))
        .sort((a, b) => (a.endedAt ?? 0) - (b.endedAt ?? 0))
        .slice(0, options.limit);
      for (const run of doomed) runRows.delete(run.runId);
      return doomed.length;
    },
    async countEnded() {
      assertOpen();
      let ended = 0;
      for (const run of runRows.values()) if (TERMINAL_RUN_STATUSES.includes(run.status)) ended++;
      return ended;
    },
  };

  const audit: AuditStore = {
    async append(records) {
      assertOpen();
      const valid = validateAuditBatch(records, auditRecords.at(-1)?.index);
      auditRecords.push(...clone(valid));
    },
    async last() {
      assertOpen();
      const last = auditRecords.at(-1);
      return last ? clone(last) : undefined;
    },
    async read(readOptions) {
      assertOpen();
      const { after, limit } = normaliseAuditRead(readOptions);
      const selected = auditRecords.filter((record) => after === undefined || record.index > after);
      return clone(limit === undefined ? selected : selected.slice(0, limit));
    },
    async tail(limit) {
      assertOpen();
      const count = validateTailLimit(limit);
      return count === 0 ? [] : clone(auditRecords.slice(-count));
    },
    async count() {
      assertOpen();
      return auditRecords.length;
    },
    async *scan(pageSize) {
      assertOpen();
      const size = validateScanPageSize(pageSize);
      for (let start = 0; start < auditRecords.length; start += size)
        yield clone(auditRecords.slice(start, start + size));
    },
  };

  const meta: MetaStore = {
    async get(name) {
      assertOpen();
      return metaValues.get(validateMetaName(name));
    },
    async set(name, value) {
      assertOpen();
      metaValues.set(validateMetaName(name), validateMetaValue(value));
    },
  };

  return {
    sessions,
    transcripts,
    runs,
    audit,
    meta,
    async commitTaintRise(rise) {
      assertOpen();
      // Every check first, then every change in one synchronous step: all or none.
      const { row, entry, audit: record } = validateTaintRise(rise, auditRecords.at(-1)?.index);
      sessionVersions.check(row.key, sessionRows.has(row.key), rise.expectedVersion);
      const transcript = getTranscript(row.sessionId);
      const final = prepareTranscriptAppend([entry], {
        lastSeq: transcript.entries.at(-1)?.seq ?? 0,
        maxEntryBytes,
      });
      transcript.entries.push(final.entries[0]!);
      transcript.sizes.push(utf8ByteLength(final.lines[0]!));
      sessionRows.set(row.key, clone(row));
      const { version } = sessionVersions.bump(row.key);
      auditRecords.push(clone(record));
      return { entry: clone(final.entries[0]!), version };
    },
    async archiveIdleSession(key, archiveOptions) {
      assertOpen();
      // Checks and write in one synchronous step, like every write here.
      const found = idleArchiveRow(sessionRows.get(key), archiveOptions);
      if (!found) return undefined;
      for (const run of runRows.values())
        if (run.sessionKey === key && !TERMINAL_RUN_STATUSES.includes(run.status)) return undefined;
      const archived = validateSessionEntry(found);
      sessionRows.set(key, clone(archived));
      sessionVersions.bump(key);
      return clone(archived);
    },
    async health() {
      return { ok: true };
    },
    async close() {
      closed = true;
    },
  };
}
