import fs from "node:fs";
import path from "node:path";
import {
  type AuditRecord,
  type AuditStore,
  normaliseAuditRead,
  SwitchboardError,
  validateAuditBatch,
  validateScanPageSize,
  validateTailLimit,
} from "@switchboard/core";
import { AppendLog } from "./append-log";
import { closeFile, fileSize, isNotFound, openFile, syncData, truncateFile } from "./fs-io";
import { findIntactEnd, parseJsonLine, readFirstLine, scanBackward, scanForward } from "./line-scan";
import type { StoreLogger } from "./logger";
import type { StoreHealthTracker } from "./store-health";

export const AUDIT_FORMAT_VERSION = 1;
export const AUDIT_FILE = "audit.jsonl";
/** One remembered offset per this many records makes `read({after})` skip straight to its start. */
const OFFSET_STRIDE = 256;

export function auditHeaderProblem(line: Buffer | undefined, filePath: string): SwitchboardError | undefined {
  const header = line ? parseJsonLine(line) : undefined;
  if (header?.type !== "audit" || typeof header.version !== "number") {
    return new SwitchboardError("INTERNAL", `${filePath}: missing or unreadable audit header`);
  }
  if (header.version > AUDIT_FORMAT_VERSION) {
    return new SwitchboardError(
      "UNAVAILABLE",
      `${filePath}: audit format version ${header.version} is newer than this Switchboard supports (${AUDIT_FORMAT_VERSION}); upgrade Switchboard to open this data dir`,
    );
  }
  return undefined;
}

export const isIntactAuditLine = (line: Buffer) => typeof parseJsonLine(line)?.index === "number";

/**
 * The audit log: one JSONL file of chained records, appended with group commit. Memory holds
 * only the first index, the last record and (after the first `read({after})`) one offset per
 * 256 records.
 */
export class FileAuditLog implements AuditStore {
  private marks: AuditMark[] | undefined;
  private liveMarks: AuditMark[] | undefined;
  private building: Promise<AuditMark[]> | undefined;
  private firstIndex: number | undefined;
  private lastRecord: AuditRecord | undefined;
  private total: number;
  /** Appends waiting for a gate, in chain order (see `append`). */
  private held: HeldWrite[] = [];
  private lastWrite: Promise<void> = Promise.resolve();

  private constructor(
    private readonly log: AppendLog,
    private readonly dataStart: number,
    first: number | undefined,
    last: AuditRecord | undefined,
  ) {
    this.firstIndex = first;
    this.lastRecord = last;
    this.total = first === undefined || last === undefined ? 0 : last.index - first + 1;
  }

  static async open(options: {
    dir: string;
    durable: boolean;
    logger: StoreLogger;
    health?: StoreHealthTracker;
  }): Promise<FileAuditLog> {
    await fs.promises.mkdir(options.dir, { recursive: true, mode: 0o700 });
    const filePath = path.join(options.dir, AUDIT_FILE);
    const logOptions = {
      durable: options.durable,
      label: "audit log",
      gather: "turn" as const,
      ...(options.health ? { health: options.health } : {}),
    };
    const header = JSON.stringify({ type: "audit", version: AUDIT_FORMAT_VERSION });
    let fd: number;
    try {
      fd = await openFile(filePath, "r+");
    } catch (error) {
      if (!isNotFound(error)) throw error;
      const log = await AppendLog.create(filePath, header, logOptions);
      return new FileAuditLog(log, log.size, undefined, undefined);
    }
    let intactEnd: number;
    let dataStart: number;
    let last: AuditRecord | undefined;
    let first: number | undefined;
    try {
      const size = await fileSize(fd);
      const headerLine = await readFirstLine(fd);
      if (headerLine === undefined && size < 4096) {
        // A crash while the file was being created: nothing was ever acknowledged in it.
        await truncateFile(fd, 0);
        await closeFile(fd);
        await fs.promises.rm(filePath);
        const log = await AppendLog.create(filePath, header, logOptions);
        return new FileAuditLog(log, log.size, undefined, undefined);
      }
      const problem = auditHeaderProblem(headerLine, filePath);
      if (problem) throw problem;
      dataStart = headerLine!.length + 1;
      const intact = await findIntactEnd(fd, dataStart, size, isIntactAuditLine);
      intactEnd = intact.end;
      if (intactEnd < size) {
        options.logger.warn(
          {
            path: filePath,
            bytes: size - intactEnd,
          },
          `cut a torn tail of ${size - intactEnd} bytes from the audit log`,
        );
        await truncateFile(fd, intactEnd);
        if (options.durable) await syncData(fd);
      }
      if (intact.lastLine) {
        last = JSON.parse(intact.lastLine.toString("utf8")) as AuditRecord;
        await scanForward(fd, dataStart, intactEnd, (line) => {
          first = (parseJsonLine(line)?.index as number | undefined) ?? undefined;
          return false;
        });
      }
    } finally {
      await closeFile(fd).catch(() => undefined);
    }
    const log = await AppendLog.openAt(filePath, intactEnd, logOptions);
    return new FileAuditLog(log, dataStart, first, last);
  }

  /** The index of the last record (written or queued), for checks that must not wait. */
  get lastIndex(): number | undefined {
    return this.lastRecord?.index;
  }

  /** Resolves once every record queued so far is durable; rejects when one of them failed. */
  settled(): Promise<void> {
    return this.lastWrite;
  }

  /**
   * Appends chained records. With `gate`, they are queued now (so the chain order holds) but
   * written only once `gate` resolves, and records appended meanwhile wait behind them; a rejected
   * gate rejects them and every record behind them, as a failed write does.
   */
  append(records: readonly AuditRecord[], gate?: Promise<unknown>): Promise<void> {
    let valid: AuditRecord[];
    try {
      valid = validateAuditBatch(records, this.lastRecord?.index);
    } catch (error) {
      return Promise.reject(error);
    }
    if (valid.length === 0) return Promise.resolve();
    const before = { first: this.firstIndex, last: this.lastRecord, total: this.total };
    let offset = this.log.reservedSize;
    let text = "";
    for (const record of valid) {
      const line = `${JSON.stringify(record)}\n`;
      this.firstIndex ??= record.index;
      const marks = this.marks ?? this.liveMarks;
      if (marks && (record.index - this.firstIndex) % OFFSET_STRIDE === 0)
        marks.push({ index: record.index, offset });
      offset += Buffer.byteLength(line);
      text += line;
    }
    this.lastRecord = valid.at(-1);
    this.total += valid.length;
    // A failed write leaves the log where it was, so the chain continues from the last durable record.
    const undo = () => {
      this.firstIndex = before.first;
      this.lastRecord = before.last;
      this.total = before.total;
      const firstFailed = valid[0]!.index;
      for (const marks of [this.marks, this.liveMarks]) {
        while (marks && marks.length > 0 && marks.at(-1)!.index >= firstFailed) marks.pop();
      }
    };
    let written: Promise<void>;
    if (gate === undefined && this.held.length === 0) written = this.log.append(text, this.failingHeld(undo));
    else {
      const item = { text, undo, open: gate === undefined } as HeldWrite;
      written = new Promise<void>((resolve, reject) => {
        item.resolve = resolve;
        item.reject = reject;
        this.held.push(item);
        gate?.then(
          () => {
            item.open = true;
            this.release();
          },
          (error: unknown) => this.failHeld(item, error),
        );
      });
      item.written = written;
    }
    this.lastWrite = written;
    written.catch(() => undefined);
    return written;
  }

  /** Hands the held writes whose gates are open, in order, to the log. */
  private release(): void {
    while (this.held.length > 0 && this.held[0]!.open) {
      const item = this.held.shift()!;
      this.log.append(item.text, this.failingHeld(item.undo)).then(item.resolve, item.reject);
    }
  }

  /**
   * Fails `from` and every write held behind it (all held writes without `from`), newest first, so
   * each undo restores what the one before it left.
   */
  private failHeld(from: HeldWrite | undefined, error: unknown): void {
    const start = from === undefined ? 0 : this.held.indexOf(from);
    if (start < 0) return;
    const failed = this.held.splice(start);
    for (const item of failed.reverse()) {
      item.undo();
      item.reject(error);
    }
    // Only writes still queued count for `settled` (a failed one was taken back out).
    this.lastWrite = this.held.at(-1)?.written ?? Promise.resolve();
  }

  /** A written record's undo: the held records behind it cannot follow it any more, and go first. */
  private failingHeld(undo: () => void): () => void {
    return () => {
      if (this.held.length > 0) {
        this.failHeld(
          undefined,
          new SwitchboardError("UNAVAILABLE", "audit log: an earlier record could not be written"),
        );
      }
      undo();
      this.lastWrite = Promise.resolve();
    };
  }

  async last(): Promise<AuditRecord | undefined> {
    return this.lastRecord ? structuredClone(this.lastRecord) : undefined;
  }

  async read(options?: { after?: number; limit?: number }): Promise<AuditRecord[]> {
    const { after, limit } = normaliseAuditRead(options);
    const out: AuditRecord[] = [];
    if (limit === 0 || this.firstIndex === undefined) return out;
    let start = this.dataStart;
    if (after !== undefined && after >= this.firstIndex + OFFSET_STRIDE) {
      start = markBefore(await this.offsetIndex(), after + 1) ?? this.dataStart;
    }
    await scanForward(this.log.descriptor, start, this.log.size, (line) => {
      const record = this.parseRecord(line);
      if (after !== undefined && record.index <= after) return true;
      out.push(record);
      return limit === undefined || out.length < limit;
    });
    return out;
  }

  async tail(limit: number): Promise<AuditRecord[]> {
    const count = validateTailLimit(limit);
    const out: AuditRecord[] = [];
    if (count === 0) return out;
    await scanBackward(this.log.descriptor, this.dataStart, this.log.size, (line) => {
      out.push(this.parseRecord(line));
      return out.length < count;
    });
    return out.reverse();
  }

  async *scan(pageSize: number): AsyncGenerator<AuditRecord[]> {
    const size = validateScanPageSize(pageSize);
    if (this.firstIndex === undefined) return;
    // To the end as it is now: records appended meanwhile are the next check's.
    const end = this.log.size;
    let offset = this.dataStart;
    while (offset < end) {
      const page: AuditRecord[] = [];
      const scanned = await scanForward(this.log.descriptor, offset, end, (line) => {
        page.push(this.parseRecord(line));
        return page.length < size;
      });
      if (page.length > 0) yield page;
      if (!scanned.stopped) return;
      offset = scanned.end;
    }
  }

  /**
   * One record of the log. Open checks only the tail (a full scan would cost start-up time in
   * proportion to the log), so a record damaged further back is found when a read reaches it: the
   * read fails naming the file, rather than with the parser's bare message.
   */
  private parseRecord(line: Buffer): AuditRecord {
    try {
      return JSON.parse(line.toString("utf8")) as AuditRecord;
    } catch (error) {
      throw new SwitchboardError(
        "INTERNAL",
        `${this.log.filePath}: a damaged audit record (${(error as Error).message}) before intact ones; the log cannot be read past it — \`switchboard doctor\` reports it; restore the file from a backup`,
      );
    }
  }

  async count(): Promise<number> {
    return this.total;
  }

  async close(): Promise<void> {
    // Held records wait for their gates (an intent being written): let them go out first.
    while (this.held.length > 0) await this.lastWrite.catch(() => undefined);
    return this.log.close();
  }

  /**
   * Built on first need by one forward pass, then extended by `append`. Marks are (index, offset)
   * pairs, so a mark missed while the pass ran only makes a later scan a little longer.
   */
  private async offsetIndex(): Promise<AuditMark[]> {
    if (this.marks) return this.marks;
    this.building ??= (async () => {
      const live: AuditMark[] = [];
      this.liveMarks = live;
      const scanned: AuditMark[] = [];
      const first = this.firstIndex!;
      await scanForward(this.log.descriptor, this.dataStart, this.log.size, (line, lineStart) => {
        const index = parseJsonLine(line)?.index as number;
        if ((index - first) % OFFSET_STRIDE === 0) scanned.push({ index, offset: lineStart });
        return true;
      });
      const lastScanned = scanned.at(-1)?.index ?? -1;
      this.marks = [...scanned, ...live.filter((mark) => mark.index > lastScanned)];
      this.liveMarks = undefined;
      return this.marks;
    })();
    return this.building;
  }
}

/** An append queued behind a gate (or behind another held append). */
interface HeldWrite {
  text: string;
  written?: Promise<void>;
  undo: () => void;
  open: boolean;
  resolve: () => void;
  reject: (error: unknown) => void;
}

interface AuditMark {
  index: number;
  offset: number;
}

/** Offset of the last mark at or before `index`. */
function markBefore(marks: readonly AuditMark[], index: number): number | undefined {
  let low = 0;
  let high = marks.length - 1;
  let found: number | undefined;
  while (low <= high) {
    const middle = (low + high) >>> 1;
    if (marks[middle]!.index <= index) {
      found = marks[middle]!.offset;
      low = middle + 1;
    } else high = middle - 1;
  }
  return found;
}
