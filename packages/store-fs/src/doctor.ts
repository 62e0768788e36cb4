import fs from "node:fs";
import path from "node:path";
import { parseSessionId, type SessionEntry } from "@switchboard/core";
import { AUDIT_FILE, auditHeaderProblem, isIntactAuditLine } from "./audit-log";
import { readPendingCommits } from "./commit-log";
import { inspectFormatVersion, STORE_FORMAT_VERSION } from "./format-version";
import { closeFile, fileSize, isNotFound, openFile } from "./fs-io";
import { readJournaledState } from "./journaled-map";
import { storeLayout } from "./layout";
import { findIntactEnd, readFirstLine } from "./line-scan";
import { isProcessAlive, LOCK_FILE, readLockPid } from "./lock-file";
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
  | "missing-transcript";

export interface DoctorIssue {
  /** `error`: the store will not open or data is unreadable; `warning`: repaired or tolerated on open; `info`: worth knowing. */
  severity: "error" | "warning" | "info";
  code: DoctorIssueCode;
  message: string;
  path?: string;
  sessionId?: string;
  key?: string;
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

/**
 * Scans a data dir and reports problems without changing anything (no repair, no lock, no
 * marker): torn tails, orphan transcripts, index rows without transcripts, header mismatches,
 * format versions. Safe to run while the gateway is up (the report may then be slightly stale).
 */
export async function checkDataDir(dataDir: string): Promise<DoctorReport> {
  const layout = storeLayout(dataDir);
  const issues: DoctorIssue[] = [];
  const report: DoctorReport = {
    dataDir: layout.dataDir,
    ok: true,
    counts: { sessions: 0, runs: 0, transcripts: 0, archivedTranscripts: 0, pendingCommitEntries: 0 },
    issues,
  };
  const finish = () => {
    report.ok = !issues.some((issue) => issue.severity === "error");
    return report;
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
      message: `VERSION is unreadable: ${version.reason}`,
      path: versionPath,
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
  const holder = await readLockPid(lockPath).catch(() => undefined);
  if (holder !== undefined) {
    issues.push(
      isProcessAlive(holder)
        ? { severity: "info", code: "live-lock", message: `data dir in use by pid ${holder}`, path: lockPath }
        : {
            severity: "warning",
            code: "stale-lock",
            message: `lock left by pid ${holder}, which is not running; the next open takes it over`,
            path: lockPath,
          },
    );
  }

  const currentSessionIds = new Map<string, string>();
  for (const [format, dir] of [
    ["sessions", layout.sessions],
    ["runs", layout.runs],
    ["meta", layout.meta],
  ] as const) {
    try {
      const state = await readJournaledState<Record<string, unknown>>(dir, format, (value) =>
        String(format === "sessions" ? value.key : format === "runs" ? value.runId : value.name),
      );
      if (format === "sessions") {
        report.counts.sessions = state.values.size;
        for (const row of state.values.values() as Iterable<unknown>) {
          const entry = row as SessionEntry;
          currentSessionIds.set(String(entry.sessionId).toLowerCase(), entry.key);
        }
      }
      if (format === "runs") report.counts.runs = state.values.size;
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
      issues.push({
        severity: "error",
        code: "damaged-file",
        message: `${format}: ${(error as Error).message}`,
        path: dir,
      });
    }
  }

  await checkAudit(path.join(layout.audit, AUDIT_FILE), issues);

  try {
    const pending = await readPendingCommits(layout.commitLog);
    for (const lines of pending.entries.values()) report.counts.pendingCommitEntries += lines.length;
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
    issues.push({
      severity: "error",
      code: "damaged-file",
      message: `commit log: ${(error as Error).message}`,
      path: layout.commitLog,
    });
  }

  const transcriptIds = new Set<string>();
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
    await checkTranscript(filePath, sessionId, issues);
    if (!currentSessionIds.has(sessionId)) {
      issues.push({
        severity: "warning",
        code: "orphan-transcript",
        message: `transcript ${sessionId} belongs to no session in the index`,
        path: filePath,
        sessionId,
      });
    }
  }
  for (const [sessionId, key] of currentSessionIds) {
    if (!transcriptIds.has(sessionId)) {
      issues.push({
        severity: "warning",
        code: "missing-transcript",
        message: `session ${key} points at sessionId ${sessionId}, which has no transcript`,
        sessionId,
        key,
      });
    }
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

async function checkTranscript(filePath: string, sessionId: string, issues: DoctorIssue[]): Promise<void> {
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
    });
    return;
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
      issues.push({ severity: "error", code, message: checked.problem, path: filePath, sessionId });
      return;
    }
    const size = await fileSize(fd);
    const intact = await findIntactEnd(fd, headerLine!.length + 1, size, isIntactEntryLine);
    if (intact.end < size) {
      issues.push({
        severity: "warning",
        code: "torn-tail",
        message: `transcript ends in a torn entry of ${size - intact.end} bytes (cut on next use)`,
        path: filePath,
        sessionId,
      });
    }
  } finally {
    await closeFile(fd);
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
  } finally {
    await closeFile(fd);
  }
}
