import fs from "node:fs";
import path from "node:path";
import {
  buildTranscriptHeader,
  isLevel,
  type Level,
  maxLevel,
  type RunRecord,
  type SessionEntry,
} from "@switchboard/core";
import { parseCommitRecord, readPendingCommits } from "./commit-log";
import { type DoctorReport, damagedLines, type IndexFormat, indexRowReader, inspectDataDir } from "./doctor";
import { keptCopiesWithoutMap, openFileStore } from "./file-store";
import {
  closeFile,
  errorCode,
  fileSize,
  linkPath,
  openFile,
  renamePath,
  syncData,
  syncDirectory,
  writeAllAt,
} from "./fs-io";
import {
  checkRow,
  generationName,
  journalHeader,
  parseJournalRecord,
  readJournaledState,
  writeSnapshotFile,
} from "./journaled-map";
import { storeLayout } from "./layout";
import { findIntactEnd, forEachLineText, parseJsonLine, readFirstLine, scanForward } from "./line-scan";
import { acquireLock, releaseLock } from "./lock-file";
import { type StoreLogger, silentLogger } from "./logger";
import { sessionIdOfFileName } from "./retire-orphans";
import { checkTranscriptHeader, isIntactEntryLine } from "./transcript-store";

export interface RepairResult {
  /** What was changed, one line each, naming the file. */
  actions: string[];
  /** The check after the repair: what is still wrong needs a person (or a backup). */
  report: DoctorReport;
}

const INDEX_FILE = /^(journal|snapshot)-(\d{12})\.jsonl$/;
const KEPT_COPY = /^((?:journal|snapshot)-\d{12}\.jsonl)\.damaged-(.+)$/;

/**
 * `doctor --repair`: fixes what `checkDataDir` reports and can be fixed without guessing, with
 * the gateway stopped (it takes the data dir's lock). Nothing is erased: replaced files are kept
 * beside the original (`*.damaged-<time>`) or in `archive/`.
 *
 * - damaged journal records are dropped; a lost or damaged snapshot is rebuilt from what is left
 *   (for the sessions index also from the transcripts' headers and taint entries);
 * - transcripts: damaged lines are dropped, a bad header is rewritten from the index row; in a
 *   transcript with pending commit-log entries they are dropped only after the open has replayed
 *   those, which restores acknowledged entries a damaged line may have held;
 * - commit-log segments: damaged records are dropped, so the open replays the intact ones after them;
 * - rows whose transcript is missing get it back from `archive/`, or an empty one;
 * - transcripts no row points at are archived; runs waiting on a transcript that is gone are
 *   marked failed.
 */
export async function repairDataDir(
  dataDir: string,
  options: { logger?: StoreLogger } = {},
): Promise<RepairResult> {
  const logger = options.logger ?? silentLogger;
  const layout = storeLayout(dataDir);
  const actions: string[] = [];
  const first = await inspectDataDir(dataDir);
  const blocking = first.report.issues.find((issue) =>
    [
      "missing-data-dir",
      "unsupported-version",
      "unreadable-version",
      "missing-version",
      "not-a-directory",
      "unreadable-lock",
    ].includes(issue.code),
  );
  if (blocking) return { actions, report: first.report };

  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const lock = await acquireLock(layout.dataDir, true, logger);
  let deferred: Set<string>;
  try {
    const indexReadable = await readJournaledState(
      layout.sessions,
      "sessions",
      (row: SessionEntry) => row.key,
    ).then(
      () => true,
      () => false,
    );
    // First, so the segments can be read to learn which transcripts they restore entries to.
    await repairCommitLog(layout.commitLog, stamp, actions);
    const transcripts = await repairTranscripts(
      layout,
      first.contents.rows,
      indexReadable,
      stamp,
      actions,
      await awaitingReplay(layout.commitLog),
    );
    const transcriptTaints = transcripts.facts;
    deferred = transcripts.deferred;
    await repairIndex(layout.sessions, "sessions", stamp, actions, () =>
      rowsFromTranscripts(layout.transcripts, transcriptTaints),
    );
    await raiseLoweredTaints(layout.sessions, transcriptTaints, stamp, actions);
    await repairIndex(layout.runs, "runs", stamp, actions);
    await repairIndex(layout.meta, "meta", stamp, actions);
    await restoreMissingTranscripts(layout, stamp, actions);
  } finally {
    await releaseLock(lock);
  }

  // The rest goes through the store itself: it replays the commit log and archives orphans.
  const store = await openFileStore({ dataDir, archiveOrphanTranscripts: true, logger });
  try {
    const orphans = (await store.stats()).orphansArchived;
    if (orphans > 0) actions.push(`archived ${orphans} transcript(s) no session points at`);
    for (const run of await store.runs.list({ statuses: ["queued", "running"] })) {
      if (await store.transcripts.exists(run.sessionId)) continue;
      const failed: RunRecord = {
        ...run,
        status: "error",
        error: "session was reset or deleted before the run finished (marked failed by doctor --repair)",
        endedAt: Date.now(),
      };
      await store.runs.put(failed);
      actions.push(
        `marked run ${run.runId} of ${run.sessionKey} failed: its transcript ${run.sessionId} is gone`,
      );
    }
    for (const row of (await store.sessions.list({ limit: Number.MAX_SAFE_INTEGER, includeArchived: false }))
      .entries) {
      if (row.archivedAt !== undefined || (await store.transcripts.exists(row.sessionId))) continue;
      await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: row.createdAt });
      actions.push(
        `started an empty transcript for ${row.key} (${store.transcripts.locate(row.sessionId)}): none was found, not even in archive/`,
      );
    }
    const restored = (await store.stats()).entriesRestored;
    if (restored > 0)
      actions.push(`restored ${restored} acknowledged transcript entries from the commit log`);
  } finally {
    await store.close();
  }
  if (deferred.size > 0) {
    // The open has replayed the segments (and the close checkpointed them): what is still
    // damaged now holds nothing the commit log had.
    const again = await acquireLock(layout.dataDir, true, logger);
    try {
      const index = await readJournaledState(
        layout.sessions,
        "sessions",
        (row: SessionEntry) => row.key,
      ).catch(() => undefined);
      await repairTranscripts(
        layout,
        index?.values ?? new Map(),
        index !== undefined,
        // A copy the first pass kept (a header it fixed) must not be overwritten.
        `${stamp}-after-replay`,
        actions,
        await awaitingReplay(layout.commitLog),
        deferred,
      );
    } finally {
      await releaseLock(again);
    }
  }
  return { actions, report: (await inspectDataDir(dataDir)).report };
}

/**
 * Transcripts that pending commit-log segments hold entries for: the open restores those, also
 * where a damaged line now sits, so their damaged lines must wait for it. All of them when the
 * segments cannot be read.
 */
async function awaitingReplay(commitLogDir: string): Promise<Set<string> | "all"> {
  try {
    const pending = await readPendingCommits(commitLogDir);
    return new Set([...pending.entries].filter(([, lines]) => lines.length > 0).map(([id]) => id));
  } catch {
    return "all";
  }
}

/**
 * Moves a file aside (same directory), keeping it for inspection, once nothing needs it any more:
 * what replaces it must be durable before. A copy of it kept under that name already (the same
 * repair replaced it before) holds the original, so the file itself then just goes.
 */
async function moveAside(filePath: string, stamp: string): Promise<string> {
  const target = `${filePath}.damaged-${stamp}`;
  if (fs.existsSync(target)) await fs.promises.rm(filePath);
  else await renamePath(filePath, target);
  return target;
}

/**
 * Keeps the file as it is under `<file>.damaged-<stamp>` (a hard link, else a synced copy), durably,
 * and leaves the file itself in place: a crash at any point after leaves both. One kept already
 * under that name (the same repair replaced the file before) is the original and stays.
 */
async function keepCopy(filePath: string, stamp: string): Promise<string> {
  const target = `${filePath}.damaged-${stamp}`;
  try {
    await linkPath(filePath, target);
  } catch (error) {
    if (errorCode(error) === "EEXIST") return target;
    if (!["EPERM", "ENOTSUP", "EOPNOTSUPP", "EXDEV", "EMLINK"].includes(errorCode(error) ?? "")) throw error;
    await copyDurably(filePath, target);
    return target;
  }
  await syncDirectory(path.dirname(filePath));
  return target;
}

/** Copies `from` to `to`, with the copy and its directory entry synced. */
async function copyDurably(from: string, to: string): Promise<void> {
  await fs.promises.copyFile(from, to);
  const fd = await openFile(to, "r+");
  try {
    await syncData(fd);
  } finally {
    await closeFile(fd);
  }
  await syncDirectory(path.dirname(to));
}

/**
 * Writes a file's new content through a synced temp file renamed over it, then syncs the directory:
 * a crash at any point leaves either the old content or the new one under its name, never neither.
 */
async function replaceFile(filePath: string, write: (fd: number) => Promise<void>): Promise<void> {
  const temp = `${filePath}.repair.tmp`;
  const fd = await openFile(temp, "w");
  try {
    await write(fd);
    await syncData(fd);
  } finally {
    await closeFile(fd);
  }
  await renamePath(temp, filePath);
  await syncDirectory(path.dirname(filePath));
}

/**
 * Replaces a file's content and keeps the original beside it (`*.damaged-<stamp>`): the copy is
 * made first and the new content renamed over the file, so the file is never missing, not even
 * for a moment a crash could catch. Returns where the original is kept.
 */
async function replaceKeepingOriginal(
  filePath: string,
  stamp: string,
  write: (fd: number) => Promise<void>,
): Promise<string> {
  const kept = await keepCopy(filePath, stamp);
  await replaceFile(filePath, write);
  return kept;
}

interface TranscriptFacts {
  key: string;
  sessionId: string;
  createdAt: number;
  lastTs: number;
  /** Highest level taint entries raised the session to. */
  taint: Level;
}

/**
 * Fixes headers and drops damaged lines (of `only` transcripts, when given); returns what each
 * intact transcript says about its session (for rebuilding or checking the index), and the
 * transcripts whose damaged lines were left for the commit log's replay (`awaiting`).
 */
async function repairTranscripts(
  layout: ReturnType<typeof storeLayout>,
  rows: Map<string, SessionEntry>,
  indexReadable: boolean,
  stamp: string,
  actions: string[],
  awaiting: Set<string> | "all",
  only?: Set<string>,
): Promise<{ facts: Map<string, TranscriptFacts>; deferred: Set<string> }> {
  const rowBySessionId = new Map([...rows.values()].map((row) => [String(row.sessionId).toLowerCase(), row]));
  const facts = new Map<string, TranscriptFacts>();
  const deferred = new Set<string>();
  for (const name of await fs.promises.readdir(layout.transcripts).catch(() => [] as string[])) {
    const sessionId = sessionIdOfFileName(name);
    if (sessionId === undefined || (only && !only.has(sessionId))) continue;
    const filePath = path.join(layout.transcripts, name);
    const fd = await openFile(filePath, "r");
    let headerLine: Buffer | undefined;
    let damaged: number[] = [];
    let intactEnd = 0;
    try {
      headerLine = await readFirstLine(fd, 64 * 1024);
      const checked = checkTranscriptHeader(headerLine, sessionId);
      if ("problem" in checked && checked.newerVersion) continue;
      const dataStart = headerLine ? headerLine.length + 1 : 0;
      const size = await fileSize(fd);
      intactEnd = (await findIntactEnd(fd, dataStart, size, isIntactEntryLine)).end;
      damaged = await damagedLines(fd, dataStart, intactEnd);
      const row = rowBySessionId.get(sessionId);
      // A damaged line may be where an acknowledged entry a segment still holds was: the replay
      // puts that back (and drops the line) only if the line is still there to be found.
      const keepDamaged = damaged.length > 0 && (awaiting === "all" || awaiting.has(sessionId));
      if (keepDamaged) deferred.add(sessionId);
      if ("problem" in checked || (damaged.length > 0 && !keepDamaged)) {
        const key = "problem" in checked ? row?.key : checked.header.key;
        // Whose it is may be in the index once that is repaired: leave it for the next run.
        if (key === undefined && !indexReadable) continue;
        const archived = path.join(layout.archive, `${sessionId}.${stamp}.damaged.jsonl`);
        await fs.promises.mkdir(layout.archive, { recursive: true, mode: 0o700 });
        await copyDurably(filePath, archived);
        if (key === undefined) {
          // No row says whose it is: keep it only in the archive.
          await fs.promises.rm(filePath);
          await syncDirectory(layout.transcripts);
          actions.push(
            `moved ${filePath} to ${archived}: its header is unreadable and no session points at it`,
          );
          continue;
        }
        const header =
          "problem" in checked
            ? buildTranscriptHeader({ sessionId, key, createdAt: row?.createdAt ?? Date.now() })
            : checked.header;
        const kept: Buffer[] = [Buffer.from(`${JSON.stringify(header)}\n`)];
        await scanForward(fd, dataStart, intactEnd, (line) => {
          if (keepDamaged || isIntactEntryLine(line)) kept.push(Buffer.from(`${line.toString("utf8")}\n`));
          return true;
        });
        await replaceFile(filePath, (out) => writeAllAt(out, kept, 0));
        if ("problem" in checked)
          actions.push(`rewrote the header of ${filePath} from the index row of ${key}`);
        if (damaged.length > 0 && !keepDamaged) {
          actions.push(
            `dropped ${damaged.length} damaged line(s) from ${filePath} (original kept as ${archived})`,
          );
        }
      }
    } finally {
      await closeFile(fd);
    }
    const summary = await summarise(filePath);
    if (summary) facts.set(sessionId, summary);
  }
  return { facts, deferred };
}

/** Header, last timestamp and highest taint of an (intact) transcript. */
async function summarise(filePath: string): Promise<TranscriptFacts | undefined> {
  const fd = await openFile(filePath, "r");
  try {
    let header: Record<string, unknown> | undefined;
    let lastTs = 0;
    let taint: Level = "PUBLIC";
    await forEachLineText(fd, 0, await fileSize(fd), (line) => {
      const value = parseJsonLine(Buffer.from(line));
      if (!value) return true;
      if (header === undefined) {
        header = value;
        return true;
      }
      if (typeof value.ts === "number") lastTs = Math.max(lastTs, value.ts);
      const raised = (value.taint as { to?: unknown } | undefined)?.to;
      if (value.type === "taint" && isLevel(raised)) taint = maxLevel(taint, raised);
      return true;
    });
    if (!header || typeof header.key !== "string" || typeof header.sessionId !== "string") return undefined;
    const createdAt = typeof header.createdAt === "number" ? header.createdAt : 0;
    return {
      key: header.key,
      sessionId: header.sessionId.toLowerCase(),
      createdAt,
      lastTs: Math.max(lastTs, createdAt),
      taint,
    };
  } finally {
    await closeFile(fd);
  }
}

/**
 * Rows as the transcripts tell them: per key the newest transcript, taint from its taint entries,
 * clearance equal to that taint (the lowest that still lets the session read its own history;
 * an operator raises it again with `sessions patch`). Other settings are not in the transcripts.
 */
function rowsFromTranscripts(_dir: string, facts: Map<string, TranscriptFacts>): SessionEntry[] {
  const newest = new Map<string, TranscriptFacts>();
  for (const fact of facts.values()) {
    const known = newest.get(fact.key);
    if (!known || fact.createdAt > known.createdAt) newest.set(fact.key, fact);
  }
  return [...newest.values()].map((fact) => ({
    key: fact.key,
    sessionId: fact.sessionId,
    agentId: fact.key === "global" ? "main" : (fact.key.split(":")[1] ?? "main"),
    createdAt: fact.createdAt,
    updatedAt: fact.lastTs,
    taint: fact.taint,
    clearance: fact.taint,
  }));
}

/**
 * Makes a journaled map readable again: drops the journal records the open refuses (the same check,
 * `parseJournalRecord`), and when the state is still not readable (a snapshot lost or damaged),
 * writes a new snapshot from every readable row (`base` first, for the sessions index the
 * transcripts) with the journals replayed on top. Every file is replaced in place, the original
 * kept beside it, so a crash at any point leaves a map that is whole or that the open refuses.
 */
async function repairIndex(
  dir: string,
  format: IndexFormat,
  stamp: string,
  actions: string[],
  base?: () => SessionEntry[],
): Promise<void> {
  const reader = indexRowReader(format);
  await restoreKeptCopies(dir, actions);
  const names = await fs.promises.readdir(dir).catch(() => [] as string[]);
  const files = names
    .map((name) => INDEX_FILE.exec(name))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({ kind: match[1]!, generation: Number(match[2]), path: path.join(dir, match[0]) }))
    .sort((a, b) => a.generation - b.generation || (a.kind === "snapshot" ? -1 : 1));

  for (const file of files.filter((entry) => entry.kind === "journal")) {
    const { kept, dropped } = await readJournalLines(file.path, format, true);
    if (dropped === 0) continue;
    const backup = await replaceKeepingOriginal(file.path, stamp, (fd) => writeAllAt(fd, kept, 0));
    actions.push(`dropped ${dropped} damaged record(s) from ${file.path} (original kept as ${backup})`);
  }
  const lostIndex = format === "sessions" && files.length === 0 && base !== undefined && base().length > 0;
  if (!lostIndex) {
    try {
      await readJournaledState(dir, format, reader.keyOf, reader.revive);
      return;
    } catch {
      // Rebuilt below.
    }
  }

  const values = new Map<string, Record<string, unknown>>();
  for (const row of base?.() ?? []) values.set(row.key, row as unknown as Record<string, unknown>);
  for (const file of files) {
    if (file.kind === "journal") {
      for (const line of (await readJournalLines(file.path, format, false)).kept.slice(1)) {
        const record = parseJournalRecord(line.subarray(0, line.length - 1), reader.keyOf, reader.revive);
        if (record?.op === "put") values.set(record.key, record.value);
        else if (record?.op === "del") values.delete(record.key);
      }
      continue;
    }
    // Rows of a damaged snapshot are kept when the open would take them; taints are checked against
    // the transcripts afterwards, so an edited row cannot lower one.
    for (const line of (await readAllLines(file.path)).slice(1)) {
      const parsed = parseJsonLine(line);
      if (!parsed || parsed.type === "end") continue;
      const row = checkRow(parsed, reader.keyOf, reader.revive);
      if (row) values.set(row.key, row.value);
    }
  }
  const generation = Math.max(1, ...files.map((file) => file.generation));
  await fs.promises.mkdir(dir, { recursive: true, mode: 0o700 });
  // Journal N first, as a compaction makes it: a snapshot without its journal is refused at open.
  const journalPath = path.join(dir, generationName("journal", generation));
  if (!files.some((file) => file.kind === "journal" && file.generation === generation))
    await replaceFile(journalPath, (fd) =>
      writeAllAt(fd, [Buffer.from(`${journalHeader(format, generation)}\n`)], 0),
    );
  // Then snapshot N in place (the old one kept beside it): from here on the map reads whole, and
  // the older generations are leftovers, moved aside only now.
  const snapshotPath = path.join(dir, generationName("snapshot", generation));
  const write = (fd: number) => writeSnapshotFile(fd, format, generation, [...values.values()]);
  const replaced: string[] = [];
  if (files.some((file) => file.path === snapshotPath))
    replaced.push(await replaceKeepingOriginal(snapshotPath, stamp, write));
  else await replaceFile(snapshotPath, write);
  for (const file of files) {
    if (file.generation === generation) continue;
    replaced.push(await moveAside(file.path, stamp));
  }
  if (replaced.length > 0) await syncDirectory(dir);
  actions.push(
    `rebuilt ${snapshotPath} with ${values.size} ${format} record(s)${format === "sessions" ? " (from the readable index files and the transcripts)" : ""}` +
      (replaced.length > 0 ? `; old files kept as *.damaged-${stamp}` : ""),
  );
}

/**
 * A map dir holding no journal or snapshot, only copies a repair kept (`*.damaged-<stamp>`), lost
 * its files to a crash in the middle of that repair (before repairs kept the original in place until
 * its replacement was durable): the open refuses it. Puts the newest repair's copies back (copied,
 * so they stay kept), for the rest of the repair to drop their damaged records again.
 */
async function restoreKeptCopies(dir: string, actions: string[]): Promise<void> {
  const copies = (await keptCopiesWithoutMap(dir))
    .map((name) => KEPT_COPY.exec(name))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({ copy: match[0], original: match[1]!, stamp: match[2]! }));
  if (copies.length === 0) return;
  const newest = copies
    .map((copy) => copy.stamp)
    .sort()
    .at(-1)!;
  for (const { copy, original } of copies.filter((entry) => entry.stamp === newest)) {
    const temp = path.join(dir, `${original}.repair.tmp`);
    await fs.promises.rm(temp, { force: true });
    await fs.promises.copyFile(path.join(dir, copy), temp);
    const fd = await openFile(temp, "r+");
    try {
      await syncData(fd);
    } finally {
      await closeFile(fd);
    }
    await renamePath(temp, path.join(dir, original));
    actions.push(
      `put ${path.join(dir, copy)} back as ${path.join(dir, original)}: ${dir} held no journal or snapshot (a repair was interrupted)`,
    );
  }
  await syncDirectory(dir);
}

const SEGMENT_FILE = /^\d{12}\.log$/;

/**
 * Drops damaged records from commit-log segments that the open refuses (intact records after
 * them), keeping the header and every intact record: those may be acknowledged appends that only
 * the segment holds, which the open then replays.
 */
async function repairCommitLog(dir: string, stamp: string, actions: string[]): Promise<void> {
  const names = (await fs.promises.readdir(dir).catch(() => [] as string[])).filter((name) =>
    SEGMENT_FILE.test(name),
  );
  for (const name of names.sort()) {
    const filePath = path.join(dir, name);
    const lines: Array<{ line: Buffer; ok: boolean }> = [];
    const fd = await openFile(filePath, "r");
    try {
      await scanForward(fd, 0, await fileSize(fd), (line) => {
        const ok = lines.length === 0 || parseCommitRecord(line) !== undefined;
        lines.push({ line: Buffer.from(`${line.toString("utf8")}\n`), ok });
        return true;
      });
    } finally {
      await closeFile(fd);
    }
    // Bad lines at the very end are a torn tail, which the open ignores by itself.
    let end = lines.length;
    while (end > 1 && !lines[end - 1]!.ok) end--;
    const dropped = lines.slice(0, end).filter((entry) => !entry.ok).length;
    if (dropped === 0) continue;
    const kept = lines.filter((entry) => entry.ok).map((entry) => entry.line);
    const backup = await replaceKeepingOriginal(filePath, stamp, (out) => writeAllAt(out, kept, 0));
    actions.push(
      `dropped ${dropped} damaged record(s) from commit-log segment ${filePath} (original kept as ${backup})`,
    );
  }
}

/** Every complete line of a file, each with its `\n`. */
async function readAllLines(filePath: string): Promise<Buffer[]> {
  const fd = await openFile(filePath, "r");
  try {
    const lines: Buffer[] = [];
    await scanForward(fd, 0, await fileSize(fd), (line) => {
      lines.push(Buffer.from(`${line.toString("utf8")}\n`));
      return true;
    });
    return lines;
  } finally {
    await closeFile(fd);
  }
}

/**
 * Lines of a journal: header plus the records the open takes (with `\n`; the open's own check);
 * `dropped` counts damaged records before intact ones. Damaged lines at the very end (a torn tail,
 * which the open cuts by itself) are left out but not counted when `dropTail`.
 */
async function readJournalLines(
  filePath: string,
  format: IndexFormat,
  dropTail: boolean,
): Promise<{ kept: Buffer[]; dropped: number }> {
  const reader = indexRowReader(format);
  const lines = (await readAllLines(filePath)).map((line, index) => ({
    line,
    ok:
      index === 0 ||
      parseJournalRecord(line.subarray(0, line.length - 1), reader.keyOf, reader.revive) !== undefined,
  }));
  let end = lines.length;
  if (dropTail) while (end > 1 && !lines[end - 1]!.ok) end--;
  const body = lines.slice(0, end);
  const kept = body.filter((entry) => entry.ok).map((entry) => entry.line);
  return { kept, dropped: body.length - kept.length };
}

/**
 * A row whose taint is below what its transcript's taint entries raised it to was lowered after
 * the fact (or lost an update): raise it back through a journal record.
 */
async function raiseLoweredTaints(
  dir: string,
  facts: Map<string, TranscriptFacts>,
  _stamp: string,
  actions: string[],
): Promise<void> {
  let state: Awaited<ReturnType<typeof readJournaledState<SessionEntry>>>;
  try {
    state = await readJournaledState<SessionEntry>(dir, "sessions", (row) => row.key);
  } catch {
    return;
  }
  const fixes: SessionEntry[] = [];
  for (const row of state.values.values()) {
    const fact = facts.get(String(row.sessionId).toLowerCase());
    if (!fact || !isLevel(row.taint) || maxLevel(row.taint, fact.taint) === row.taint) continue;
    fixes.push({ ...row, taint: fact.taint, clearance: maxLevel(row.clearance, fact.taint) });
  }
  if (fixes.length === 0) return;
  const journal = state.journals.at(-1);
  if (!journal) return;
  // Anything after the last good record is a torn tail: cut it so the new records follow good ones.
  await fs.promises.truncate(journal.path, journal.validEnd);
  const fd = await openFile(journal.path, "r+");
  try {
    const text = fixes.map((row) => `${JSON.stringify({ op: "put", value: row })}\n`).join("");
    await writeAllAt(fd, [Buffer.from(text)], journal.validEnd);
    await syncData(fd);
  } finally {
    await closeFile(fd);
  }
  for (const row of fixes) {
    actions.push(
      `raised the taint of ${row.key} back to ${row.taint}, as its transcript's taint entries say`,
    );
  }
}

/** Rows pointing at a transcript that only exists in the archive get it back. */
async function restoreMissingTranscripts(
  layout: ReturnType<typeof storeLayout>,
  _stamp: string,
  actions: string[],
): Promise<void> {
  let state: Awaited<ReturnType<typeof readJournaledState<SessionEntry>>>;
  try {
    state = await readJournaledState<SessionEntry>(layout.sessions, "sessions", (row) => row.key);
  } catch {
    return;
  }
  const archived = (await fs.promises.readdir(layout.archive).catch(() => [] as string[])).sort();
  for (const row of state.values.values()) {
    if (row.archivedAt !== undefined) continue;
    const sessionId = String(row.sessionId).toLowerCase();
    const target = path.join(layout.transcripts, `${sessionId}.jsonl`);
    if (fs.existsSync(target)) continue;
    const copies = archived.filter((name) => name.startsWith(`${sessionId}.`) && !name.includes(".damaged."));
    const newest = copies.at(-1);
    if (!newest) continue;
    await renamePath(path.join(layout.archive, newest), target);
    await syncDirectory(layout.transcripts);
    await syncDirectory(layout.archive);
    actions.push(`moved ${newest} back from archive/ to ${target}: ${row.key} still points at it`);
  }
}
