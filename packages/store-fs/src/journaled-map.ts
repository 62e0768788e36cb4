import fs from "node:fs";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { AppendLog } from "./append-log";
import {
  closeFile,
  fileSize,
  isNotFound,
  openFile,
  syncData,
  syncDirectory,
  truncateFile,
  writeAllAt,
  yieldToEventLoop,
} from "./fs-io";
import { forEachLineText, scanForward } from "./line-scan";
import type { StoreLogger } from "./logger";

/** Format version of journal and snapshot files. */
export const JOURNAL_FORMAT_VERSION = 1;

const LOAD_CHUNK_BYTES = 1024 * 1024;
const SNAPSHOT_BATCH = 2000;

type JournalRecord<V> = { op: "put"; value: V } | { op: "del"; key: string };

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

function corrupt(message: string): SwitchboardError {
  return new SwitchboardError("INTERNAL", message);
}

function checkHeader(
  filePath: string,
  line: Buffer | undefined,
  type: string,
  format: string,
): Record<string, unknown> {
  let header: Record<string, unknown> | undefined;
  try {
    header = line ? (JSON.parse(line.toString("utf8")) as Record<string, unknown>) : undefined;
  } catch {
    header = undefined;
  }
  if (!header || header.type !== type || header.format !== format || typeof header.version !== "number") {
    throw corrupt(`${filePath}: missing or unreadable ${format} ${type} header`);
  }
  if (header.version > JOURNAL_FORMAT_VERSION) {
    throw new SwitchboardError(
      "UNAVAILABLE",
      `${filePath}: ${format} ${type} format version ${header.version} is newer than this Switchboard supports (${JOURNAL_FORMAT_VERSION}); upgrade Switchboard to open this data dir`,
    );
  }
  return header;
}

/**
 * Reads a journaled map's directory without changing anything: the newest snapshot plus the
 * journals after it. A torn last record of a journal is reported (and skipped), a damaged record
 * before intact ones is an error.
 */
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
    const result = await forEachLineText(fd, 0, await fileSize(fd), (line) => {
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
      if (parsed.type === "end" && typeof parsed.count === "number" && Object.keys(parsed).length === 2) {
        trailer = parsed;
        return true;
      }
      const value = revive(parsed as V);
      values.set(keyOf(value), value);
      count++;
      return true;
    });
    if (bad !== undefined || trailer === undefined || trailer.count !== count || result.trailingBytes > 0) {
      throw corrupt(
        `${filePath}: snapshot is damaged (${bad ?? (trailer === undefined ? "no end marker" : "count mismatch")}); restore it from a backup`,
      );
    }
  } finally {
    await closeFile(fd);
  }
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
        let record: JournalRecord<V> | undefined;
        try {
          record = JSON.parse(line.toString("utf8")) as JournalRecord<V>;
        } catch {
          record = undefined;
        }
        const valid = record !== undefined && (record.op === "put" || record.op === "del");
        if (badAt !== undefined) {
          if (valid) intactAfterBad = true;
          return true;
        }
        if (!valid) {
          badAt = lineStart;
          return true;
        }
        if (record!.op === "put") {
          const value = revive(record!.value);
          values.set(keyOf(value), value);
        } else values.delete(record!.key);
        records++;
        validEnd = lineStart + line.length + 1;
        return true;
      },
      LOAD_CHUNK_BYTES,
    );
    if (intactAfterBad) {
      throw corrupt(
        `${filePath}: damaged record at offset ${badAt} before intact ones; restore it from a backup`,
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
  /** Journal records after which a background snapshot is written. */
  snapshotEvery: number;
  logger: StoreLogger;
  /** Applied to each value read from disk (e.g. to share repeated strings). */
  revive?: (value: V) => V;
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
  private readonly statsCounters = { snapshots: 0, tornTailsRepaired: 0 };

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
  }

  static async open<V>(options: JournaledMapOptions<V>): Promise<JournaledMap<V>> {
    await fs.promises.mkdir(options.dir, { recursive: true, mode: 0o700 });
    const state = await readJournaledState(options.dir, options.format, options.keyOf, options.revive);
    for (const leftover of state.leftovers) await fs.promises.rm(leftover, { force: true });
    let tornTails = 0;
    for (const journal of state.journals) {
      if (journal.tornBytes === 0) continue;
      tornTails++;
      options.logger.warn(
        `cut a torn tail of ${journal.tornBytes} bytes from the ${options.format} journal`,
        {
          path: journal.path,
          bytes: journal.tornBytes,
        },
      );
      const fd = await openFile(journal.path, "r+");
      try {
        await truncateFile(fd, journal.validEnd);
        if (options.durable) await syncData(fd);
      } finally {
        await closeFile(fd);
      }
    }
    const last = state.journals.at(-1);
    const logOptions = { durable: options.durable, label: `${options.format} journal` };
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

  private static journalHeader(format: string, generation: number): string {
    return JSON.stringify({ type: "journal", format, version: JOURNAL_FORMAT_VERSION, generation });
  }

  get size(): number {
    return this.values.size;
  }

  get(key: string): V | undefined {
    return this.values.get(key);
  }

  /** Sets the value at once (reads see it) and resolves when the change is durable. */
  put(value: V): Promise<void> {
    this.assertOpen();
    this.values.set(this.options.keyOf(value), value);
    return this.record({ op: "put", value });
  }

  delete(key: string): Promise<boolean> {
    this.assertOpen();
    if (!this.values.delete(key)) return Promise.resolve(false);
    return this.record({ op: "del", key }).then(() => true);
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
    this.closed = true;
    while (this.compacting) await this.compacting.catch(() => undefined);
    await this.journal.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new SwitchboardError("UNAVAILABLE", `${this.options.format} store is closed`);
  }

  private record(record: JournalRecord<V>): Promise<void> {
    this.journalRecords++;
    const done = this.journal.append(`${JSON.stringify(record)}\n`);
    this.maybeCompact();
    return done;
  }

  private maybeCompact(): void {
    if (this.compacting || this.closed || this.journalRecords < this.options.snapshotEvery) return;
    this.compact().catch((error: unknown) => {
      this.options.logger.error(
        `${this.options.format} snapshot failed; the journal keeps growing until one succeeds`,
        {
          error: String(error),
        },
      );
    });
  }

  private async runCompaction(): Promise<void> {
    const { dir, format, durable } = this.options;
    const generation = this.generation + 1;
    const next = await AppendLog.create(
      path.join(dir, generationName("journal", generation)),
      JournaledMap.journalHeader(format, generation),
      { durable, label: `${format} journal` },
    );
    // Values are replaced, never mutated, so these references are the map exactly as of the
    // switch: every change before it is in an older journal, every change after it in `next`.
    const values = Array.from(this.values.values());
    const previous = this.journal;
    this.journal = next;
    this.generation = generation;
    this.journalRecords = 0;
    await previous.close();

    const snapshotPath = path.join(dir, generationName("snapshot", generation));
    const tempPath = `${snapshotPath}.tmp`;
    const fd = await openFile(tempPath, "w");
    try {
      let offset = 0;
      const header = JSON.stringify({
        type: "snapshot",
        format,
        version: JOURNAL_FORMAT_VERSION,
        generation,
        count: values.length,
      });
      const first = Buffer.from(`${header}\n`);
      await writeAllAt(fd, [first], offset);
      offset += first.length;
      for (let index = 0; index < values.length; index += SNAPSHOT_BATCH) {
        let text = "";
        const end = Math.min(values.length, index + SNAPSHOT_BATCH);
        for (let at = index; at < end; at++) text += `${JSON.stringify(values[at])}\n`;
        const chunk = Buffer.from(text);
        await writeAllAt(fd, [chunk], offset);
        offset += chunk.length;
        await yieldToEventLoop();
      }
      await writeAllAt(
        fd,
        [Buffer.from(`${JSON.stringify({ type: "end", count: values.length })}\n`)],
        offset,
      );
      if (durable) await syncData(fd);
    } finally {
      await closeFile(fd);
    }
    await fs.promises.rename(tempPath, snapshotPath);
    if (durable) await syncDirectory(dir);
    for (const name of await fs.promises.readdir(dir)) {
      const match = FILE_PATTERN.exec(name);
      if (match && Number(match[2]) < generation) await fs.promises.rm(path.join(dir, name), { force: true });
    }
    if (durable) await syncDirectory(dir);
    this.statsCounters.snapshots++;
    this.options.logger.info(`wrote ${format} snapshot`, { generation, count: values.length });
  }
}
