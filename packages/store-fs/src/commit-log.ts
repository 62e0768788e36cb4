import fs from "node:fs";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { AppendLog } from "./append-log";
import { closeFile, fileSize, isNotFound, openFile, syncDirectory } from "./fs-io";
import { parseJsonLine, readFirstLine, scanForward } from "./line-scan";
import type { StoreLogger } from "./logger";
import type { StoreHealthTracker } from "./store-health";

/**
 * The commit log (write-ahead log) behind transcript appends. Every append is written to its
 * transcript file and, as `<sessionId> <entry JSON>`, to the current commit-log segment; only the
 * segment is fsynced before the append is acknowledged. One fdatasync thus covers a batch of
 * appends to many transcripts (group commit across files).
 *
 * A full segment is rotated: the transcripts it touched are fsynced, then it is deleted. On
 * start-up, remaining segments are replayed: entries missing from their transcript or damaged in
 * it, anywhere (a power cut can lose any page not yet written back), are restored.
 */

export const COMMIT_LOG_FORMAT_VERSION = 1;
const SEGMENT_PATTERN = /^(\d{12})\.log$/;
const SESSION_ID_LENGTH = 36;
export const DROP_RECORD = '{"type":"drop"}';

const segmentName = (number: number) => `${String(number).padStart(12, "0")}.log`;

export interface PendingCommits {
  segments: string[];
  lastSegmentNumber: number;
  /** Entry lines per sessionId, oldest first, after that session's last drop record. */
  entries: Map<string, string[]>;
  /** Every sessionId a segment mentions (their transcripts need an fsync before the segments go). */
  sessions: Set<string>;
  tornBytes: number;
}

/** A segment's record line split into its session id and body; undefined when it is damaged. */
export function parseCommitRecord(line: Buffer): { sessionId: string; body: string } | undefined {
  const text = line.toString("utf8");
  if (text.charAt(SESSION_ID_LENGTH) !== " ") return undefined;
  const body = text.slice(SESSION_ID_LENGTH + 1);
  if (body === DROP_RECORD) return { sessionId: text.slice(0, SESSION_ID_LENGTH), body };
  const record = parseJsonLine(Buffer.from(body));
  return record && typeof record.seq === "number"
    ? { sessionId: text.slice(0, SESSION_ID_LENGTH), body }
    : undefined;
}

/**
 * Reads the commit-log segments left by the previous run, changing nothing. A torn last record
 * of a segment is counted in `tornBytes`; a damaged record before intact ones is an error.
 */
export async function readPendingCommits(dir: string): Promise<PendingCommits> {
  const pending: PendingCommits = {
    segments: [],
    lastSegmentNumber: 0,
    entries: new Map(),
    sessions: new Set(),
    tornBytes: 0,
  };
  let names: string[];
  try {
    names = await fs.promises.readdir(dir);
  } catch (error) {
    if (isNotFound(error)) return pending;
    throw error;
  }
  const numbers = names
    .map((name) => SEGMENT_PATTERN.exec(name))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => Number(match[1]))
    .sort((a, b) => a - b);
  for (const number of numbers) {
    const segmentPath = path.join(dir, segmentName(number));
    pending.segments.push(segmentPath);
    pending.lastSegmentNumber = number;
    const fd = await openFile(segmentPath, "r");
    try {
      const size = await fileSize(fd);
      const headerLine = await readFirstLine(fd);
      if (headerLine === undefined) {
        // Created but never written: a crash right after rotation started.
        pending.tornBytes += size;
        continue;
      }
      const header = parseJsonLine(headerLine);
      if (header?.type !== "commit-log" || typeof header.version !== "number") {
        throw new SwitchboardError("INTERNAL", `${segmentPath}: missing or unreadable commit-log header`);
      }
      if (header.version > COMMIT_LOG_FORMAT_VERSION) {
        throw new SwitchboardError(
          "UNAVAILABLE",
          `${segmentPath}: commit-log format version ${header.version} is newer than this Switchboard supports (${COMMIT_LOG_FORMAT_VERSION}); upgrade Switchboard to open this data dir`,
        );
      }
      let validEnd = headerLine.length + 1;
      let badAt: number | undefined;
      let intactAfterBad = false;
      await scanForward(fd, validEnd, size, (line, lineStart) => {
        const parsed = parseCommitRecord(line);
        // Only a segment's last write can be torn by a crash: a damaged record with intact ones
        // after it is damage, and stopping there would drop acknowledged appends unseen. Each
        // segment has its own tail, since a rotation starts the next segment while the previous
        // one's last batch may still be in flight.
        if (badAt !== undefined) {
          if (parsed) {
            intactAfterBad = true;
            return false;
          }
          return true;
        }
        if (!parsed) {
          badAt = lineStart;
          return true;
        }
        const { sessionId, body } = parsed;
        pending.sessions.add(sessionId);
        if (body === DROP_RECORD) pending.entries.delete(sessionId);
        else {
          const list = pending.entries.get(sessionId);
          if (list) list.push(body);
          else pending.entries.set(sessionId, [body]);
        }
        validEnd = lineStart + line.length + 1;
        return true;
      });
      if (intactAfterBad) {
        throw new SwitchboardError(
          "INTERNAL",
          `${segmentPath}: damaged commit-log record at offset ${badAt} before intact ones, which may hold acknowledged appends; ` +
            "run `switchboard doctor --repair` with the gateway stopped to drop the damaged record and replay the rest",
          { details: { damaged: segmentPath, offset: badAt } },
        );
      }
      pending.tornBytes += size - validEnd;
    } finally {
      await closeFile(fd);
    }
  }
  return pending;
}

interface Segment {
  number: number;
  log: AppendLog;
  /** Transcripts written while this segment was current. */
  dirty: Set<string>;
}

export interface CommitLogOptions {
  dir: string;
  durable: boolean;
  segmentBytes: number;
  logger: StoreLogger;
  health?: StoreHealthTracker;
  /** Makes one transcript's written bytes durable (checkpoint of a rotated segment). */
  syncTranscript: (sessionId: string) => Promise<void>;
}

export class CommitLog {
  private rotating: Promise<void> | undefined;
  private closed = false;
  private retiredBatches = 0;

  private constructor(
    private readonly options: CommitLogOptions,
    private current: Segment,
  ) {}

  /** Starts a fresh segment numbered after every existing one (replay must have run). */
  static async start(options: CommitLogOptions, lastSegmentNumber: number): Promise<CommitLog> {
    await fs.promises.mkdir(options.dir, { recursive: true, mode: 0o700 });
    return new CommitLog(options, await CommitLog.createSegment(options, lastSegmentNumber + 1));
  }

  private static async createSegment(
    options: CommitLogOptions,
    number: number,
    after?: Promise<void>,
  ): Promise<Segment> {
    const header = JSON.stringify({
      type: "commit-log",
      version: COMMIT_LOG_FORMAT_VERSION,
      segment: number,
    });
    const log = await AppendLog.create(path.join(options.dir, segmentName(number)), header, {
      durable: options.durable,
      label: "commit log",
      // A waiting send's own record is issued a few promise hops after the reply it waited for
      // (waking, label checks, building the result): gathered until the end of the loop's turn,
      // both share one commit, one durable round less on the send's path.
      gather: "turn",
      ...(after ? { after } : {}),
      ...(options.health ? { health: options.health } : {}),
    });
    return { number, log, dirty: new Set() };
  }

  /**
   * Records an append whose bytes are already written to its transcript: `records` (the
   * commit-log lines) go into the current segment; resolves once they are durable. `onFail` runs
   * synchronously when the write fails (see `AppendLog.append`).
   */
  commit(sessionId: string, records: string, onFail?: () => void): Promise<void> {
    const segment = this.current;
    segment.dirty.add(sessionId);
    const durable = segment.log.append(records, onFail);
    if (segment.log.reservedSize >= this.options.segmentBytes) this.rotate();
    return durable;
  }

  /** Records that a transcript left its path (archived or removed): replay ignores its earlier entries. */
  drop(sessionId: string): Promise<void> {
    return this.commit(sessionId, `${sessionId} ${DROP_RECORD}\n`);
  }

  stats(): { batches: number; segment: number; segmentBytes: number } {
    return {
      batches: this.retiredBatches + this.current.log.batches,
      segment: this.current.number,
      segmentBytes: this.current.log.size,
    };
  }

  /** Waits for running work, then checkpoints and deletes the current segment. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    while (this.rotating) await this.rotating;
    await this.checkpoint(this.current);
  }

  private rotate(): void {
    if (this.rotating || this.closed) return;
    this.rotating = (async () => {
      const previous = this.current;
      // A failed batch rolls its transcripts back to where its appends began, cutting whatever
      // was appended after them. Within one segment those later appends fail with it (a failed
      // batch fails the whole queue); in the next segment they could be acknowledged first and
      // then cut, their seqs handed out again. So the next segment writes nothing before the
      // previous one's writes from before the switch have settled, and fails its queue with them.
      let switched!: (settled: Promise<void>) => void;
      const gate = new Promise<void>((resolve) => {
        switched = resolve;
      });
      const next = await CommitLog.createSegment(this.options, previous.number + 1, gate);
      this.current = next;
      switched(previous.log.settled());
      await this.checkpoint(previous);
    })()
      .catch((error: unknown) => {
        this.options.health?.fail("commit log", error);
        this.options.logger.error(
          {
            error: String(error),
          },
          "commit-log checkpoint failed; its segment is kept for the next start-up",
        );
      })
      .finally(() => {
        this.rotating = undefined;
      });
  }

  private async checkpoint(segment: Segment): Promise<void> {
    // Transcript bytes are written before their records are queued, so once the segment is
    // drained every transcript it names holds all of its entries.
    await segment.log.close();
    if (this.options.durable) {
      const ids = [...segment.dirty];
      const workers = Array.from({ length: Math.min(8, ids.length) }, async () => {
        for (let id = ids.pop(); id !== undefined; id = ids.pop()) await this.options.syncTranscript(id);
      });
      await Promise.all(workers);
    }
    this.retiredBatches += segment.log.batches;
    await fs.promises.rm(segment.log.filePath, { force: true });
    if (this.options.durable) await syncDirectory(this.options.dir);
  }
}
