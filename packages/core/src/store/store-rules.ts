import { z } from "zod";
import { type AuditRecord, AuditRecordSchema, isChainBuiltRecord } from "../audit/index";
import { formatZodIssues, SwitchboardError } from "../errors";
import type {
  ListPosition,
  RunListQuery,
  RunPruneOptions,
  SessionListOptions,
  SessionListQuery,
  TaintRise,
  TranscriptReadOptions,
  TranscriptReadResult,
} from "./interfaces";
import { RunOriginSchema, type RunRecord, RunRecordSchema, TERMINAL_RUN_STATUSES } from "./run-record";
import {
  type SessionEntry,
  SessionEntrySchema,
  type SessionTouch,
  SessionTouchSchema,
} from "./session-entry";
import { compileSessionVisibility, type SessionClassifier, sessionClassifierFor } from "./session-visibility";
import {
  TRANSCRIPT_FORMAT_VERSION,
  type TranscriptEntry,
  type TranscriptEntryInput,
  TranscriptEntryInputSchema,
  type TranscriptHeader,
} from "./transcript-entry";

/**
 * Rules every store implementation shares, so the in-memory store, the file store and a future
 * networked store validate, order and window data identically (the conformance suite checks it).
 */

import { DEFAULT_MAX_ENTRY_BYTES } from "./limits";

export { DEFAULT_MAX_ENTRY_BYTES };

const SessionIdSchema = z.uuid();

/**
 * Validates a sessionId (a UUID) and returns its lower-case form. Store implementations use this
 * form for file names and map keys, so no caller text ever becomes a path.
 */
export function parseSessionId(value: unknown, field = "sessionId"): string {
  if (typeof value !== "string" || !SessionIdSchema.safeParse(value).success) {
    throw new SwitchboardError("INVALID_REQUEST", `${field}: must be a UUID`, {
      details: { field, rule: "uuid" },
    });
  }
  return value.toLowerCase();
}

function invalid(lines: string[], field: string): SwitchboardError {
  return new SwitchboardError("INVALID_REQUEST", lines.join("; "), { details: { field } });
}

export function validateSessionEntry(entry: unknown): SessionEntry {
  const parsed = SessionEntrySchema.safeParse(entry);
  if (!parsed.success) throw invalid(formatZodIssues(parsed.error, "session"), "session");
  return { ...parsed.data, sessionId: parsed.data.sessionId.toLowerCase() };
}

export function validateSessionTouch(touch: unknown): SessionTouch {
  const parsed = SessionTouchSchema.safeParse(touch);
  if (!parsed.success) throw invalid(formatZodIssues(parsed.error, "touch"), "touch");
  return { ...parsed.data, sessionId: parsed.data.sessionId.toLowerCase() };
}

export function validateRunRecord(run: unknown): RunRecord {
  const parsed = RunRecordSchema.safeParse(run);
  if (!parsed.success) throw invalid(formatZodIssues(parsed.error, "run"), "run");
  return parsed.data;
}

export interface TranscriptCreateInput {
  sessionId: string;
  key: string;
  createdAt: number;
}

const TranscriptCreateSchema = z.object({
  sessionId: z.unknown(),
  key: z.string().min(1).max(256),
  createdAt: z.number().int().nonnegative(),
});

/** Validates a `create` argument and builds the header line's object (type and version first). */
export function buildTranscriptHeader(input: TranscriptCreateInput): TranscriptHeader {
  const parsed = TranscriptCreateSchema.safeParse(input);
  if (!parsed.success) throw invalid(formatZodIssues(parsed.error, "header"), "header");
  const sessionId = parseSessionId(input.sessionId, "header.sessionId");
  return {
    type: "session",
    version: TRANSCRIPT_FORMAT_VERSION,
    sessionId,
    key: parsed.data.key,
    createdAt: parsed.data.createdAt,
  };
}

/** UTF-8 length of a string without allocating (pure: no Buffer in core). */
export function utf8ByteLength(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) bytes += 1;
    else if (code < 0x800) bytes += 2;
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

/**
 * Puts an entry's fields in the stored order (`type, seq, id, ts, ...`), so a serialised entry
 * always starts with `{"type":"…","seq":N,` and a reader can find the seq without a full parse.
 */
function orderEntry(input: z.output<typeof TranscriptEntryInputSchema>, seq: number, id: string, ts: number) {
  const entry: TranscriptEntry = { type: input.type, seq, id, ts, label: input.label };
  if (input.runId !== undefined) entry.runId = input.runId;
  if (input.provenance !== undefined) entry.provenance = input.provenance;
  if (input.message !== undefined) entry.message = input.message;
  if (input.taint !== undefined) entry.taint = input.taint;
  if (input.event !== undefined) entry.event = input.event;
  return entry;
}

export interface PreparedAppend {
  entries: TranscriptEntry[];
  /** Each entry serialised as one JSON line (no trailing newline). */
  lines: string[];
  /** The new last seq once these entries are stored. */
  lastSeq: number;
}

export interface PrepareAppendOptions {
  lastSeq: number;
  maxEntryBytes?: number;
  now?: () => number;
  newId?: () => string;
}

/**
 * Validates a whole `append` batch and assigns seqs after `lastSeq`. Throws before anything is
 * assigned when one entry is bad (INVALID_REQUEST naming `entries[i].field`) or too large
 * (PAYLOAD_TOO_LARGE), so a caller can write all or nothing.
 */
export function prepareTranscriptAppend(
  entries: readonly TranscriptEntryInput[],
  options: PrepareAppendOptions,
): PreparedAppend {
  if (!Array.isArray(entries)) throw invalid(["entries: must be an array"], "entries");
  const maxEntryBytes = options.maxEntryBytes ?? DEFAULT_MAX_ENTRY_BYTES;
  const now = options.now ?? Date.now;
  const newId = options.newId ?? (() => globalThis.crypto.randomUUID());
  const parsed = entries.map((entry, index) => {
    const result = TranscriptEntryInputSchema.safeParse(entry);
    if (!result.success)
      throw invalid(formatZodIssues(result.error, `entries[${index}]`), `entries[${index}]`);
    return result.data;
  });
  const out: TranscriptEntry[] = [];
  const lines: string[] = [];
  let seq = options.lastSeq;
  const ts = now();
  for (let index = 0; index < parsed.length; index++) {
    const input = parsed[index]!;
    seq += 1;
    const entry = orderEntry(input, seq, input.id ?? newId(), input.ts ?? ts);
    const line = JSON.stringify(entry);
    const size = utf8ByteLength(line);
    if (size > maxEntryBytes) {
      throw new SwitchboardError(
        "PAYLOAD_TOO_LARGE",
        `entries[${index}]: serialised entry is ${size} bytes, more than the limit of ${maxEntryBytes}`,
        { details: { field: `entries[${index}]`, size, limit: maxEntryBytes } },
      );
    }
    out.push(entry);
    lines.push(line);
  }
  return { entries: out, lines, lastSeq: seq };
}

export interface NormalisedReadOptions {
  limit: number;
  before: number | undefined;
  maxBytes: number | undefined;
  filter: ((entry: TranscriptEntry) => boolean) | undefined;
}

const positiveInt = z.number().int().positive();

/** Checks `read` options; every bad field gets an INVALID_REQUEST naming it. */
export function normaliseReadOptions(options: TranscriptReadOptions): NormalisedReadOptions {
  if (options === null || typeof options !== "object")
    throw invalid(["options: must be an object"], "options");
  if (!positiveInt.safeParse(options.limit).success) {
    throw invalid(["limit: must be a positive integer"], "limit");
  }
  if (options.before !== undefined && !positiveInt.safeParse(options.before).success) {
    throw invalid(["before: must be a positive integer (a seq)"], "before");
  }
  if (options.maxBytes !== undefined && !positiveInt.safeParse(options.maxBytes).success) {
    throw invalid(["maxBytes: must be a positive integer"], "maxBytes");
  }
  if (options.filter !== undefined && typeof options.filter !== "function") {
    throw invalid(["filter: must be a function"], "filter");
  }
  return { limit: options.limit, before: options.before, maxBytes: options.maxBytes, filter: options.filter };
}

/**
 * Builds a tail-read result from entries offered newest first. Stores feed it while they scan
 * backwards and stop as soon as `offer` returns false, so a read costs what it returns.
 *
 * Windowing rules: entries with `seq >= before` and entries the filter rejects are skipped; the
 * newest `limit` matches are kept while their serialised sizes add up to at most `maxBytes`. When
 * the next match does not fit, the read stops with `truncated: true`. The newest match is kept
 * even when it alone exceeds `maxBytes`, so a message under the entry limit can always be read back.
 */
export class TailCollector {
  private readonly newestFirst: TranscriptEntry[] = [];
  private bytes = 0;
  private truncated = false;
  private stopped = false;

  constructor(private readonly options: NormalisedReadOptions) {}

  /** Entries kept so far. */
  get count(): number {
    return this.newestFirst.length;
  }

  /** True when the entry at this seq can be skipped without parsing (it is at or after `before`). */
  skips(seq: number): boolean {
    return this.options.before !== undefined && seq >= this.options.before;
  }

  /** Offers the next older entry and its serialised size; returns false once the read is complete. */
  offer(entry: TranscriptEntry, size: number): boolean {
    if (this.stopped) return false;
    if (this.skips(entry.seq)) return true;
    if (this.options.filter && !this.options.filter(entry)) return true;
    const { maxBytes, limit } = this.options;
    // The newest match is always returned whole, however big: entries are bounded by the store's
    // entry limit, and a page that can never hold a big message would hide it for good.
    if (maxBytes !== undefined && this.newestFirst.length > 0 && this.bytes + size > maxBytes) {
      this.truncated = true;
      this.stopped = true;
      return false;
    }
    this.newestFirst.push(entry);
    this.bytes += size;
    if (this.newestFirst.length >= limit) this.stopped = true;
    return !this.stopped;
  }

  /** `reachedStart`: the scan passed the oldest entry of the transcript. */
  result(reachedStart: boolean): TranscriptReadResult {
    const entries = this.newestFirst.slice().reverse();
    const result: TranscriptReadResult = { entries, truncated: this.truncated };
    const oldest = entries[0];
    if (this.stopped && oldest !== undefined && oldest.seq > 1) {
      result.nextBefore = oldest.seq;
    } else if (!reachedStart && oldest !== undefined && oldest.seq > 1) {
      result.nextBefore = oldest.seq;
    }
    return result;
  }
}

/** Newest first, ties by key ascending: the order of `sessions.list`. */
/** Whether `entry` comes after `position` in list order (newer first, then by key). */
export function isAfter(entry: Pick<SessionEntry, "updatedAt" | "key">, position: ListPosition): boolean {
  if (entry.updatedAt !== position.updatedAt) return entry.updatedAt < position.updatedAt;
  return entry.key > position.key;
}

export function compareSessionsByRecency(a: SessionEntry, b: SessionEntry): number {
  if (a.updatedAt !== b.updatedAt) return b.updatedAt - a.updatedAt;
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

const SessionListQuerySchema = z.object({
  agentId: z.string().optional(),
  kinds: z.array(z.string()).optional(),
  mainKey: z.string().min(1).optional(),
  activeSince: z.number().optional(),
  spawnedBy: z.string().optional(),
  label: z.string().optional(),
  search: z.string().optional(),
  includeArchived: z.boolean().optional(),
  after: z.object({ updatedAt: z.number(), key: z.string() }).optional(),
  limit: z.number().int().positive(),
});

/** The classifier a list uses for `kinds`: core's key rules for the query's `mainKey`. */
export function sessionListClassifier(query: SessionListQuery): SessionClassifier {
  return sessionClassifierFor(typeof query?.mainKey === "string" ? query.mainKey : "main");
}

/** The caller's visibility for a list (the data filter with its residual), or undefined when every row is visible. */
export function compileListVisibility(
  options: SessionListOptions = {},
): ((entry: SessionEntry) => boolean) | undefined {
  if (options.visibility !== undefined) return compileSessionVisibility(options.visibility, options.residual);
  if (options.residual !== undefined) {
    throw invalid(["residual: only with visibility (it refines the data filter)"], "residual");
  }
  return undefined;
}

/** A compiled `sessions.list` filter: the plain filters, not the caller's visibility. */
export function compileSessionFilter(
  query: SessionListQuery,
  classify: SessionClassifier = sessionListClassifier(query),
): (entry: SessionEntry) => boolean {
  const parsed = SessionListQuerySchema.safeParse(query);
  if (!parsed.success) throw invalid(formatZodIssues(parsed.error, "query"), "query");
  const { agentId, activeSince, spawnedBy, label, includeArchived } = parsed.data;
  const kinds = parsed.data.kinds ? new Set(parsed.data.kinds) : undefined;
  const search = parsed.data.search?.toLowerCase();
  const after = parsed.data.after;
  return (entry) => {
    if (after !== undefined && !isAfter(entry, after)) return false;
    if (!includeArchived && entry.archivedAt !== undefined) return false;
    if (agentId !== undefined && entry.agentId !== agentId) return false;
    if (activeSince !== undefined && entry.updatedAt < activeSince) return false;
    if (spawnedBy !== undefined && entry.spawnedBy !== spawnedBy) return false;
    if (label !== undefined && entry.label !== label) return false;
    if (search !== undefined && search !== "") {
      const hit =
        entry.key.toLowerCase().includes(search) ||
        (entry.displayName?.toLowerCase().includes(search) ?? false) ||
        (entry.label?.toLowerCase().includes(search) ?? false);
      if (!hit) return false;
    }
    if (kinds !== undefined && !kinds.has(classify(entry))) return false;
    return true;
  };
}

const RunListQuerySchema = z.object({
  statuses: z.array(z.string()).optional(),
  pendingAnnounce: z.boolean().optional(),
  pendingFollowUp: z.boolean().optional(),
  pendingReplyPost: z.boolean().optional(),
  origins: z.array(RunOriginSchema).optional(),
  sessionKey: z.string().optional(),
  agentId: z.string().optional(),
  limit: z.number().int().positive().optional(),
});

export function compileRunFilter(query: RunListQuery): (run: RunRecord) => boolean {
  const parsed = RunListQuerySchema.safeParse(query ?? {});
  if (!parsed.success) throw invalid(formatZodIssues(parsed.error, "query"), "query");
  const statuses = query.statuses ? new Set<string>(query.statuses) : undefined;
  const origins = query.origins ? new Set<string>(query.origins) : undefined;
  return (run) => {
    if (statuses !== undefined && !statuses.has(run.status)) return false;
    if (origins !== undefined && !origins.has(run.origin)) return false;
    if (query.pendingFollowUp !== undefined && (run.followUp === "pending") !== query.pendingFollowUp)
      return false;
    if (query.pendingReplyPost !== undefined && (run.replyPost === "pending") !== query.pendingReplyPost)
      return false;
    if (query.sessionKey !== undefined && run.sessionKey !== query.sessionKey) return false;
    if (query.agentId !== undefined && run.agentId !== query.agentId) return false;
    if (query.pendingAnnounce !== undefined) {
      const pending = run.spawn?.announce.status === "pending";
      if (pending !== query.pendingAnnounce) return false;
    }
    return true;
  };
}

/** Whether retention may delete this run (see `RunRegistryStore.prune`). */
export function runPrunable(run: RunRecord, options: RunPruneOptions): boolean {
  return (
    TERMINAL_RUN_STATUSES.includes(run.status) &&
    run.endedAt !== undefined &&
    run.endedAt < options.endedBefore &&
    run.spawn?.announce.status !== "pending" &&
    run.followUp !== "pending" &&
    run.replyPost !== "pending" &&
    !options.exceptOrigins?.includes(run.origin) &&
    !options.keep?.has(run.runId)
  );
}

/** Checks prune options (a bad limit or cutoff is a caller bug, named by field). */
export function checkPruneOptions(options: { limit: number }, cutoffField: string, cutoff: number): void {
  if (!Number.isInteger(options.limit) || options.limit < 1)
    throw invalid(["limit: must be a positive integer"], "limit");
  if (!Number.isFinite(cutoff)) throw invalid([`${cutoffField}: must be a time in ms`], cutoffField);
}

/**
 * Idempotency keys are unique across runs: CONFLICT when the record takes a key that `owner` (the
 * runId holding it now) already has. A run that already had the key keeps it (rewrites of a run
 * loaded from data written before keys were unique never fail).
 */
export function checkIdempotencyKeyFree(
  run: RunRecord,
  owner: string | undefined,
  previous: RunRecord | undefined,
): void {
  const key = run.idempotencyKey;
  if (key === undefined || owner === undefined || owner === run.runId) return;
  if (previous?.idempotencyKey === key) return;
  throw new SwitchboardError(
    "CONFLICT",
    `idempotencyKey ${key} is already used by run ${owner}; run ${run.runId} cannot take it`,
    { details: { field: "idempotencyKey", idempotencyKey: key, runId: owner } },
  );
}

/** Order of `runs.list`: newest `createdAt` first, ties by runId ascending. */
export function compareRunsNewestFirst(a: RunRecord, b: RunRecord): number {
  if (a.createdAt !== b.createdAt) return b.createdAt - a.createdAt;
  return a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0;
}

function parseAuditRecord(record: unknown, position: number): AuditRecord {
  const parsed = AuditRecordSchema.safeParse(record);
  if (!parsed.success) {
    throw invalid(formatZodIssues(parsed.error, `records[${position}]`), `records[${position}]`);
  }
  return parsed.data;
}

/**
 * Validates a batch of chained audit records: each must follow the previous one (index + 1), the
 * first must follow `lastIndex` (any index when the log is empty). Throws INVALID_REQUEST for a
 * malformed record and CONFLICT for a gap or reordering, before anything is written.
 */
export function validateAuditBatch(
  records: readonly AuditRecord[],
  lastIndex: number | undefined,
): AuditRecord[] {
  if (!Array.isArray(records)) throw invalid(["records: must be an array"], "records");
  let previous = lastIndex;
  return records.map((record, position) => {
    // A chain's own (frozen) records were built from an entry it validated: parsing each again cost
    // ~2.5 % of the gateway's main thread in B5 at 64. Anything else is parsed.
    const valid = isChainBuiltRecord(record) ? record : parseAuditRecord(record, position);
    if (previous !== undefined && valid.index !== previous + 1) {
      throw new SwitchboardError(
        "CONFLICT",
        `records[${position}].index: expected ${previous + 1} (the record after index ${previous}), got ${valid.index}`,
        { details: { field: `records[${position}].index`, expected: previous + 1 } },
      );
    }
    previous = valid.index;
    return valid;
  });
}

const AuditReadSchema = z.object({
  after: z.number().int().optional(),
  limit: z.number().int().nonnegative().optional(),
});

export function normaliseAuditRead(options: { after?: number; limit?: number } | undefined): {
  after: number | undefined;
  limit: number | undefined;
} {
  const parsed = AuditReadSchema.safeParse(options ?? {});
  if (!parsed.success) throw invalid(formatZodIssues(parsed.error, "options"), "options");
  return { after: parsed.data.after, limit: parsed.data.limit };
}

export function validateMetaName(name: unknown): string {
  if (typeof name !== "string" || name.length === 0 || name.length > 256) {
    throw invalid(["name: must be a non-empty string of at most 256 characters"], "name");
  }
  return name;
}

export function validateMetaValue(value: unknown): string {
  if (typeof value !== "string") throw invalid(["value: must be a string"], "value");
  return value;
}

export function validateTailLimit(limit: unknown): number {
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 0) {
    throw invalid(["limit: must be an integer >= 0"], "limit");
  }
  return limit;
}

/** An audit scan's page size: an integer >= 1. */
export function validateScanPageSize(pageSize: unknown): number {
  if (typeof pageSize !== "number" || !Number.isInteger(pageSize) || pageSize < 1) {
    throw invalid(["pageSize: must be an integer >= 1"], "pageSize");
  }
  return pageSize;
}

/**
 * Checks a taint rise before any of it is written: the row, an entry of type `taint` (with `id`
 * and `ts` filled in, so a replay writes the very same entry), and an audit record that follows
 * `lastAuditIndex`. The entry's full validation is the transcript append's (`prepareTranscriptAppend`).
 */
export function validateTaintRise(
  rise: TaintRise,
  lastAuditIndex: number | undefined,
  now: () => number = Date.now,
): { row: SessionEntry; entry: TranscriptEntryInput & { id: string; ts: number }; audit: AuditRecord } {
  if (typeof rise !== "object" || rise === null) throw invalid(["rise: must be an object"], "rise");
  const row = validateSessionEntry(rise.row);
  const entry = rise.entry as TranscriptEntryInput | undefined;
  if (typeof entry !== "object" || entry === null || entry.type !== "taint") {
    throw invalid(['entry.type: must be "taint"'], "entry.type");
  }
  const [audit] = validateAuditBatch([rise.audit], lastAuditIndex);
  return {
    row,
    entry: { ...entry, id: entry.id ?? globalThis.crypto.randomUUID(), ts: entry.ts ?? now() },
    audit: audit!,
  };
}

/**
 * `activeSince` of "active in the last `minutes`": any positive count is a valid filter, so a count
 * reaching before the epoch (1e308 minutes) lists everything rather than failing on `-Infinity`.
 */
export function activeSinceMinutes(minutes: number, now: number = Date.now()): number {
  return Math.max(0, now - minutes * 60_000);
}
