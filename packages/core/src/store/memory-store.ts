import type { AuditRecord } from "../audit/index";
import { SwitchboardError } from "../errors";
import type {
  AuditStore,
  MetaStore,
  RunListQuery,
  RunRegistryStore,
  SessionIndexStore,
  SessionListQuery,
  SessionListResult,
  Store,
  TranscriptReadOptions,
  TranscriptReadResult,
  TranscriptStore,
} from "./interfaces";
import type { RunRecord } from "./run-record";
import type { SessionEntry } from "./session-entry";
import {
  buildTranscriptHeader,
  compareRunsNewestFirst,
  compareSessionsByRecency,
  compileRunFilter,
  compileSessionFilter,
  DEFAULT_MAX_ENTRY_BYTES,
  normaliseAuditRead,
  normaliseReadOptions,
  parseSessionId,
  prepareTranscriptAppend,
  TailCollector,
  utf8ByteLength,
  validateAuditBatch,
  validateMetaName,
  validateMetaValue,
  validateRunRecord,
  validateSessionEntry,
  validateTailLimit,
} from "./store-rules";
import type { TranscriptEntry, TranscriptEntryInput, TranscriptHeader } from "./transcript-entry";

export interface MemoryStoreOptions {
  /** Largest serialised transcript entry accepted (default 1 MiB). */
  maxEntryBytes?: number;
}

/** Plain data is cloned in and out, so callers can never mutate stored state by reference. */
function clone<T>(value: T): T {
  return structuredClone(value);
}

interface MemoryTranscript {
  header: TranscriptHeader;
  entries: TranscriptEntry[];
  sizes: number[];
}

/**
 * A store that keeps everything in memory and loses it on exit: for tests, simulations and
 * embedding without a disk. It follows the same contract as the file store.
 */
export function createMemoryStore(options: MemoryStoreOptions = {}): Store {
  const maxEntryBytes = options.maxEntryBytes ?? DEFAULT_MAX_ENTRY_BYTES;
  let closed = false;
  const assertOpen = () => {
    if (closed) throw new SwitchboardError("UNAVAILABLE", "store is closed");
  };

  const sessionRows = new Map<string, SessionEntry>();
  const sessions: SessionIndexStore = {
    async get(key) {
      assertOpen();
      const row = sessionRows.get(key);
      return row ? clone(row) : undefined;
    },
    async keysForSessionId(sessionId) {
      assertOpen();
      const id = parseSessionId(sessionId);
      return [...sessionRows.values()]
        .filter((row) => row.sessionId === id)
        .map((row) => row.key)
        .sort();
    },
    async put(entry) {
      assertOpen();
      const row = validateSessionEntry(entry);
      sessionRows.set(row.key, clone(row));
    },
    async delete(key) {
      assertOpen();
      return sessionRows.delete(key);
    },
    async list(query: SessionListQuery, listOptions = {}): Promise<SessionListResult> {
      assertOpen();
      const matches = compileSessionFilter(query, listOptions.classify);
      const sorted = [...sessionRows.values()].filter(matches).sort(compareSessionsByRecency);
      const entries: SessionEntry[] = [];
      let hidden = 0;
      for (const row of sorted) {
        if (listOptions.visible && !listOptions.visible(row)) {
          hidden++;
          continue;
        }
        if (entries.length < query.limit) entries.push(clone(row));
      }
      return { entries, hidden };
    },
    async count() {
      assertOpen();
      return sessionRows.size;
    },
  };

  const transcriptFiles = new Map<string, MemoryTranscript>();
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
      transcriptFiles.delete(parseSessionId(sessionId));
    },
    async remove(sessionId) {
      assertOpen();
      transcriptFiles.delete(parseSessionId(sessionId));
    },
    locate(sessionId) {
      return `memory:${parseSessionId(sessionId)}`;
    },
  };

  const runRows = new Map<string, RunRecord>();
  const runs: RunRegistryStore = {
    async put(run) {
      assertOpen();
      const record = validateRunRecord(run);
      runRows.set(record.runId, clone(record));
    },
    async get(runId) {
      assertOpen();
      const run = runRows.get(runId);
      return run ? clone(run) : undefined;
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
  };

  const auditRecords: AuditRecord[] = [];
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
  };

  const metaValues = new Map<string, string>();
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
    async close() {
      closed = true;
    },
  };
}
