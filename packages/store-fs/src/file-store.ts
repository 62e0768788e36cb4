import fs from "node:fs";
import path from "node:path";
import {
  DEFAULT_MAX_ENTRY_BYTES,
  formatZodIssues,
  idleArchiveRow,
  type Store,
  type StoreHealth,
  SwitchboardError,
} from "@switchboard/core";
import { z } from "zod";
import { FileAuditLog } from "./audit-log";
import { ensureFormatVersion } from "./format-version";
import { closeFile, DIR_MODE, openFile, syncData, writeAllAt } from "./fs-io";
import { IncompleteStateError } from "./journaled-map";
import { storeLayout } from "./layout";
import { acquireLock, type LockInfo, releaseLock } from "./lock-file";
import { type StoreLogger, silentLogger } from "./logger";
import { FileMetaStore } from "./meta-store";
import { finishInterruptedRetirements } from "./retire-orphans";
import { FileRunRegistry } from "./run-registry";
import { FileSessionIndex } from "./session-index";
import { storageError } from "./storage-errors";
import { StoreHealthTracker } from "./store-health";
import { commitTaintRise, finishTaintRises } from "./taint-rise";
import { FileTranscriptStore } from "./transcript-store";

export const FileStoreOptionsSchema = z.object({
  /** The data dir (created 0700 when missing). */
  dataDir: z.string().min(1),
  /** `always` (default): an acknowledged write is fsynced. `none`: no fsync at all (tests, scratch data). */
  fsyncMode: z.enum(["always", "none"]).default("always"),
  /** Journal records (sessions, runs, meta each) after which a background snapshot is written. */
  snapshotEvery: z.number().int().positive().default(20_000),
  /** Largest serialised transcript entry; bigger ones are refused with PAYLOAD_TOO_LARGE. */
  maxEntryBytes: z.number().int().positive().default(DEFAULT_MAX_ENTRY_BYTES),
  /** Transcript files kept open (with their last seq) at once. */
  maxOpenTranscripts: z.number().int().positive().default(256),
  /** Size at which a commit-log segment is rotated and checkpointed. */
  commitLogSegmentBytes: z
    .number()
    .int()
    .min(4096)
    .default(32 * 1024 * 1024),
  /**
   * Archive, at open, transcripts no session row points at. For callers (like the gateway) where
   * every transcript belongs to a row and a row is switched before its old transcript is archived:
   * such a transcript is what a crash in the middle of a reset or delete left behind.
   */
  archiveOrphanTranscripts: z.boolean().default(false),
  /**
   * Leave the background build of the kind and search indexes to `startDeferredWork()` instead of
   * starting it once open (a list that needs them still starts it): for an owner with more start-up
   * work after the open, like the gateway, which starts it once it is serving.
   */
  deferIndexing: z.boolean().default(false),
  /** Chunk size of backward transcript scans. */
  readChunkBytes: z
    .number()
    .int()
    .min(1024)
    .default(64 * 1024),
});

export type FileStoreOptions = z.input<typeof FileStoreOptionsSchema> & {
  /** Gets torn-tail repairs, lock take-overs and compactions; silent when absent. */
  logger?: StoreLogger;
};

export interface FileStoreStats {
  sessions: number;
  runs: number;
  auditRecords: number;
  openTranscripts: number;
  /** Transcript entries appended since open. */
  appendedEntries: number;
  /** Commit-log batches since open: with group commit, far fewer than appended entries. */
  commitBatches: number;
  /** Torn tails cut since open (transcripts, journals, audit log). */
  tornTailsRepaired: number;
  /** Transcripts an interrupted reset or delete left in place, archived at open. */
  orphansArchived: number;
  /** Whether the kind and search indexes of the rows loaded at open are built (see `deferIndexing`). */
  indexBuilt: boolean;
  /** Taint rises a crash interrupted, finished at this open (see `commitTaintRise`). */
  taintRisesFinished: number;
  /** Acknowledged entries re-applied from the commit log at open. */
  entriesRestored: number;
  /** Snapshot generation and journal length of each journaled map. */
  journals: Record<"sessions" | "runs", { generation: number; journalRecords: number; snapshots: number }>;
}

/** The embedded store: `Store` plus what only a local, file-backed store can say. */
export interface FileStore extends Store {
  readonly dataDir: string;
  readonly lockInfo: LockInfo;
  /** Counters for monitoring and benchmarks. */
  stats(): Promise<FileStoreStats>;
  /** Writes snapshots of the sessions index, run registry and meta now (normally done in the background). */
  compact(): Promise<void>;
}

/**
 * Opens (creating when needed) a file store in `dataDir`: takes the single-writer lock, checks the
 * format version, loads the sessions index and run registry, replays the commit log.
 */
export async function openFileStore(options: FileStoreOptions): Promise<FileStore> {
  const parsed = FileStoreOptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new SwitchboardError("INVALID_REQUEST", formatZodIssues(parsed.error, "fileStore").join("; "));
  }
  const config = parsed.data;
  const logger = options.logger ?? silentLogger;
  const durable = config.fsyncMode === "always";
  const layout = storeLayout(config.dataDir);

  try {
    await fs.promises.mkdir(layout.dataDir, { recursive: true, mode: DIR_MODE });
    await fs.promises.chmod(layout.dataDir, DIR_MODE);
  } catch (error) {
    throw storageError(error, "preparing", layout.dataDir);
  }
  const lock = await acquireLock(layout.dataDir, durable, logger);
  const opened: Array<{ close(): Promise<void> }> = [];
  const health = new StoreHealthTracker();
  try {
    await ensureFormatVersion(layout.dataDir, durable);
    await refuseLostIndex(layout.sessions, layout.transcripts);
    for (const [format, dir] of [
      ["sessions", layout.sessions],
      ["runs", layout.runs],
      ["meta", layout.meta],
    ] as const)
      await refuseLostMap(dir, format);
    const shared = { durable, snapshotEvery: config.snapshotEvery, logger, health };
    const sessions = await FileSessionIndex.open({ dir: layout.sessions, ...shared });
    opened.push(sessions);
    const runs = await FileRunRegistry.open({
      dir: layout.runs,
      ...shared,
      sessionArchived: (key) => sessions.peek(key)?.archivedAt !== undefined,
    });
    opened.push(runs);
    const meta = await FileMetaStore.open({ dir: layout.meta, ...shared });
    opened.push(meta);
    const audit = await FileAuditLog.open({ dir: layout.audit, durable, logger, health });
    opened.push(audit);
    const transcripts = await FileTranscriptStore.open({
      transcriptsDir: layout.transcripts,
      archiveDir: layout.archive,
      commitLogDir: layout.commitLog,
      tempDir: layout.temp,
      durable,
      maxEntryBytes: config.maxEntryBytes,
      maxOpenTranscripts: config.maxOpenTranscripts,
      commitLogSegmentBytes: config.commitLogSegmentBytes,
      readChunkBytes: config.readChunkBytes,
      logger,
      health,
    });
    opened.push(transcripts);
    const orphansArchived = config.archiveOrphanTranscripts
      ? await finishInterruptedRetirements(layout.transcripts, sessions, transcripts, logger)
      : 0;

    const taintParts = { sessions, transcripts, audit, meta, maxEntryBytes: config.maxEntryBytes, logger };
    const taintRisesFinished = await finishTaintRises(taintParts);
    // Kinds and search postings of the loaded rows are built from here on (or once the owner says
    // so), in the background.
    if (!config.deferIndexing) void sessions.startIndexing();
    let closing: Promise<void> | undefined;
    return {
      dataDir: layout.dataDir,
      lockInfo: lock,
      sessions,
      transcripts,
      runs,
      audit,
      meta,
      commitTaintRise: (rise) => commitTaintRise(taintParts, rise),
      async archiveIdleSession(key, options) {
        // One process: the checks and the row's write are issued in one synchronous step, and a
        // run's insert-only put checks the row the same way (`sessionArchived` above).
        const archived = idleArchiveRow(sessions.peek(key), options);
        if (!archived || runs.hasActiveRun(key)) return undefined;
        await sessions.put(archived);
        return archived;
      },
      startDeferredWork() {
        void sessions.startIndexing();
      },
      async stats() {
        const transcriptStats = transcripts.stats();
        const sessionStats = sessions.stats();
        const runStats = runs.stats();
        return {
          sessions: await sessions.count(),
          runs: runs.count(),
          auditRecords: await audit.count(),
          openTranscripts: transcriptStats.openTranscripts,
          appendedEntries: transcriptStats.appendedEntries,
          commitBatches: transcriptStats.commitBatches,
          tornTailsRepaired:
            transcriptStats.tornTailsRepaired + sessionStats.tornTailsRepaired + runStats.tornTailsRepaired,
          entriesRestored: transcriptStats.entriesRestored,
          orphansArchived,
          indexBuilt: sessions.indexed,
          taintRisesFinished,
          journals: {
            sessions: {
              generation: sessionStats.generation,
              journalRecords: sessionStats.journalRecords,
              snapshots: sessionStats.snapshots,
            },
            runs: {
              generation: runStats.generation,
              journalRecords: runStats.journalRecords,
              snapshots: runStats.snapshots,
            },
          },
        };
      },
      async health(): Promise<StoreHealth> {
        // Nothing retries a write by itself: a probe write tells whether the cause is gone, so
        // the report turns ok again (and writes are tried again) without waiting for traffic.
        if (!health.healthy && (await probeWrite(layout.temp, durable))) health.probeSucceeded();
        return health.report();
      },
      async compact() {
        await Promise.all([sessions.compact(), runs.compact(), meta.compact()]);
      },
      close() {
        closing ??= (async () => {
          try {
            for (const part of opened.reverse()) await part.close();
          } finally {
            await releaseLock(lock);
          }
        })();
        return closing;
      },
    };
  } catch (error) {
    for (const part of opened.reverse()) await part.close().catch(() => undefined);
    await releaseLock(lock).catch(() => undefined);
    throw error;
  }
}

/** Writes, syncs and removes a small file; true when all of that worked. */
async function probeWrite(dir: string, durable: boolean): Promise<boolean> {
  const probe = path.join(dir, `health-probe.${process.pid}`);
  try {
    const fd = await openFile(probe, "w");
    try {
      await writeAllAt(fd, [Buffer.alloc(4096)], 0);
      if (durable) await syncData(fd);
    } finally {
      await closeFile(fd);
    }
    return true;
  } catch {
    return false;
  } finally {
    await fs.promises.rm(probe, { force: true }).catch(() => undefined);
  }
}

/**
 * An existing data dir whose sessions index files are all gone would open as an empty index and
 * silently drop every session: refuse instead (transcripts without any index are the sign).
 */
async function refuseLostIndex(sessionsDir: string, transcriptsDir: string): Promise<void> {
  const indexFiles = (await fs.promises.readdir(sessionsDir).catch(() => [] as string[])).filter((name) =>
    /^(journal|snapshot)-\d{12}\.jsonl$/.test(name),
  );
  if (indexFiles.length > 0) return;
  const transcripts = (await fs.promises.readdir(transcriptsDir).catch(() => [] as string[])).filter((name) =>
    name.endsWith(".jsonl"),
  );
  if (transcripts.length === 0) return;
  throw new IncompleteStateError(
    `sessions index is missing: ${sessionsDir} holds no journal or snapshot, but ${transcripts.length} transcript(s) exist, so every session would be silently lost; restore the index from a backup, or run \`switchboard doctor --repair\` to rebuild it from the transcripts`,
    sessionsDir,
  );
}

const INDEX_FILE = /^(journal|snapshot)-\d{12}\.jsonl$/;
const KEPT_COPY = /^((?:journal|snapshot)-\d{12}\.jsonl)\.damaged-(.+)$/;

/**
 * The copies `doctor --repair` kept (`<journal or snapshot>.damaged-<stamp>`) in a journaled map's
 * dir that holds no journal or snapshot: what a crash left in the middle of a repair that moved the
 * original aside before its replacement was in place (as repairs did until the original was kept
 * until then). Empty when the map has its files, or when there are no such copies (a new map).
 */
export async function keptCopiesWithoutMap(dir: string): Promise<string[]> {
  const names = await fs.promises.readdir(dir).catch(() => [] as string[]);
  if (names.some((name) => INDEX_FILE.test(name))) return [];
  return names.filter((name) => KEPT_COPY.test(name)).sort();
}

/** What to do about a map whose only files are `doctor --repair`'s kept copies (for the open and the doctor). */
export function lostMapMessage(
  dir: string,
  format: string,
  copies: readonly string[],
): { message: string; fix: string } {
  return {
    message: `${format} ${format === "sessions" ? "index" : "map"} is missing: ${dir} holds no journal or snapshot, only ${copies.length} cop${copies.length === 1 ? "y" : "ies"} \`doctor --repair\` kept of replaced files (${copies.join(", ")}), so every ${format} record would be silently lost`,
    fix: `run \`switchboard doctor --repair\` with the gateway stopped: it puts the newest kept copies back and drops their damaged records; or restore ${dir} from a backup (to start with an empty ${format} map instead, move the *.damaged-* files out of ${dir})`,
  };
}

/**
 * A journaled map whose dir holds only `*.damaged-*` copies would open as an empty map and silently
 * drop every row (every run, the audit anchor, the taint-rise intents): refuse instead.
 */
async function refuseLostMap(dir: string, format: string): Promise<void> {
  const copies = await keptCopiesWithoutMap(dir);
  if (copies.length === 0) return;
  const { message, fix } = lostMapMessage(dir, format, copies);
  throw new IncompleteStateError(`${message}; ${fix}`, dir);
}
