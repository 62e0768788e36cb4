import fs from "node:fs";
import path from "node:path";
import {
  isLevel,
  type Level,
  maxLevel,
  parseSessionId,
  type RunRecord,
  type SessionEntry,
} from "@switchboard/core";
import { AUDIT_FILE, auditHeaderProblem, isIntactAuditLine } from "./audit-log";
import { readPendingCommits } from "./commit-log";
import { keptCopiesWithoutMap, lostMapMessage } from "./file-store";
import { inspectFormatVersion, STORE_ENTRIES, STORE_FORMAT_VERSION, versionFix } from "./format-version";
import { closeFile, errorCode, fileSize, isNotFound, openFile } from "./fs-io";
import { IncompleteStateError, readJournaledState } from "./journaled-map";
import { storeLayout } from "./layout";
import { findIntactEnd, parseJsonLine, readFirstLine, scanForward, seqOfLine } from "./line-scan";
import { isLockHolderAlive, LOCK_FILE, readLockHolder } from "./lock-file";
import { metaKey } from "./meta-store";
import { runKey } from "./run-registry";
import { sessionRowKey, sessionRowReviver } from "./session-index";
import { checkTranscriptHeader, isIntactEntryLine } from "./transcript-store";

export type DoctorIssueCode =
  | "missing-data-dir"
  | "missing-version"
  | "unsupported-version"
  | "unreadable-version"
  | "live-lock"
  | "stale-lock"
  | "damaged-file"
  | "torn-tail"
  | "pending-commit-log"
  | "invalid-file-name"
  | "bad-header"
  | "header-mismatch"
  | "orphan-transcript"
  | "missing-transcript"
  | "missing-index"
  | "incomplete-index"
  | "damaged-line"
  | "not-writable"
  | "orphan-run"
  | "lowered-taint"
  | "not-a-directory"
  | "unreadable-lock";

export interface DoctorIssue {
  /** `error`: the store will not open or data is unreadable; `warning`: repaired or tolerated on open; `info`: worth knowing. */
  severity: "error" | "warning" | "info";
  code: DoctorIssueCode;
  message: string;
  path?: string;
  sessionId?: string;
  key?: string;
  runId?: string;
  /** What to do about it (for errors and warnings). */
  fix?: string;
}

export interface DoctorReport {
  dataDir: string;
  /** No `error` issues. */
  ok: boolean;
  formatVersion?: number;
  counts: {
    sessions: number;
    runs: number;
    transcripts: number;
    archivedTranscripts: number;
    pendingCommitEntries: number;
  };
  issues: DoctorIssue[];
}

const TRANSCRIPT_NAME = /^(.+)\.jsonl$/;

export type IndexFormat = "sessions" | "runs" | "meta";

/**
 * How the store's open reads the rows of each journaled map (the key, and for sessions the reviver,
 * which throws on a row of the wrong shape): the doctor and the repair read with exactly these, so a
 * record they keep is one the open takes, and one it refuses they report and drop.
 */
export function indexRowReader(format: IndexFormat): {
  keyOf: (value: Record<string, unknown>) => string;
  revive?: (value: Record<string, unknown>) => Record<string, unknown>;
} {
  type Row = Record<string, unknown>;
  if (format === "sessions") {
    const revive = sessionRowReviver();
    return {
      keyOf: sessionRowKey as unknown as (value: Row) => string,
      revive: revive as unknown as (value: Row) => Row,
    };
  }
  return { keyOf: (format === "runs" ? runKey : metaKey) as unknown as (value: Row) => string };
}
const REPAIR = "run `switchboard doctor --repair` with the gateway stopped";
const ACTIVE_RUN_STATUSES = new Set(["queued", "running"]);

/** What the doctor read, for `repairDataDir`. */
export interface DataDirContents {
  rows: Map<string, SessionEntry>;
  runs: RunRecord[];
  transcriptIds: Set<string>;
}

/**
 * Scans a data dir and reports problems without changing anything (no repair, no lock, no
 * marker): torn tails, orphan transcripts, index rows without transcripts, header mismatches,
 * format versions. Safe to run while the gateway is up (the report may then be slightly stale).
 */
export async function checkDataDir(dataDir: string): Promise<DoctorReport> {
  return (await inspectDataDir(dataDir)).report;
}

export async function inspectDataDir(
  dataDir: string,
): Promise<{ report: DoctorReport; contents: DataDirContents }> {
  const layout = storeLayout(dataDir);
  const contents: DataDirContents = { rows: new Map(), runs: [], transcriptIds: new Set() };
  const issues: DoctorIssue[] = [];
  const report: DoctorReport = {
    dataDir: layout.dataDir,
    ok: true,
    counts: { sessions: 0, runs: 0, transcripts: 0, archivedTranscripts: 0, pendingCommitEntries: 0 },
    issues,
  };
  const finish = () => {
    report.ok = !issues.some((issue) => issue.severity === "error");
    return { report, contents };
  };

  try {
    await fs.promises.access(layout.dataDir);
  } catch {
    issues.push({
      severity: "error",
      code: "missing-data-dir",
      message: `${layout.dataDir} does not exist`,
      path: layout.dataDir,
    });
    return finish();
  }
  if (!(await fs.promises.stat(layout.dataDir)).isDirectory()) {
    issues.push({
      severity: "error",
      code: "not-a-directory",
      message: `${layout.dataDir} is a file, not a directory`,
      path: layout.dataDir,
      fix: "move it away, or point --data-dir (SWITCHBOARD_HOME, gateway.dataDir) at a directory",
    });
    return finish();
  }

  const version = await inspectFormatVersion(layout.dataDir);
  const versionPath = path.join(layout.dataDir, "VERSION");
  if (version.status === "ok") report.formatVersion = version.version;
  else if (version.status === "newer") {
    report.formatVersion = version.version;
    issues.push({
      severity: "error",
      code: "unsupported-version",
      message: `store format version ${version.version} is newer than this Switchboard supports (${STORE_FORMAT_VERSION})`,
      path: versionPath,
    });
    return finish();
  } else if (version.status === "unreadable") {
    issues.push({
      severity: "error",
      code: "unreadable-version",
      message: `VERSION is unreadable: ${version.reason}; the store refuses to open`,
      path: versionPath,
      fix: versionFix(versionPath),
    });
  } else {
    issues.push({
      severity: version.storeFilesPresent ? "error" : "info",
      code: "missing-version",
      message: version.storeFilesPresent
        ? "VERSION is missing although store files exist; the store refuses to open"
        : "no store here yet (VERSION is written on first open)",
      path: versionPath,
    });
  }

  const lockPath = path.join(layout.dataDir, LOCK_FILE);
  const holder = await readLockHolder(lockPath).catch((error: unknown) => {
    // The gateway's start reads the lock the same way, and stops on the same error.
    issues.push({
      severity: "error",
      code: "unreadable-lock",
      message: `${errorCode((error as { cause?: unknown }).cause ?? error) === "EISDIR" ? "LOCK is a directory, not a file" : `cannot read LOCK: ${(error as Error).message}`}; the gateway refuses to start`,
      path: lockPath,
      fix: `with no gateway running on this data dir, move ${lockPath} away: the gateway writes a new one when it starts`,
    });
    return undefined;
  });
  if (holder !== undefined) {
    issues.push(
      isLockHolderAlive(lockPath, holder)
        ? {
            severity: "info",
            code: "live-lock",
            message: `data dir in use by pid ${holder.pid}`,
            path: lockPath,
          }
        : {
            severity: "warning",
            code: "stale-lock",
            message: `lock left by pid ${holder.pid}, which is not running (or is another process now); the next open takes it over`,
            path: lockPath,
          },
    );
  }

  // The store creates these directories on open and refuses to when a file is in the way; the
  // checks below would only repeat that for each file they cannot read.
  let blocked = false;
  for (const name of STORE_ENTRIES) {
    const entry = path.join(layout.dataDir, name);
    const stats = await fs.promises.stat(entry).catch(() => undefined);
    if (stats === undefined || stats.isDirectory()) continue;
    blocked = true;
    issues.push({
      severity: "error",
      code: "not-a-directory",
      message: `${name} is a file, not a directory; the gateway refuses to start`,
      path: entry,
      fix: `move ${entry} away (restore the directory from a backup if it held data): the gateway creates an empty ${name} directory when it starts`,
    });
  }
  if (blocked) return finish();

  const currentSessionIds = new Map<string, string>();
  const transcriptFiles = (await listDir(layout.transcripts)).filter((name) => name.endsWith(".jsonl"));
  const indexFiles = (await listDir(layout.sessions)).filter((name) =>
    /^(journal|snapshot)-\d{12}\.jsonl$/.test(name),
  );
  if (indexFiles.length === 0 && transcriptFiles.length > 0 && version.status === "ok") {
    issues.push({
      severity: "error",
      code: "missing-index",
      message: `the sessions index is gone (${layout.sessions} holds no journal or snapshot) but ${transcriptFiles.length} transcript(s) exist; the store refuses to start`,
      path: layout.sessions,
      fix: `restore ${layout.sessions} from a backup, or ${REPAIR} to rebuild the index from the transcripts' headers and taint entries`,
    });
  }
  for (const [format, dir] of [
    ["sessions", layout.sessions],
    ["runs", layout.runs],
    ["meta", layout.meta],
  ] as const) {
    try {
      const copies = await keptCopiesWithoutMap(dir);
      if (copies.length > 0) {
        const lost = lostMapMessage(dir, format, copies);
        issues.push({
          severity: "error",
          code: "incomplete-index",
          message: `${lost.message}; the store refuses to start`,
          path: dir,
          fix: lost.fix,
        });
        continue;
      }
      const reader = indexRowReader(format);
      const state = await readJournaledState<Record<string, unknown>>(
        dir,
        format,
        reader.keyOf,
        reader.revive,
      );
      if (format === "sessions") {
        report.counts.sessions = state.values.size;
        for (const row of state.values.values() as Iterable<unknown>) {
          const entry = row as SessionEntry;
          contents.rows.set(entry.key, entry);
          if (entry.archivedAt === undefined)
            currentSessionIds.set(String(entry.sessionId).toLowerCase(), entry.key);
        }
      }
      if (format === "runs") {
        report.counts.runs = state.values.size;
        contents.runs = [...state.values.values()] as unknown as RunRecord[];
      }
      const current = state.journals.at(-1);
      if (current) await checkWritable(current.path, issues);
      for (const journal of state.journals) {
        if (journal.tornBytes > 0) {
          issues.push({
            severity: "warning",
            code: "torn-tail",
            message: `${format} journal ends in a torn record of ${journal.tornBytes} bytes (cut on next open)`,
            path: journal.path,
          });
        }
      }
    } catch (error) {
      const incomplete = error instanceof IncompleteStateError;
      const damaged = (error as { details?: { damaged?: string } }).details?.damaged;
      issues.push({
        severity: "error",
        code: incomplete ? "incomplete-index" : "damaged-file",
        message: `${format}: ${(error as Error).message}`,
        path: incomplete ? error.missing : (damaged ?? dir),
        fix:
          format === "sessions"
            ? `restore the file from a backup, or ${REPAIR}: it rebuilds the index from what is left and the transcripts' headers and taint entries`
            : `restore the file from a backup, or ${REPAIR}: it keeps what the readable ${format} files hold (the rest is lost)`,
      });
    }
  }

  await checkAudit(path.join(layout.audit, AUDIT_FILE), issues);
  await checkWritable(path.join(layout.audit, AUDIT_FILE), issues);

  /** The seqs pending segments hold per transcript: the next open puts those back where they are lost. */
  const loggedSeqs = new Map<string, Set<number>>();
  try {
    const pending = await readPendingCommits(layout.commitLog);
    for (const [sessionId, lines] of pending.entries) {
      report.counts.pendingCommitEntries += lines.length;
      const seqs = new Set<number>();
      for (const line of lines) {
        const seq = seqOfLine(Buffer.from(line.slice(0, 48), "latin1"));
        if (seq !== undefined) seqs.add(seq);
      }
      loggedSeqs.set(sessionId, seqs);
    }
    if (pending.segments.length > 0) {
      issues.push({
        severity: "info",
        code: "pending-commit-log",
        message: `${pending.segments.length} commit-log segment(s) from an unclean shutdown; missing entries are re-applied on next open`,
        path: layout.commitLog,
      });
    }
    if (pending.tornBytes > 0) {
      issues.push({
        severity: "warning",
        code: "torn-tail",
        message: `commit log ends in a torn record of ${pending.tornBytes} bytes (never acknowledged; ignored)`,
        path: layout.commitLog,
      });
    }
  } catch (error) {
    const damaged = (error as { details?: { damaged?: string } }).details?.damaged;
    issues.push({
      severity: "error",
      code: "damaged-file",
      message: `commit log: ${(error as Error).message}`,
      path: damaged ?? layout.commitLog,
      ...(damaged
        ? {
            fix: `${REPAIR}: it drops the damaged record, keeps the original segment beside it and replays the rest`,
          }
        : {}),
    });
  }

  const transcriptIds = contents.transcriptIds;
  for (const name of await listDir(layout.transcripts)) {
    const filePath = path.join(layout.transcripts, name);
    const sessionId = validSessionIdOf(name);
    if (sessionId === undefined) {
      issues.push({
        severity: "warning",
        code: "invalid-file-name",
        message: `${name} is not named <sessionId>.jsonl; the store ignores it`,
        path: filePath,
      });
      continue;
    }
    transcriptIds.add(sessionId);
    report.counts.transcripts++;
    const raisedTo = await checkTranscript(filePath, sessionId, issues, loggedSeqs.get(sessionId));
    const owner = currentSessionIds.get(sessionId);
    const row = owner === undefined ? undefined : contents.rows.get(owner);
    if (row && isLevel(row.taint) && raisedTo !== undefined && maxLevel(row.taint, raisedTo) !== row.taint) {
      issues.push({
        severity: "error",
        code: "lowered-taint",
        message: `session ${row.key} has taint ${row.taint}, but its transcript's taint entries raised it to ${raisedTo} (taint never goes down without a reset): the index was edited or lost an update`,
        path: layout.sessions,
        sessionId,
        key: row.key,
        fix: `${REPAIR}: it raises the taint back to ${raisedTo}`,
      });
    }
    if (!currentSessionIds.has(sessionId)) {
      issues.push({
        severity: "warning",
        code: "orphan-transcript",
        message: `transcript ${sessionId} belongs to no session in the index (left by an interrupted reset or delete)`,
        path: filePath,
        sessionId,
        fix: `the gateway archives it at its next start; or ${REPAIR}`,
      });
    }
  }
  for (const [sessionId, key] of currentSessionIds) {
    if (!transcriptIds.has(sessionId)) {
      issues.push({
        severity: "error",
        code: "missing-transcript",
        message: `session ${key} points at sessionId ${sessionId}, which has no transcript: its history and sends fail with NOT_FOUND`,
        path: path.join(layout.transcripts, `${sessionId}.jsonl`),
        sessionId,
        key,
        fix: `${REPAIR}: it moves the transcript back from archive/ when it is there, else starts an empty one`,
      });
    }
  }
  for (const run of contents.runs) {
    if (!ACTIVE_RUN_STATUSES.has(run.status)) continue;
    const sessionId = String(run.sessionId).toLowerCase();
    if (transcriptIds.has(sessionId)) continue;
    // What a kill -9 during a reset or delete leaves: the gateway's start ends such a run `error`
    // (its session was reset or deleted), so it is no error of the data dir.
    issues.push({
      severity: "warning",
      code: "orphan-run",
      message: `run ${run.runId} (${run.status}) is for sessionId ${sessionId} of ${run.sessionKey}, whose transcript is gone (the session was reset or deleted); the gateway's next start ends it as failed`,
      path: layout.runs,
      runId: run.runId,
      sessionId,
      key: run.sessionKey,
      fix: `nothing to do; or ${REPAIR}: it marks the run failed ("session was reset or deleted")`,
    });
  }
  report.counts.archivedTranscripts = (await listDir(layout.archive)).filter((name) =>
    name.endsWith(".jsonl"),
  ).length;
  return finish();
}

async function listDir(dir: string): Promise<string[]> {
  try {
    return (await fs.promises.readdir(dir)).sort();
  } catch (error) {
    if (isNotFound(error)) return [];
    throw error;
  }
}

function validSessionIdOf(name: string): string | undefined {
  const match = TRANSCRIPT_NAME.exec(name);
  if (!match) return undefined;
  try {
    const id = parseSessionId(match[1]);
    return id === match[1] ? id : undefined;
  } catch {
    return undefined;
  }
}

/** Checks one transcript; returns the highest level its taint entries raised the session to. */
async function checkTranscript(
  filePath: string,
  sessionId: string,
  issues: DoctorIssue[],
  logged: ReadonlySet<number> = new Set(),
): Promise<Level | undefined> {
  let raisedTo: Level | undefined;
  let fd: number;
  try {
    fd = await openFile(filePath, "r");
  } catch (error) {
    issues.push({
      severity: "error",
      code: "damaged-file",
      message: `cannot open: ${(error as Error).message}`,
      path: filePath,
      sessionId,
      fix: `make it readable by the gateway's user (chmod 600 ${filePath})`,
    });
    return undefined;
  }
  try {
    const headerLine = await readFirstLine(fd);
    const checked = checkTranscriptHeader(headerLine, sessionId);
    if ("problem" in checked) {
      const code = checked.newerVersion
        ? "unsupported-version"
        : checked.problem.startsWith("header names")
          ? "header-mismatch"
          : "bad-header";
      issues.push({
        severity: "error",
        code,
        message: `${checked.problem}; the session fails on first use`,
        path: filePath,
        sessionId,
        fix:
          code === "unsupported-version"
            ? "upgrade Switchboard"
            : `${REPAIR}: it rewrites the header from the index row (or archives the file when no row points at it)`,
      });
      return undefined;
    }
    const size = await fileSize(fd);
    const dataStart = headerLine!.length + 1;
    const intact = await findIntactEnd(fd, dataStart, size, isIntactEntryLine);
    if (intact.end < size) {
      issues.push({
        severity: "warning",
        code: "torn-tail",
        message: `transcript ends in a torn entry of ${size - intact.end} bytes (cut on next use)`,
        path: filePath,
        sessionId,
      });
    }
    const runs = await damagedRuns(fd, dataStart, intact.end, (level) => {
      raisedTo = raisedTo === undefined ? level : maxLevel(raisedTo, level);
    });
    const restored = runs.filter((run) => restoredByReplay(run, logged)).flatMap((run) => run.offsets);
    const lost = runs.filter((run) => !restoredByReplay(run, logged)).flatMap((run) => run.offsets);
    if (lost.length > 0) {
      issues.push({
        severity: "error",
        code: "damaged-line",
        message: `${lost.length} damaged line(s) in the middle of the transcript (first at byte ${lost[0]}); reads skip them`,
        path: filePath,
        sessionId,
        fix: `${REPAIR}: it drops the damaged lines and keeps the original file in archive/`,
      });
    }
    if (restored.length > 0) {
      issues.push({
        severity: "warning",
        code: "damaged-line",
        message: `${restored.length} damaged line(s) in the middle of the transcript (first at byte ${restored[0]}) where acknowledged entries were; the commit log holds them, and the next open puts them back in place`,
        path: filePath,
        sessionId,
      });
    }
  } finally {
    await closeFile(fd);
  }
  await checkWritable(filePath, issues, sessionId);
  return raisedTo;
}

/** Offsets of the lines in `[start, end)` that are not intact entries. */
export async function damagedLines(
  fd: number,
  start: number,
  end: number,
  onTaint?: (raisedTo: Level) => void,
): Promise<number[]> {
  return (await damagedRuns(fd, start, end, onTaint)).flatMap((run) => run.offsets);
}

/**
 * A run of consecutive damaged lines, with the seqs of the intact entries around it (`before` is 0
 * for a run right after the header; `after` is absent for a run at the end of the range).
 */
interface DamagedRun {
  offsets: number[];
  before: number | undefined;
  after?: number;
}

/** The damaged runs of the transcript lines in `[start, end)`, `start` being the first entry's. */
async function damagedRuns(
  fd: number,
  start: number,
  end: number,
  onTaint?: (raisedTo: Level) => void,
): Promise<DamagedRun[]> {
  const runs: DamagedRun[] = [];
  let current: DamagedRun | undefined;
  let previous: number | undefined = 0;
  await scanForward(fd, start, end, (line, lineStart) => {
    if (!isIntactEntryLine(line)) {
      current ??= { offsets: [], before: previous };
      current.offsets.push(lineStart);
      return true;
    }
    const seq = seqOfLine(line);
    if (current) {
      if (seq !== undefined) current.after = seq;
      runs.push(current);
      current = undefined;
    }
    previous = seq;
    if (onTaint && line.subarray(0, 16).toString("latin1") === '{"type":"taint",') {
      const raised = (parseJsonLine(line)?.taint as { to?: unknown } | undefined)?.to;
      if (isLevel(raised)) onTaint(raised);
    }
    return true;
  });
  if (current) runs.push(current);
  return runs;
}

/**
 * Whether the commit log's replay replaces a damaged run: as the store's open does, when the run
 * stands where entries were lost (a gap in the seqs around it) and the pending segments hold every
 * one of those entries.
 */
function restoredByReplay(run: DamagedRun, logged: ReadonlySet<number>): boolean {
  if (run.before === undefined || run.after === undefined || run.after - run.before <= 1) return false;
  if (run.after - run.before - 1 > logged.size) return false;
  for (let seq = run.before + 1; seq < run.after; seq++) if (!logged.has(seq)) return false;
  return true;
}

/** Opening for writing changes nothing, and fails the way the gateway's first append would. */
async function checkWritable(filePath: string, issues: DoctorIssue[], sessionId?: string): Promise<void> {
  try {
    await closeFile(await openFile(filePath, "r+"));
  } catch (error) {
    if (isNotFound(error)) return;
    issues.push({
      severity: "error",
      code: "not-writable",
      message: sessionId
        ? `cannot open for writing (${errorCode(error) ?? (error as Error).message}): the session's history is served read-only and sends to it fail`
        : `cannot open for writing (${errorCode(error) ?? (error as Error).message}): the gateway cannot start`,
      path: filePath,
      ...(sessionId ? { sessionId } : {}),
      fix: `make it writable by the gateway's user: chattr -i ${filePath}; chmod 600 ${filePath}`,
    });
  }
}

async function checkAudit(filePath: string, issues: DoctorIssue[]): Promise<void> {
  let fd: number;
  try {
    fd = await openFile(filePath, "r");
  } catch (error) {
    if (isNotFound(error)) return;
    throw error;
  }
  try {
    const headerLine = await readFirstLine(fd);
    const problem = auditHeaderProblem(headerLine, filePath);
    if (problem) {
      const newer = problem.code === "UNAVAILABLE";
      issues.push({
        severity: "error",
        code: newer ? "unsupported-version" : "bad-header",
        message: problem.message,
        path: filePath,
      });
      return;
    }
    const size = await fileSize(fd);
    const intact = await findIntactEnd(fd, headerLine!.length + 1, size, isIntactAuditLine);
    if (intact.end < size) {
      issues.push({
        severity: "warning",
        code: "torn-tail",
        message: `audit log ends in a torn record of ${size - intact.end} bytes (cut on next open)`,
        path: filePath,
      });
    }
    // The whole log (the store's open checks only the tail): a damaged record before intact ones
    // stops every read that reaches it.
    let line = 1;
    await scanForward(fd, headerLine!.length + 1, intact.end, (record) => {
      line += 1;
      if (isIntactAuditLine(record)) return true;
      issues.push({
        severity: "error",
        code: "damaged-line",
        message: `audit log line ${line} is damaged, before intact records: audit reads stop there`,
        path: filePath,
        fix: "restore the audit log from a backup (its records are chained: a damaged one cannot be rebuilt)",
      });
      return false;
    });
  } finally {
    await closeFile(fd);
  }
}
