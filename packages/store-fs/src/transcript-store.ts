import fs from "node:fs";
import path from "node:path";
import {
  type ArchivePruneOptions,
  buildTranscriptHeader,
  checkPruneOptions,
  DEFAULT_MAX_ENTRY_BYTES,
  normaliseReadOptions,
  parseSessionId,
  prepareTranscriptAppend,
  SwitchboardError,
  TailCollector,
  TRANSCRIPT_FORMAT_VERSION,
  type TranscriptEntry,
  type TranscriptEntryInput,
  type TranscriptHeader,
  type TranscriptReadOptions,
  type TranscriptReadResult,
  type TranscriptStore,
} from "@switchboard/core";
import { archivedAt, archiveStamp } from "./archive-names";
import { CommitLog, readPendingCommits } from "./commit-log";
import {
  closeFile,
  errorCode,
  fileSize,
  isNotFound,
  linkPath,
  openFile,
  readAt,
  renamePath,
  syncData,
  syncDirectory,
  truncateFile,
  writeAllAt,
  yieldToEventLoop,
} from "./fs-io";
import {
  findIntactEnd,
  NEWLINE,
  parseJsonLine,
  readFirstLine,
  scanBackward,
  scanForward,
  seqOfLine,
} from "./line-scan";
import type { StoreLogger } from "./logger";
import { storageError, withStorageErrors } from "./storage-errors";
import type { StoreHealthTracker } from "./store-health";
import { SyncAppendFile } from "./sync-append-file";

/** Errors that still let a transcript be opened for reading: its history stays available. */
const READ_ONLY_CODES = new Set(["EPERM", "EACCES", "EROFS"]);

const HEADER_MAX_BYTES = 64 * 1024;
/** Below this many bytes before the cursor, a `before` read just scans back from the end. */
const SEEK_THRESHOLD_BYTES = 1024 * 1024;
const CURSORS_PER_TRANSCRIPT = 32;

/** An entry line is intact when it is a JSON object with a numeric seq. */
export function isIntactEntryLine(line: Buffer): boolean {
  const value = parseJsonLine(line);
  return value !== undefined && typeof value.seq === "number" && typeof value.type === "string";
}

/** Checks a transcript's first line; returns the header or a reason it is unusable. */
export function checkTranscriptHeader(
  line: Buffer | undefined,
  sessionId: string,
): { header: TranscriptHeader } | { problem: string; newerVersion?: number } {
  const header = line ? parseJsonLine(line) : undefined;
  if (header?.type !== "session" || typeof header.version !== "number") {
    return { problem: "missing or unreadable header line" };
  }
  if (header.version > TRANSCRIPT_FORMAT_VERSION) {
    return {
      problem: `transcript format version ${header.version} is newer than this Switchboard supports (${TRANSCRIPT_FORMAT_VERSION}); upgrade Switchboard to read it`,
      newerVersion: header.version,
    };
  }
  if (typeof header.sessionId !== "string" || header.sessionId.toLowerCase() !== sessionId) {
    return {
      problem: `header names sessionId ${String(header.sessionId)}, but the file is named for ${sessionId}`,
    };
  }
  return { header: header as unknown as TranscriptHeader };
}

/** One open transcript: its append log (without fsync: the commit log makes appends durable). */
class TranscriptHandle {
  users = 0;
  retired = false;
  /**
   * Where the acknowledged entries end: reads stop here. The file's bytes after it are appends
   * whose commit is still in flight and may yet be refused and cut out (their seqs handed out
   * again), so they are never served. Advanced as commits resolve (in the order they were made:
   * the commit log resolves them in order, across a rotation too), cut back by a failed one.
   */
  acknowledged: number;
  /** seq of an entry → offset of its line: where a `before` page continues. */
  readonly cursors = new Map<number, number>();
  private idleWaiters: Array<() => void> = [];

  constructor(
    readonly sessionId: string,
    readonly header: TranscriptHeader,
    readonly file: SyncAppendFile,
    readonly dataStart: number,
    public lastSeq: number,
  ) {
    this.acknowledged = file.size;
  }

  get fd(): number {
    return this.file.descriptor;
  }

  release(): void {
    this.users--;
    if (this.users === 0) for (const wake of this.idleWaiters.splice(0)) wake();
  }

  async untilUnused(): Promise<void> {
    while (this.users > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  rememberCursor(seq: number, offset: number): void {
    if (this.cursors.size >= CURSORS_PER_TRANSCRIPT) {
      const oldest = this.cursors.keys().next().value;
      if (oldest !== undefined) this.cursors.delete(oldest);
    }
    this.cursors.set(seq, offset);
  }
}

export interface FileTranscriptStoreOptions {
  transcriptsDir: string;
  archiveDir: string;
  commitLogDir: string;
  tempDir: string;
  durable: boolean;
  maxEntryBytes?: number;
  maxOpenTranscripts: number;
  commitLogSegmentBytes: number;
  readChunkBytes: number;
  logger: StoreLogger;
  health?: StoreHealthTracker;
}

export interface TranscriptStats {
  openTranscripts: number;
  appendedEntries: number;
  commitBatches: number;
  tornTailsRepaired: number;
  entriesRestored: number;
}

const notFound = (sessionId: string) =>
  new SwitchboardError("NOT_FOUND", `no transcript for sessionId ${sessionId}`, { details: { sessionId } });

/**
 * Transcripts as one JSONL file per sessionId. Appends are group-committed through the commit
 * log; reads scan backwards in chunks from the end of the acknowledged entries (an append is
 * served once its commit resolved, never while it may still be refused). Open files are kept in a
 * small LRU with each transcript's last seq, so appends never scan.
 */
export class FileTranscriptStore implements TranscriptStore {
  private readonly handles = new Map<string, TranscriptHandle>();
  private readonly loading = new Map<string, Promise<TranscriptHandle>>();
  private readonly locks = new Map<string, Promise<unknown>>();
  private commitLog!: CommitLog;
  private closed = false;
  private tempCounter = 0;
  private readonly counters = { appendedEntries: 0, tornTailsRepaired: 0, entriesRestored: 0 };

  private constructor(private readonly options: FileTranscriptStoreOptions) {}

  static async open(options: FileTranscriptStoreOptions): Promise<FileTranscriptStore> {
    for (const dir of [options.transcriptsDir, options.archiveDir, options.commitLogDir, options.tempDir]) {
      await fs.promises.mkdir(dir, { recursive: true, mode: 0o700 });
    }
    // Temp files are half-made creates from a crash; nothing refers to them.
    for (const name of await fs.promises.readdir(options.tempDir)) {
      // Leftovers only take space: one that cannot go must not stop the start.
      await fs.promises.rm(path.join(options.tempDir, name), { force: true }).catch((error: unknown) => {
        options.logger.warn({ name, error: String(error) }, "cannot remove a temp file");
      });
    }
    const store = new FileTranscriptStore(options);
    const lastSegment = await store.replayCommitLog();
    store.commitLog = await CommitLog.start(
      {
        dir: options.commitLogDir,
        durable: options.durable,
        segmentBytes: options.commitLogSegmentBytes,
        logger: options.logger,
        ...(options.health ? { health: options.health } : {}),
        syncTranscript: (sessionId) => store.syncTranscript(sessionId),
      },
      lastSegment,
    );
    return store;
  }

  locate(sessionId: string): string {
    return path.join(this.options.transcriptsDir, `${parseSessionId(sessionId)}.jsonl`);
  }

  async create(input: Omit<TranscriptHeader, "type" | "version">): Promise<void> {
    this.assertOpen();
    const header = buildTranscriptHeader(input);
    const id = header.sessionId;
    await this.withLock(id, async () => {
      const existing = await this.existingHeader(id);
      if (existing) {
        if (existing.key !== header.key) {
          throw new SwitchboardError("CONFLICT", `transcript ${id} already exists for key ${existing.key}`, {
            details: { sessionId: id, key: existing.key },
          });
        }
        return;
      }
      // Written aside and linked into place, so a transcript file never exists without its header.
      const temp = path.join(this.options.tempDir, `${id}.${process.pid}.${++this.tempCounter}.tmp`);
      const target = this.locate(id);
      try {
        await withStorageErrors("creating", target, async () => {
          try {
            const fd = await openFile(temp, "wx");
            try {
              await writeAllAt(fd, [Buffer.from(`${JSON.stringify(header)}\n`)], 0);
              if (this.options.durable) await syncData(fd);
            } finally {
              await closeFile(fd);
            }
            await linkPath(temp, target);
          } finally {
            await fs.promises.rm(temp, { force: true });
          }
          if (this.options.durable) await syncDirectory(this.options.transcriptsDir);
        });
      } catch (error) {
        this.options.health?.fail("transcripts", error);
        throw error;
      }
      this.options.health?.ok("transcripts");
    });
  }

  async exists(sessionId: string): Promise<boolean> {
    const id = parseSessionId(sessionId);
    this.assertOpen();
    const handle = this.handles.get(id);
    if (handle && !handle.retired) return true;
    try {
      await fs.promises.access(this.locate(id));
      return true;
    } catch {
      return false;
    }
  }

  async lastSeq(sessionId: string): Promise<number> {
    const handle = await this.acquire(parseSessionId(sessionId));
    try {
      return handle.lastSeq;
    } finally {
      this.release(handle);
    }
  }

  async append(sessionId: string, entries: readonly TranscriptEntryInput[]): Promise<TranscriptEntry[]> {
    const id = parseSessionId(sessionId);
    const handle = await this.acquire(id);
    try {
      const prepared = prepareTranscriptAppend(entries, {
        lastSeq: handle.lastSeq,
        maxEntryBytes: this.options.maxEntryBytes ?? DEFAULT_MAX_ENTRY_BYTES,
      });
      if (prepared.entries.length === 0) return [];
      // From here on everything is synchronous up to the queueing, so seqs follow call order.
      let records = "";
      for (const line of prepared.lines) records += `${id} ${line}\n`;
      const start = handle.file.size;
      const previousSeq = handle.lastSeq;
      let end: number;
      try {
        handle.file.append(Buffer.from(`${prepared.lines.join("\n")}\n`));
        end = handle.file.size;
      } catch (error) {
        this.options.health?.fail("transcripts", error);
        throw error;
      }
      this.options.health?.ok("transcripts");
      handle.lastSeq = prepared.lastSeq;
      // Reads stop at `acknowledged`, so the entries are served only once their commit resolved.
      // A failed commit takes them back out of the transcript, so an unacknowledged entry is
      // never followed by new ones. Every later append fails with it (the commit log sees to
      // that, across a rotation too), so the undo can cut everything from `start`. The oldest
      // failed append's undo wins whatever order they run in: a rotation's next segment fails
      // its queue only after the previous one's failed batch undid its appends.
      await this.commitLog.commit(id, records, () => {
        handle.file.rollback(start);
        handle.lastSeq = Math.min(handle.lastSeq, previousSeq);
        handle.acknowledged = Math.min(handle.acknowledged, start);
        handle.cursors.clear();
      });
      // Commits resolve in order and an earlier append's bytes lie before this one's, so this
      // only moves forward over acknowledged bytes (an earlier append resolving late ends at or
      // before any later failed append's `start`).
      if (end > handle.acknowledged) handle.acknowledged = end;
      this.counters.appendedEntries += prepared.entries.length;
      return prepared.entries;
    } finally {
      this.release(handle);
    }
  }

  async read(sessionId: string, options: TranscriptReadOptions): Promise<TranscriptReadResult> {
    const id = parseSessionId(sessionId);
    const normalised = normaliseReadOptions(options);
    const handle = await this.acquire(id);
    try {
      const collector = new TailCollector(normalised);
      // Only acknowledged entries: an append whose commit is in flight may still be refused.
      let end = handle.acknowledged;
      if (normalised.before !== undefined) end = await this.endBefore(handle, normalised.before, end);
      let accepted = { seq: 0, start: 0 };
      let offered = { seq: 0, start: 0 };
      let damaged = 0;
      let firstDamagedAt: number | undefined;
      const scan = await scanBackward(
        handle.fd,
        handle.dataStart,
        end,
        (line, lineStart) => {
          const quickSeq = seqOfLine(line);
          if (quickSeq !== undefined && collector.skips(quickSeq)) return true;
          const entry = parseEntryLine(line);
          if (entry === undefined) {
            // One damaged line must not hide the rest of the history: skip it and say so.
            damaged++;
            firstDamagedAt ??= lineStart;
            return true;
          }
          const countBefore = collector.count;
          const more = collector.offer(entry, line.length);
          offered = { seq: entry.seq, start: lineStart };
          if (collector.count > countBefore) accepted = offered;
          return more;
        },
        this.options.readChunkBytes,
      );
      const result = collector.result(scan.reachedStart);
      if (damaged > 0) {
        result.damaged = damaged;
        this.options.logger.warn(
          {
            sessionId: id,
            path: this.locate(id),
            offset: firstDamagedAt,
          },
          `skipped ${damaged} damaged line(s) reading a transcript; run switchboard doctor`,
        );
      }
      if (result.nextBefore !== undefined) {
        if (result.nextBefore === accepted.seq) handle.rememberCursor(accepted.seq, accepted.start);
        else if (result.nextBefore === offered.seq) handle.rememberCursor(offered.seq, offered.start);
      }
      return result;
    } finally {
      this.release(handle);
    }
  }

  async archive(sessionId: string, reason: "reset" | "delete" | "archive"): Promise<void> {
    const id = parseSessionId(sessionId);
    if (!["reset", "delete", "archive"].includes(reason)) {
      throw new SwitchboardError("INVALID_REQUEST", "reason: must be one of reset, delete, archive");
    }
    this.assertOpen();
    await this.withLock(id, async () => {
      const stamp = archiveStamp();
      let target = path.join(this.options.archiveDir, `${id}.${stamp}.${reason}.jsonl`);
      for (let attempt = 1; fs.existsSync(target); attempt++) {
        target = path.join(this.options.archiveDir, `${id}.${stamp}-${attempt}.${reason}.jsonl`);
      }
      try {
        const found = await withStorageErrors("archiving", this.locate(id), async () => {
          if (!(await this.retireAndSync(id, true))) return false;
          await renamePath(this.locate(id), target);
          if (this.options.durable) {
            await syncDirectory(this.options.archiveDir);
            await syncDirectory(this.options.transcriptsDir);
          }
          return true;
        });
        if (!found) return;
      } catch (error) {
        this.options.health?.fail("archive", error);
        throw error;
      }
      this.options.health?.ok("archive");
      // Only once the file has left: replay then ignores its older commit records.
      await this.commitLog.drop(id);
      this.options.logger.info({ sessionId: id, reason, path: target }, "archived transcript");
    });
  }

  async remove(sessionId: string): Promise<void> {
    const id = parseSessionId(sessionId);
    this.assertOpen();
    await this.withLock(id, async () => {
      const found = await withStorageErrors("removing", this.locate(id), async () => {
        if (!(await this.retireAndSync(id, false))) return false;
        await fs.promises.rm(this.locate(id), { force: true });
        if (this.options.durable) await syncDirectory(this.options.transcriptsDir);
        return true;
      });
      if (found) await this.commitLog.drop(id);
    });
  }

  async pruneArchives(options: ArchivePruneOptions): Promise<number> {
    checkPruneOptions(options, "archivedBefore", options.archivedBefore);
    this.assertOpen();
    const dir = this.options.archiveDir;
    const names = await withStorageErrors("listing", dir, () => fs.promises.readdir(dir));
    // Reading a name's time costs microseconds, and an archive may hold 100k names, read again for
    // each batch: the scan yields between slices, and only the matches are ordered.
    const matches: Array<{ name: string; at: number }> = [];
    for (let index = 0; index < names.length; index++) {
      if (index > 0 && index % ARCHIVE_SCAN_SLICE === 0) await yieldToEventLoop();
      const name = names[index]!;
      const at = archivedAt(name);
      if (at !== undefined && at < options.archivedBefore) matches.push({ name, at });
    }
    const doomed = await oldestOf(matches, options.limit);
    for (const file of doomed) {
      await withStorageErrors("pruning", path.join(dir, file.name), () =>
        fs.promises.rm(path.join(dir, file.name), { force: true }),
      );
    }
    if (doomed.length > 0 && this.options.durable) await syncDirectory(dir);
    if (doomed.length > 0) this.options.logger.info({ count: doomed.length }, "pruned archived transcripts");
    return doomed.length;
  }

  stats(): TranscriptStats {
    return {
      openTranscripts: this.handles.size,
      commitBatches: this.commitLog.stats().batches,
      ...this.counters,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.loading.values()]);
    for (const handle of this.handles.values()) await handle.untilUnused();
    await this.commitLog.close();
    for (const handle of this.handles.values()) await handle.file.close().catch(() => undefined);
    this.handles.clear();
  }

  private assertOpen(): void {
    if (this.closed) throw new SwitchboardError("UNAVAILABLE", "transcript store is closed");
  }

  /** Serialises create/archive/remove/load of one sessionId. */
  private async withLock<T>(id: string, body: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(id) ?? Promise.resolve();
    const run = previous.then(body, body);
    const settled = run.catch(() => undefined);
    this.locks.set(id, settled);
    try {
      return await run;
    } finally {
      if (this.locks.get(id) === settled) this.locks.delete(id);
    }
  }

  private async acquire(id: string): Promise<TranscriptHandle> {
    for (;;) {
      this.assertOpen();
      const handle = this.handles.get(id);
      if (handle && !handle.retired) {
        // Re-inserting keeps the map in least-recently-used order.
        this.handles.delete(id);
        this.handles.set(id, handle);
        handle.users++;
        return handle;
      }
      if (handle) this.dropHandle(handle);
      let loading = this.loading.get(id);
      if (!loading) {
        loading = this.withLock(id, () => this.load(id)).finally(() => this.loading.delete(id));
        this.loading.set(id, loading);
      }
      await loading;
    }
  }

  /** Opens a transcript, checks its header, cuts a torn tail and learns its last seq. */
  private async load(id: string): Promise<TranscriptHandle> {
    const cached = this.handles.get(id);
    if (cached && !cached.retired) return cached;
    const filePath = this.locate(id);
    let fd: number;
    let readOnly: SwitchboardError | undefined;
    try {
      fd = await openFile(filePath, "r+");
    } catch (error) {
      if (isNotFound(error)) throw notFound(id);
      const refused = storageError(error, "opening for writing", filePath);
      if (!READ_ONLY_CODES.has(errorCode(error) ?? "") || !(refused instanceof SwitchboardError)) {
        this.options.health?.fail("transcripts", refused);
        throw refused;
      }
      // An immutable or read-only transcript still serves its history; only appends are refused.
      try {
        fd = await openFile(filePath, "r");
      } catch {
        throw refused;
      }
      readOnly = refused;
      this.options.health?.fail("transcripts", refused);
      this.options.logger.error(
        {
          sessionId: id,
          path: filePath,
          error: refused.message,
        },
        "transcript is not writable; serving it read-only",
      );
    }
    try {
      const size = await fileSize(fd);
      const headerLine = await readFirstLine(fd, HEADER_MAX_BYTES);
      const checked = checkTranscriptHeader(headerLine, id);
      if ("problem" in checked) {
        throw new SwitchboardError(
          checked.newerVersion ? "UNAVAILABLE" : "INTERNAL",
          checked.newerVersion
            ? `${filePath}: ${checked.problem}`
            : `${filePath}: ${checked.problem}; run \`switchboard doctor --repair\` with the gateway stopped to rewrite it from the index`,
        );
      }
      const dataStart = headerLine!.length + 1;
      const intact = await findIntactEnd(fd, dataStart, size, isIntactEntryLine);
      if (intact.end < size && !readOnly) {
        this.counters.tornTailsRepaired++;
        this.options.logger.warn(
          {
            sessionId: id,
            path: filePath,
            bytes: size - intact.end,
          },
          `cut a torn tail of ${size - intact.end} bytes from a transcript`,
        );
        await truncateFile(fd, intact.end);
        if (this.options.durable) await syncData(fd);
      }
      const lastSeq = intact.lastLine ? (parseJsonLine(intact.lastLine)!.seq as number) : 0;
      const file = new SyncAppendFile(filePath, fd, intact.end, readOnly);
      const handle = new TranscriptHandle(id, checked.header, file, dataStart, lastSeq);
      this.handles.set(id, handle);
      this.evictIdle(handle);
      return handle;
    } catch (error) {
      await closeFile(fd).catch(() => undefined);
      throw error;
    }
  }

  private release(handle: TranscriptHandle): void {
    handle.release();
    if (handle.users === 0) this.evictIdle(undefined);
  }

  /** Closes least recently used transcripts beyond the limit (never one in use, nor `keep`). */
  private evictIdle(keep: TranscriptHandle | undefined): void {
    if (this.handles.size <= this.options.maxOpenTranscripts) return;
    for (const handle of this.handles.values()) {
      if (this.handles.size <= this.options.maxOpenTranscripts) break;
      if (handle !== keep && handle.users === 0) this.dropHandle(handle);
    }
  }

  private dropHandle(handle: TranscriptHandle): void {
    if (this.handles.get(handle.sessionId) === handle) this.handles.delete(handle.sessionId);
    handle.retired = true;
    void handle
      .untilUnused()
      .then(() => handle.file.close())
      .catch(() => undefined);
  }

  /**
   * Stops all use of a transcript before it leaves its path. Returns false when there is no
   * transcript. With `sync`, its bytes are made durable first (an archive keeps them).
   */
  private async retireAndSync(id: string, sync: boolean): Promise<boolean> {
    const handle = this.handles.get(id);
    if (handle) {
      this.handles.delete(id);
      handle.retired = true;
      await handle.untilUnused();
      if (sync && this.options.durable) await syncData(handle.fd);
      await handle.file.close();
      return true;
    }
    let fd: number;
    try {
      fd = await openFile(this.locate(id), "r");
    } catch (error) {
      if (isNotFound(error)) return false;
      throw error;
    }
    try {
      if (sync && this.options.durable) await syncData(fd);
    } finally {
      await closeFile(fd);
    }
    return true;
  }

  private async existingHeader(id: string): Promise<TranscriptHeader | undefined> {
    const handle = this.handles.get(id);
    if (handle && !handle.retired) return handle.header;
    let fd: number;
    try {
      fd = await openFile(this.locate(id), "r");
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
    try {
      const checked = checkTranscriptHeader(await readFirstLine(fd, HEADER_MAX_BYTES), id);
      if ("problem" in checked)
        throw new SwitchboardError("INTERNAL", `${this.locate(id)}: ${checked.problem}`);
      return checked.header;
    } finally {
      await closeFile(fd);
    }
  }

  /** Makes a transcript's bytes durable (commit-log checkpoint); a transcript gone since is skipped. */
  private async syncTranscript(id: string): Promise<void> {
    const handle = this.handles.get(id);
    if (handle && !handle.retired) {
      handle.users++;
      try {
        await syncData(handle.fd);
      } finally {
        handle.release();
      }
      return;
    }
    let fd: number;
    try {
      fd = await openFile(this.locate(id), "r");
    } catch (error) {
      if (isNotFound(error)) return;
      throw error;
    }
    try {
      await syncData(fd);
    } finally {
      await closeFile(fd);
    }
  }

  /**
   * Where a backward scan for entries with `seq < before` can start: a remembered cursor, the end
   * when the cursor is near it, else a binary search over line starts (seqs grow with offsets).
   */
  private async endBefore(handle: TranscriptHandle, before: number, end: number): Promise<number> {
    if (before > handle.lastSeq) return end;
    const remembered = handle.cursors.get(before);
    if (remembered !== undefined && remembered <= end) return remembered;
    if (end - handle.dataStart <= SEEK_THRESHOLD_BYTES) return end;
    return (await this.bisectSeq(handle, before, end)).high;
  }

  /**
   * Narrows down where the lines with `seq >= before` begin, by binary search over line starts
   * in `[dataStart, end)`: every line before `low` has a lower seq, the line at `high` (unless
   * `end`) does not. Stops at an unreadable probe with what it knows so far.
   */
  private async bisectSeq(
    handle: TranscriptHandle,
    before: number,
    end: number,
  ): Promise<{ low: number; high: number }> {
    let low = handle.dataStart;
    let high = end;
    while (high - low > this.options.readChunkBytes) {
      const middle = low + Math.floor((high - low) / 2);
      const probe = await this.lineStartFrom(handle.fd, middle, high);
      if (probe === undefined) break;
      const prefix = Buffer.alloc(48);
      const read = await readAt(handle.fd, prefix, prefix.length, probe);
      const seq = seqOfLine(prefix.subarray(0, read));
      if (seq === undefined) break;
      if (seq >= before) high = probe;
      else low = probe;
    }
    return { low, high };
  }

  /** The first line start in `[from, limit)`, if any. */
  private async lineStartFrom(fd: number, from: number, limit: number): Promise<number | undefined> {
    const chunk = Buffer.allocUnsafe(16 * 1024);
    // Reading from one byte earlier tells whether `from` itself starts a line.
    let position = from - 1;
    while (position < limit) {
      const read = await readAt(fd, chunk, Math.min(chunk.length, limit - position), position);
      if (read === 0) return undefined;
      const newline = chunk.subarray(0, read).indexOf(NEWLINE);
      if (newline >= 0) {
        const start = position + newline + 1;
        return start < limit ? start : undefined;
      }
      position += read;
    }
    return undefined;
  }

  /**
   * Applies commit-log segments left by the previous run: entries missing from their transcript
   * are appended again, every transcript the segments mention is fsynced, then the segments go.
   */
  private async replayCommitLog(): Promise<number> {
    const pending = await readPendingCommits(this.options.commitLogDir);
    if (pending.tornBytes > 0) {
      this.options.logger.warn(
        {
          bytes: pending.tornBytes,
        },
        `ignored a torn commit-log tail of ${pending.tornBytes} bytes`,
      );
    }
    let keepSegments = false;
    for (const id of pending.sessions) {
      let handle: TranscriptHandle;
      try {
        handle = await this.acquire(id);
      } catch (error) {
        if (error instanceof SwitchboardError && error.code !== "NOT_FOUND") {
          // One unreadable transcript must not keep the whole gateway down: its segments stay
          // for the next start, which re-applies them once the file is fixed.
          keepSegments = true;
          this.options.logger.error(
            {
              sessionId: id,
              error: error.message,
            },
            "cannot check a transcript against the commit log; keeping the log",
          );
          continue;
        }
        if (error instanceof SwitchboardError && error.code === "NOT_FOUND") {
          const lost = pending.entries.get(id)?.length ?? 0;
          if (lost > 0) {
            this.options.logger.warn(
              {
                sessionId: id,
              },
              `commit log holds ${lost} entries for a transcript that no longer exists`,
            );
          }
          continue;
        }
        throw error;
      }
      try {
        const logged = acknowledgedEntries(pending.entries.get(id) ?? []);
        if (!(await this.restoreEntries(handle, logged))) keepSegments = true;
      } finally {
        handle.release();
      }
    }
    if (keepSegments) return pending.lastSegmentNumber;
    for (const segment of pending.segments) await fs.promises.rm(segment, { force: true });
    if (this.options.durable && pending.segments.length > 0) await syncDirectory(this.options.commitLogDir);
    return pending.lastSegmentNumber;
  }

  /**
   * Makes a transcript hold every entry a pending segment holds for it, durably. Returns false
   * when it cannot (the segments must stay).
   *
   * Transcripts are not fsynced before their segment's checkpoint, so after a power cut any of
   * their pages written since may be lost or zeroed, not only the last: every logged entry is
   * checked where it should be. Entries before the first logged seq were made durable by an
   * earlier checkpoint, so a binary search skips them; the check compares bytes and parses
   * nothing on the common paths (a kill, where the page cache kept everything; a lost tail,
   * where the missing entries are appended as before).
   */
  private async restoreEntries(handle: TranscriptHandle, logged: Map<number, Buffer>): Promise<boolean> {
    const id = handle.sessionId;
    if (logged.size > 0) {
      const firstSeq = logged.keys().next().value as number;
      const from = (await this.bisectSeq(handle, firstSeq, handle.file.size)).low;
      const intact = new Set<number>();
      await scanForward(handle.fd, from, handle.file.size, (line) => {
        const seq = seqOfLine(line);
        const entry = seq === undefined ? undefined : logged.get(seq);
        if (entry?.equals(line)) intact.add(seq!);
        return true;
      });
      let lostInside = 0;
      for (const seq of logged.keys()) if (seq <= handle.lastSeq && !intact.has(seq)) lostInside++;
      if (lostInside > 0) {
        if (handle.file.readOnly) return this.cannotRestore(id, handle.file.readOnly);
        try {
          await this.rewriteWithEntries(handle, from, logged);
        } catch (error) {
          return this.cannotRestore(id, error);
        }
        return true;
      }
      const missing = [...logged].filter(([seq]) => seq > handle.lastSeq);
      if (missing.length > 0) {
        try {
          handle.file.append(Buffer.concat(missing.flatMap(([, line]) => [line, NEWLINE_BYTE])));
        } catch (error) {
          return this.cannotRestore(id, error);
        }
        handle.lastSeq = missing.at(-1)![0];
        // Restored from the commit log: acknowledged by the run that logged them.
        handle.acknowledged = handle.file.size;
        this.counters.entriesRestored += missing.length;
        this.options.logger.warn(
          {
            sessionId: id,
          },
          `restored ${missing.length} acknowledged entries from the commit log`,
        );
      }
    }
    if (this.options.durable) await syncData(handle.fd);
    return true;
  }

  private cannotRestore(id: string, error: unknown): false {
    this.options.logger.error(
      {
        sessionId: id,
        error: error instanceof Error ? error.message : String(error),
      },
      "cannot restore acknowledged entries into a transcript; keeping the log",
    );
    return false;
  }

  /**
   * Rewrites a transcript whose logged entries are lost or damaged before its end: its bytes up
   * to `from` as they are, then its intact entries and the logged ones in seq order (a logged
   * one wins over the transcript's line of the same seq). A damaged line goes when the logged
   * entries fill the whole gap it sits in; otherwise it stays where it is for `switchboard
   * doctor`, since it may hold an entry nothing else has. Written aside and renamed into place,
   * so a crash leaves the old file and the segments, and the next open does it again. Retires
   * the handle: the next use opens the new file.
   */
  private async rewriteWithEntries(
    handle: TranscriptHandle,
    from: number,
    logged: Map<number, Buffer>,
  ): Promise<void> {
    const id = handle.sessionId;
    const out: Buffer[] = [];
    const emitted = new Set<number>();
    let restored = 0;
    let damagedDropped = 0;
    let damaged: Buffer[] = [];
    // The seq of the intact line before a damaged run; unknown when the scan starts on one
    // after the file's first line.
    let previous: number | undefined = from === handle.dataStart ? 0 : undefined;
    const pendingSeqs = [...logged.keys()];
    let next = 0;
    const emitLogged = (seq: number) => {
      emitted.add(seq);
      out.push(logged.get(seq)!, NEWLINE_BYTE);
    };
    const settleGap = (until: number | undefined) => {
      let filled = previous !== undefined && until !== undefined && until - previous - 1 <= logged.size;
      for (let seq = (previous ?? 0) + 1; filled && seq < until!; seq++) filled = logged.has(seq);
      if (filled) damagedDropped += damaged.length;
      else for (const line of damaged) out.push(line, NEWLINE_BYTE);
      damaged = [];
      for (; next < pendingSeqs.length && (until === undefined || pendingSeqs[next]! < until); next++) {
        const seq = pendingSeqs[next]!;
        if (emitted.has(seq)) continue;
        emitLogged(seq);
        restored++;
      }
    };
    await scanForward(handle.fd, from, handle.file.size, (line) => {
      const seq = parseEntryLine(line)?.seq;
      if (seq === undefined) {
        damaged.push(Buffer.from(line));
        return true;
      }
      settleGap(seq);
      const entry = logged.get(seq);
      if (entry === undefined) out.push(Buffer.from(line), NEWLINE_BYTE);
      else if (!emitted.has(seq)) {
        if (!entry.equals(line)) restored++;
        emitLogged(seq);
      }
      previous = seq;
      return true;
    });
    settleGap(undefined);

    const target = this.locate(id);
    const temp = path.join(this.options.tempDir, `${id}.${process.pid}.${++this.tempCounter}.tmp`);
    try {
      await withStorageErrors("rewriting", target, async () => {
        // The durable part before `from` is copied as it is, without reading it into memory.
        await fs.promises.copyFile(target, temp, fs.constants.COPYFILE_EXCL);
        const fd = await openFile(temp, "r+");
        try {
          await writeAllAt(fd, out, from);
          await truncateFile(fd, from + out.reduce((sum, buffer) => sum + buffer.length, 0));
          if (this.options.durable) await syncData(fd);
        } finally {
          await closeFile(fd);
        }
        await renamePath(temp, target);
        if (this.options.durable) await syncDirectory(this.options.transcriptsDir);
      });
    } finally {
      await fs.promises.rm(temp, { force: true }).catch(() => undefined);
      // Its descriptor may be the old file's by now.
      this.dropHandle(handle);
    }
    this.counters.entriesRestored += restored;
    this.options.logger.warn(
      {
        sessionId: id,
        path: target,
        restored,
        damagedDropped,
      },
      `rewrote a transcript that had lost acknowledged entries before its end: restored ${restored} from the commit log` +
        (damagedDropped > 0 ? `, dropped ${damagedDropped} damaged line(s) they replace` : ""),
    );
  }
}

const NEWLINE_BYTE = Buffer.from("\n");

/**
 * A transcript's commit records (oldest first) as acknowledged entry lines by seq, ascending. A
 * seq logged again means the entries from it on were taken back (a failed commit whose records
 * stayed in a previous segment) and appended anew: the later records win.
 */
function acknowledgedEntries(lines: readonly string[]): Map<number, Buffer> {
  const bySeq = new Map<number, Buffer>();
  let top = 0;
  for (const line of lines) {
    const seq = seqOfLine(Buffer.from(line.slice(0, 48), "latin1")) ?? (JSON.parse(line).seq as number);
    if (seq <= top) for (const known of bySeq.keys()) if (known >= seq) bySeq.delete(known);
    bySeq.set(seq, Buffer.from(line));
    top = seq;
  }
  return bySeq;
}

/** A stored entry line as an entry; undefined when the line is damaged. */
function parseEntryLine(line: Buffer): TranscriptEntry | undefined {
  const value = parseJsonLine(line);
  return value !== undefined && typeof value.seq === "number" && typeof value.type === "string"
    ? (value as unknown as TranscriptEntry)
    : undefined;
}

/** Archive names read between two yields to the event loop when pruning. */
const ARCHIVE_SCAN_SLICE = 2_000;

/** The `limit` oldest of `files`, oldest first, without sorting them all. */
async function oldestOf<T extends { at: number }>(files: T[], limit: number): Promise<T[]> {
  if (files.length > limit) {
    // A numeric sort of the times alone (fast, no comparator) gives the cut-off.
    const cutoff = Float64Array.from(files, (file) => file.at).sort()[limit - 1]!;
    await yieldToEventLoop();
    const older = files.filter((file) => file.at < cutoff);
    const atCutoff = files.filter((file) => file.at === cutoff).slice(0, limit - older.length);
    files = [...older, ...atCutoff];
  }
  return files.sort((a, b) => a.at - b.at);
}
