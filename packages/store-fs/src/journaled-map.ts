import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { AppendLog } from "./append-log";
import {
  closeFile,
  fileSize,
  isNotFound,
  openFile,
  renamePath,
  syncData,
  syncDirectory,
  truncateFile,
  writeAllAt,
  yieldToEventLoop,
} from "./fs-io";
import { forEachLineText, NEWLINE, scanForward } from "./line-scan";
import type { StoreLogger } from "./logger";
import { storageError } from "./storage-errors";
import type { StoreHealthTracker } from "./store-health";

/** Format version of journal files. */
export const JOURNAL_FORMAT_VERSION = 1;
/**
 * Format version of snapshot files. Version 2 adds a SHA-256 over every line before the end
 * marker (`{"type":"end","count":N,"sha256":"…"}`), so damage anywhere is detected; version 1
 * snapshots (count only) are still read.
 */
export const SNAPSHOT_FORMAT_VERSION = 2;

/** How long a `putLazily` value may wait for its journal write (what a crash can lose of it). */
export const LAZY_FLUSH_MS = 100;

const LOAD_CHUNK_BYTES = 1024 * 1024;
const SNAPSHOT_BATCH = 2000;

/** A journal record as the open applies it: a `put` with its value's key, or a `del`. */
export type CheckedJournalRecord<V> = { op: "put"; key: string; value: V } | { op: "del"; key: string };

/**
 * A row of a snapshot or journal `put` with its key, or undefined when it is valid JSON of the
 * wrong shape (not an object, no string key, or one `revive` cannot take): such a row is as damaged
 * as a torn line, reported as one rather than as a TypeError from inside the reviver.
 */
export function checkRow<V>(
  parsed: unknown,
  keyOf: (value: V) => string,
  revive: (value: V) => V = (value) => value,
): { key: string; value: V } | undefined {
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return undefined;
  try {
    const value = revive(parsed as V);
    const key = keyOf(value);
    if (typeof key !== "string" || key === "undefined" || key === "null") return undefined;
    return { key, value };
  } catch {
    return undefined;
  }
}

/**
 * The one check of a journal record line (without its newline), shared by the open (which refuses a
 * damaged record before intact ones) and `doctor --repair` (which drops exactly those): the
 * record, or undefined when it is damaged (unreadable, an unknown op, a `put` of a malformed row,
 * a `del` without a string key).
 */
export function parseJournalRecord<V>(
  line: Buffer | string,
  keyOf: (value: V) => string,
  revive: (value: V) => V = (value) => value,
): CheckedJournalRecord<V> | undefined {
  let record: unknown;
  try {
    record = JSON.parse(typeof line === "string" ? line : line.toString("utf8"));
  } catch {
    return undefined;
  }
  if (record === null || typeof record !== "object") return undefined;
  const { op, key, value } = record as { op?: unknown; key?: unknown; value?: unknown };
  if (op === "del") return typeof key === "string" ? { op, key } : undefined;
  if (op !== "put") return undefined;
  const row = checkRow(value, keyOf, revive);
  return row && { op, key: row.key, value: row.value };
}

const generationName = (kind: "journal" | "snapshot", generation: number) =>
  `${kind}-${String(generation).padStart(12, "0")}.jsonl`;
const FILE_PATTERN = /^(journal|snapshot)-(\d{12})\.jsonl$/;

export interface JournalFileState {
  generation: number;
  path: string;
  records: number;
  /** Offset after the last good line. */
  validEnd: number;
  /** Bytes after `validEnd` that are a torn (partial or unreadable) last record. */
  tornBytes: number;
}

export interface JournaledState<V> {
  values: Map<string, V>;
  snapshotGeneration: number | undefined;
  /** Journals to replay, oldest first (generation >= the snapshot's). */
  journals: JournalFileState[];
  /** Files a finished compaction left behind (older generations, temp files). */
  leftovers: string[];
}

function corrupt(message: string, details?: Record<string, unknown>): SwitchboardError {
  return new SwitchboardError("INTERNAL", message, details ? { details } : {});
}

/**
 * The journaled map's files do not add up to its whole state: a snapshot or journal generation
 * is missing, so loading what is left would silently drop rows.
 */
export class IncompleteStateError extends SwitchboardError {
  constructor(
    message: string,
    readonly missing: string,
  ) {
    super("INTERNAL", message, { details: { missing } });
  }
}

function checkHeader(
  filePath: string,
  line: Buffer | undefined,
  type: string,
  format: string,
): Record<string, unknown> {
  const supported = type === "snapshot" ? SNAPSHOT_FORMAT_VERSION : JOURNAL_FORMAT_VERSION;
  let header: Record<string, unknown> | undefined;
  try {
    header = line ? (JSON.parse(line.toString("utf8")) as Record<string, unknown>) : undefined;
  } catch {
    header = undefined;
  }
  if (!header || header.type !== type || header.format !== format || typeof header.version !== "number") {
    throw corrupt(`${filePath}: missing or unreadable ${format} ${type} header`);
  }
  if (header.version > supported) {
    throw new SwitchboardError(
      "UNAVAILABLE",
      `${filePath}: ${format} ${type} format version ${header.version} is newer than this Switchboard supports (${supported}); upgrade Switchboard to open this data dir`,
    );
  }
  return header;
}

/**
 * Reads a journaled map's directory without changing anything: the newest snapshot plus the
 * journals after it. A torn last record of a journal is reported (and skipped), a damaged record
 * before intact ones is an error.
 */
/** The first line of journal `generation` (without its newline). */
export function journalHeader(format: string, generation: number): string {
  return JSON.stringify({ type: "journal", format, version: JOURNAL_FORMAT_VERSION, generation });
}

export async function readJournaledState<V>(
  dir: string,
  format: string,
  keyOf: (value: V) => string,
  revive: (value: V) => V = (value) => value,
): Promise<JournaledState<V>> {
  let names: string[];
  try {
    names = await fs.promises.readdir(dir);
  } catch (error) {
    if (isNotFound(error))
      return { values: new Map(), snapshotGeneration: undefined, journals: [], leftovers: [] };
    throw error;
  }
  const snapshots: number[] = [];
  const journals: number[] = [];
  const leftovers: string[] = [];
  for (const name of names) {
    const match = FILE_PATTERN.exec(name);
    if (match) (match[1] === "journal" ? journals : snapshots).push(Number(match[2]));
    else if (name.endsWith(".tmp")) leftovers.push(path.join(dir, name));
  }
  snapshots.sort((a, b) => a - b);
  journals.sort((a, b) => a - b);
  const values = new Map<string, V>();
  const snapshotGeneration = snapshots.at(-1);
  if (snapshotGeneration !== undefined) {
    for (const older of snapshots.slice(0, -1))
      leftovers.push(path.join(dir, generationName("snapshot", older)));
    await loadSnapshot(
      path.join(dir, generationName("snapshot", snapshotGeneration)),
      format,
      values,
      keyOf,
      revive,
    );
  }
  // Compaction starts journal N before it writes snapshot N, and deletes only older generations:
  // the journals from the newest snapshot's generation (or from 1) on must all be there.
  const live = journals.filter(
    (generation) => snapshotGeneration === undefined || generation >= snapshotGeneration,
  );
  const incomplete = (missing: string) =>
    new IncompleteStateError(
      `${format} index is incomplete: ${missing} is missing, so rows recorded in it would be silently lost; ` +
        `restore it from a backup, or run \`switchboard doctor --repair\` to rebuild the index`,
      missing,
    );
  // Journal N is made before snapshot N and made durable with it (one fsync of the directory): a
  // snapshot without it lost the journal, whose rows would vanish silently (and their transcripts
  // be archived as orphans). Before session 22 only a gap before a later journal was caught.
  if (snapshotGeneration !== undefined && live.length === 0)
    throw incomplete(path.join(dir, generationName("journal", snapshotGeneration)));
  let expected = snapshotGeneration ?? 1;
  for (const generation of live) {
    if (generation !== expected)
      throw incomplete(
        snapshotGeneration === undefined && expected === 1
          ? path.join(dir, generationName("snapshot", generation))
          : path.join(dir, generationName("journal", expected)),
      );
    expected++;
  }
  const replay: JournalFileState[] = [];
  for (const generation of journals) {
    const journalPath = path.join(dir, generationName("journal", generation));
    if (snapshotGeneration !== undefined && generation < snapshotGeneration) {
      leftovers.push(journalPath);
      continue;
    }
    replay.push(await replayJournal(journalPath, generation, format, values, keyOf, revive));
  }
  return { values, snapshotGeneration, journals: replay, leftovers };
}

async function loadSnapshot<V>(
  filePath: string,
  format: string,
  values: Map<string, V>,
  keyOf: (value: V) => string,
  revive: (value: V) => V,
): Promise<void> {
  const fd = await openFile(filePath, "r");
  try {
    let header: Record<string, unknown> | undefined;
    let trailer: Record<string, unknown> | undefined;
    let count = 0;
    let bad: string | undefined;
    // Hashes raw bytes in bulk; the last complete line seen is held back, since the end marker
    // (the file's last line) is not part of what its checksum covers.
    const hash = createHash("sha256");
    let heldBack: Buffer | undefined;
    const hashLines = (bytes: Buffer) => {
      if (heldBack) hash.update(heldBack);
      const lastStart = bytes.lastIndexOf(NEWLINE, bytes.length - 2) + 1;
      hash.update(bytes.subarray(0, lastStart));
      heldBack = Buffer.from(bytes.subarray(lastStart));
    };
    const result = await forEachLineText(
      fd,
      0,
      await fileSize(fd),
      (line) => {
        if (header === undefined) {
          header = checkHeader(filePath, Buffer.from(line), "snapshot", format);
          return true;
        }
        if (trailer !== undefined) {
          bad = "data after the end marker";
          return false;
        }
        let parsed: Record<string, unknown>;
        try {
          parsed = JSON.parse(line);
        } catch {
          bad = "an unreadable line";
          return false;
        }
        if (
          parsed.type === "end" &&
          typeof parsed.count === "number" &&
          isTrailerShape(parsed, header.version)
        ) {
          trailer = parsed;
          return true;
        }
        // Valid JSON of the wrong shape (no row where one belongs) is as damaged as a torn line.
        const row = checkRow(parsed, keyOf, revive);
        if (row === undefined) {
          bad = "a malformed record";
          return false;
        }
        values.set(row.key, row.value);
        count++;
        return true;
      },
      undefined,
      hashLines,
    );
    if (
      bad === undefined &&
      trailer !== undefined &&
      trailer.sha256 !== undefined &&
      trailer.sha256 !== hash.digest("hex")
    ) {
      bad = "checksum mismatch: the file was changed after it was written";
    }
    if (bad !== undefined || trailer === undefined || trailer.count !== count || result.trailingBytes > 0) {
      throw corrupt(
        `${filePath}: snapshot is damaged (${bad ?? (trailer === undefined ? "no end marker" : "count mismatch")}); restore it from a backup, or run \`switchboard doctor --repair\` to rebuild it`,
        { damaged: filePath },
      );
    }
  } finally {
    await closeFile(fd);
  }
}

/** Version 1 end markers hold only the count; version 2 ones also the checksum. */
function isTrailerShape(trailer: Record<string, unknown>, version: unknown): boolean {
  const keys = Object.keys(trailer).length;
  if (version === 1) return keys === 2;
  return keys === 3 && typeof trailer.sha256 === "string";
}

async function replayJournal<V>(
  filePath: string,
  generation: number,
  format: string,
  values: Map<string, V>,
  keyOf: (value: V) => string,
  revive: (value: V) => V,
): Promise<JournalFileState> {
  const fd = await openFile(filePath, "r");
  try {
    const size = await fileSize(fd);
    let headerSeen = false;
    let records = 0;
    let validEnd = 0;
    let badAt: number | undefined;
    let intactAfterBad = false;
    const result = await scanForward(
      fd,
      0,
      size,
      (line, lineStart) => {
        if (!headerSeen) {
          if (line.length === 0 && lineStart === 0) return true;
          checkHeader(filePath, line, "journal", format);
          headerSeen = true;
          validEnd = lineStart + line.length + 1;
          return true;
        }
        const record = parseJournalRecord(line, keyOf, revive);
        if (badAt !== undefined) {
          if (record) intactAfterBad = true;
          return true;
        }
        if (!record) {
          badAt = lineStart;
          return true;
        }
        if (record.op === "put") values.set(record.key, record.value);
        else values.delete(record.key);
        records++;
        validEnd = lineStart + line.length + 1;
        return true;
      },
      LOAD_CHUNK_BYTES,
    );
    if (intactAfterBad) {
      throw corrupt(
        `${filePath}: damaged record at offset ${badAt} before intact ones; restore it from a backup, or run \`switchboard doctor --repair\` to drop the damaged record`,
        { damaged: filePath, offset: badAt },
      );
    }
    if (!headerSeen && result.end > 0) throw corrupt(`${filePath}: missing journal header`);
    return { generation, path: filePath, records, validEnd, tornBytes: size - validEnd };
  } finally {
    await closeFile(fd);
  }
}

export interface JournaledMapOptions<V> {
  dir: string;
  /** Names the data in file headers and messages (`sessions`, `runs`, `meta`). */
  format: string;
  keyOf: (value: V) => string;
  durable: boolean;
  /**
   * Journal records after which a background snapshot is written; never fewer than the map holds,
   * so a snapshot (which writes every value) costs O(1) per change however large the map grows.
   */
  snapshotEvery: number;
  logger: StoreLogger;
  /** Applied to each value read from disk (e.g. to share repeated strings). */
  revive?: (value: V) => V;
  health?: StoreHealthTracker;
}

export interface JournaledMapStats {
  generation: number;
  journalRecords: number;
  snapshots: number;
  tornTailsRepaired: number;
}

/**
 * A durable map: every change is appended to a journal (group-committed); a background
 * compaction writes the whole map to a snapshot and starts a new journal, so neither start-up
 * nor an update ever rewrites one big file.
 *
 * Crash safety: compaction first starts journal N+1, then writes `snapshot-(N+1)` to a temp file,
 * syncs and renames it, and only then deletes generations <= N. Start-up loads the newest
 * snapshot and replays the journals from its generation on, so every state on the way is readable.
 */
export class JournaledMap<V> {
  readonly values: Map<string, V>;
  private journal: AppendLog;
  private generation: number;
  private journalRecords: number;
  private compacting: Promise<void> | undefined;
  private closed = false;
  /** Failed journal writes so far: a snapshot taken across one may hold a change that never happened. */
  private failures = 0;
  private readonly statsCounters = { snapshots: 0, tornTailsRepaired: 0 };
  /** Keys `putLazily` set whose current value the journal may not hold yet. */
  private readonly lazyKeys = new Set<string>();
  /** Each key's newest `put` not yet durable, settled (resolved) however it ends. */
  private readonly inFlightPuts = new Map<string, Promise<void>>();
  private lazyTimer: NodeJS.Timeout | undefined;
  private lazyFailing = false;
  /** Values the newest snapshot holds (at open: the values loaded), the next snapshot's pace. */
  private snapshotSize: number;

  private constructor(
    private readonly options: JournaledMapOptions<V>,
    values: Map<string, V>,
    journal: AppendLog,
    generation: number,
    journalRecords: number,
  ) {
    this.values = values;
    this.journal = journal;
    this.generation = generation;
    this.journalRecords = journalRecords;
    this.snapshotSize = values.size;
  }

  static async open<V>(options: JournaledMapOptions<V>): Promise<JournaledMap<V>> {
    await fs.promises.mkdir(options.dir, { recursive: true, mode: 0o700 });
    const state = await readJournaledState(options.dir, options.format, options.keyOf, options.revive);
    for (const leftover of state.leftovers) {
      // Older generations only take space: one that cannot go must not stop the start.
      await fs.promises.rm(leftover, { force: true }).catch((error: unknown) => {
        options.logger.warn(
          {
            path: leftover,
            error: String(error),
          },
          `cannot remove an old ${options.format} file`,
        );
      });
    }
    let tornTails = 0;
    for (const journal of state.journals) {
      if (journal.tornBytes === 0) continue;
      tornTails++;
      options.logger.warn(
        {
          path: journal.path,
          bytes: journal.tornBytes,
        },
        `cut a torn tail of ${journal.tornBytes} bytes from the ${options.format} journal`,
      );
      try {
        const fd = await openFile(journal.path, "r+");
        try {
          await truncateFile(fd, journal.validEnd);
          if (options.durable) await syncData(fd);
        } finally {
          await closeFile(fd);
        }
      } catch (error) {
        throw storageError(error, "cutting the torn tail of", journal.path);
      }
    }
    const last = state.journals.at(-1);
    const logOptions = JournaledMap.logOptions(options);
    let journal: AppendLog;
    let generation: number;
    if (last && last.validEnd > 0) {
      journal = await AppendLog.openAt(last.path, last.validEnd, logOptions);
      generation = last.generation;
    } else {
      generation = last?.generation ?? state.snapshotGeneration ?? 1;
      const journalPath = path.join(options.dir, generationName("journal", generation));
      if (last) await fs.promises.rm(journalPath, { force: true });
      journal = await AppendLog.create(
        journalPath,
        JournaledMap.journalHeader(options.format, generation),
        logOptions,
      );
    }
    const records = state.journals.reduce((sum, file) => sum + file.records, 0);
    const map = new JournaledMap(options, state.values, journal, generation, records);
    map.statsCounters.tornTailsRepaired = tornTails;
    if (options.durable && state.leftovers.length > 0) await syncDirectory(options.dir);
    map.maybeCompact();
    return map;
  }

  private static logOptions<V>(options: JournaledMapOptions<V>) {
    return {
      durable: options.durable,
      label: `${options.format} journal`,
      ...(options.health ? { health: options.health } : {}),
    };
  }

  private static journalHeader(format: string, generation: number): string {
    return journalHeader(format, generation);
  }

  get size(): number {
    return this.values.size;
  }

  get(key: string): V | undefined {
    return this.values.get(key);
  }

  /**
   * Sets the value at once (reads see it) and resolves when the change is durable. When the write
   * fails, the value goes back to what it was before and the promise rejects: memory never holds
   * a change the disk does not. `onUndo` (synchronous) lets the caller undo its own derived state.
   */
  put(value: V, onUndo?: (restored: V | undefined) => void, valueJson?: string): Promise<void> {
    this.assertOpen();
    const key = this.options.keyOf(value);
    const previous = this.values.get(key);
    this.values.set(key, value);
    // `valueJson` (the caller serialised the value already) saves serialising it again.
    const line =
      valueJson === undefined ? JSON.stringify({ op: "put", value }) : `{"op":"put","value":${valueJson}}`;
    const written = this.record(line, () => {
      if (this.values.get(key) !== value) return;
      if (previous === undefined) this.values.delete(key);
      else this.values.set(key, previous);
      onUndo?.(previous);
    });
    const settled = written.then(
      () => undefined,
      () => undefined,
    );
    this.inFlightPuts.set(key, settled);
    void settled.then(() => {
      if (this.inFlightPuts.get(key) === settled) this.inFlightPuts.delete(key);
    });
    return written;
  }

  /**
   * Settles once the key's `put`s issued so far are durable or undone (undefined: none in flight). A
   * change derived from the value (a row's activity mark) waits for it: made on a value whose write
   * then failed, it would carry the refused change on, and its own later write would make it durable.
   */
  settledFor(key: string): Promise<void> | undefined {
    return this.inFlightPuts.get(key);
  }

  /**
   * Sets the value at once, like `put`, but journals it later: with every other lazily set value
   * of the next `LAZY_FLUSH_MS`, or at close, in one write. For changes a crash may lose (a row's
   * activity mark), never for ones a caller was told are durable. The flush writes each key's value
   * as it is then, so a `put` or `delete` in between is never undone by it; a failed flush keeps
   * the values in memory and is tried again.
   */
  putLazily(value: V): void {
    this.assertOpen();
    const key = this.options.keyOf(value);
    this.values.set(key, value);
    this.lazyKeys.add(key);
    this.scheduleLazyFlush();
  }

  /** Journals the lazily set values now; resolves once they are durable. */
  flushLazy(): Promise<void> {
    if (this.lazyTimer) {
      clearTimeout(this.lazyTimer);
      this.lazyTimer = undefined;
    }
    if (this.lazyKeys.size === 0) return Promise.resolve();
    const keys = [...this.lazyKeys];
    this.lazyKeys.clear();
    let lines = "";
    let records = 0;
    for (const key of keys) {
      const value = this.values.get(key);
      if (value === undefined) continue;
      lines += `${JSON.stringify({ op: "put", value })}\n`;
      records++;
    }
    if (records === 0) return Promise.resolve();
    this.journalRecords += records;
    // Nothing is undone on failure (memory keeps the values), so `failures` does not count it.
    const done = this.journal.append(lines, () => {
      for (const key of keys) this.lazyKeys.add(key);
      if (!this.closed) this.scheduleLazyFlush();
    });
    this.maybeCompact();
    return done;
  }

  private scheduleLazyFlush(): void {
    if (this.lazyTimer) return;
    this.lazyTimer = setTimeout(() => {
      this.lazyTimer = undefined;
      this.flushLazy().then(
        () => {
          this.lazyFailing = false;
        },
        (error: unknown) => {
          // Tried again every interval until the cause is gone (the store's health says so
          // meanwhile); logged once per streak, not ten times a second.
          if (this.lazyFailing) return;
          this.lazyFailing = true;
          this.options.logger.warn(
            { error: String(error) },
            `${this.options.format}: could not write lazily set values; trying again`,
          );
        },
      );
    }, LAZY_FLUSH_MS);
    this.lazyTimer.unref();
  }

  delete(key: string, onUndo?: (restored: V) => void): Promise<boolean> {
    this.assertOpen();
    const previous = this.values.get(key);
    if (previous === undefined || !this.values.delete(key)) return Promise.resolve(false);
    return this.record(JSON.stringify({ op: "del", key }), () => {
      if (this.values.has(key)) return;
      this.values.set(key, previous);
      onUndo?.(previous);
    }).then(() => true);
  }

  /** Writes a snapshot now (or joins the one running) and waits for it. */
  compact(): Promise<void> {
    if (!this.compacting) {
      this.compacting = this.runCompaction().finally(() => {
        this.compacting = undefined;
      });
    }
    return this.compacting;
  }

  stats(): JournaledMapStats {
    return { generation: this.generation, journalRecords: this.journalRecords, ...this.statsCounters };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.flushLazy().catch((error: unknown) => {
      this.options.logger.warn(
        { error: String(error) },
        `${this.options.format}: lazily set values could not be written at close`,
      );
    });
    this.closed = true;
    while (this.compacting) await this.compacting.catch(() => undefined);
    await this.journal.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new SwitchboardError("UNAVAILABLE", `${this.options.format} store is closed`);
  }

  /**
   * A snapshot rewrites every value, so taking one every `snapshotEvery` changes of a map of n values
   * costs n/snapshotEvery value writes per change: with a million retained runs, fifty. Waiting for as
   * many changes as the last snapshot held keeps it at about two however the map grows (measured
   * against the last snapshot, not the map now: a map gaining one new key per change would otherwise
   * never catch up), and start-up replays at most about as many records as the snapshot holds.
   */
  private compactAfter(): number {
    return Math.max(this.options.snapshotEvery, this.snapshotSize);
  }

  /** Appends one journal line (a `JournalRecord`'s JSON). */
  private record(line: string, undo: () => void): Promise<void> {
    this.journalRecords++;
    const done = this.journal.append(`${line}\n`, () => {
      this.failures++;
      undo();
    });
    this.maybeCompact();
    return done;
  }

  private maybeCompact(): void {
    if (this.compacting || this.closed || this.journalRecords < this.compactAfter()) return;
    this.compact().catch((error: unknown) => {
      this.options.logger.error(
        {
          error: String(error),
        },
        `${this.options.format} snapshot failed; the journal keeps growing until one succeeds`,
      );
    });
  }

  private async runCompaction(): Promise<void> {
    const { format } = this.options;
    try {
      await this.writeSnapshot();
      this.options.health?.ok(`${format} snapshot`);
    } catch (error) {
      this.options.health?.fail(`${format} snapshot`, error);
      throw error;
    }
    this.statsCounters.snapshots++;
  }

  private async writeSnapshot(): Promise<void> {
    const { dir, format, durable } = this.options;
    const generation = this.generation + 1;
    const next = await AppendLog.create(
      path.join(dir, generationName("journal", generation)),
      JournaledMap.journalHeader(format, generation),
      JournaledMap.logOptions(this.options),
    );
    const failuresBefore = this.failures;
    // Values are replaced, never mutated, so these references are the map exactly as of the
    // switch: every change before it is in an older journal, every change after it in `next`.
    const values = Array.from(this.values.values());
    const previous = this.journal;
    this.journal = next;
    this.generation = generation;
    this.journalRecords = 0;
    this.snapshotSize = values.length;
    await previous.close();
    if (this.failures !== failuresBefore) {
      // A change in `values` may have been undone after it was copied: skip this snapshot. The
      // journals stay, so start-up still reads the same state; the next compaction tries again.
      throw new SwitchboardError(
        "UNAVAILABLE",
        `${format} snapshot skipped: a ${format} journal write failed while it was being taken`,
      );
    }

    const snapshotPath = path.join(dir, generationName("snapshot", generation));
    const tempPath = `${snapshotPath}.tmp`;
    try {
      const fd = await openFile(tempPath, "w");
      try {
        await writeSnapshotFile(fd, format, generation, values);
        if (durable) await syncData(fd);
      } finally {
        await closeFile(fd);
      }
      await renamePath(tempPath, snapshotPath);
      if (durable) await syncDirectory(dir);
    } catch (error) {
      await fs.promises.rm(tempPath, { force: true }).catch(() => undefined);
      throw storageError(error, "writing", snapshotPath);
    }
    for (const name of await fs.promises.readdir(dir)) {
      const match = FILE_PATTERN.exec(name);
      if (match && Number(match[2]) < generation) await fs.promises.rm(path.join(dir, name), { force: true });
    }
    if (durable) await syncDirectory(dir);
    this.options.logger.info({ generation, count: values.length }, `wrote ${format} snapshot`);
  }
}

/** Writes a whole snapshot (header, values, checksummed end marker) from offset 0 of `fd`. */
export async function writeSnapshotFile<V>(
  fd: number,
  format: string,
  generation: number,
  values: readonly V[],
): Promise<void> {
  const hash = createHash("sha256");
  let offset = 0;
  const header = JSON.stringify({
    type: "snapshot",
    format,
    version: SNAPSHOT_FORMAT_VERSION,
    generation,
    count: values.length,
  });
  const first = Buffer.from(`${header}\n`);
  hash.update(first);
  await writeAllAt(fd, [first], offset);
  offset += first.length;
  for (let index = 0; index < values.length; index += SNAPSHOT_BATCH) {
    let text = "";
    const end = Math.min(values.length, index + SNAPSHOT_BATCH);
    for (let at = index; at < end; at++) text += `${JSON.stringify(values[at])}\n`;
    const chunk = Buffer.from(text);
    hash.update(chunk);
    await writeAllAt(fd, [chunk], offset);
    offset += chunk.length;
    await yieldToEventLoop();
  }
  const trailer = { type: "end", count: values.length, sha256: hash.digest("hex") };
  await writeAllAt(fd, [Buffer.from(`${JSON.stringify(trailer)}\n`)], offset);
}

export { generationName };
