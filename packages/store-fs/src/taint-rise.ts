import {
  type AuditRecord,
  canFlowTo,
  prepareTranscriptAppend,
  type SessionEntry,
  SwitchboardError,
  type TaintRise,
  type TaintRiseResult,
  type TranscriptEntryInput,
  validateTaintRise,
} from "@switchboard/core";
import type { FileAuditLog } from "./audit-log";
import type { StoreLogger } from "./logger";
import type { FileMetaStore } from "./meta-store";
import type { FileSessionIndex } from "./session-index";
import type { FileTranscriptStore } from "./transcript-store";

/**
 * A taint rise touches three files (transcript, sessions journal, audit log) that a crash can
 * leave at different points. It is made one unit by an intent record in the meta journal, written
 * first and removed last:
 *
 * 1. the intent (row, entry with its id and time, the chained audit record) is made durable; the
 *    audit record is queued at once, so the chain keeps its order, but written only after the
 *    intent, and the records before it must be durable too;
 * 2. then the transcript entry, the row and the audit record go out together (one group commit
 *    each); once all are durable the call resolves and the intent is removed (not awaited).
 *
 * At open, every intent left behind is finished: its audit record is present (or is the next one
 * and is appended), so step 2 had begun and the entry and the row's taint are written where
 * missing; if its audit record cannot be there (an earlier record was lost with the crash), step 2
 * never began and nothing of the rise was written: the intent is dropped. Either way all or none.
 */

const INTENT_PREFIX = "store:taint-rise:";

interface TaintIntent {
  row: SessionEntry;
  entry: TranscriptEntryInput & { id: string; ts: number };
  audit: AuditRecord;
  /** The transcript's last seq before the rise: its entry, if written, comes after it. */
  afterSeq: number;
}

export interface TaintRiseParts {
  sessions: FileSessionIndex;
  transcripts: FileTranscriptStore;
  audit: FileAuditLog;
  meta: FileMetaStore;
  maxEntryBytes: number;
  logger: StoreLogger;
}

export function commitTaintRise(parts: TaintRiseParts, rise: TaintRise): Promise<TaintRiseResult> {
  const { sessions, transcripts, audit, meta } = parts;
  let checked: ReturnType<typeof validateTaintRise>;
  let row: SessionEntry;
  try {
    // Everything that needs no disk is checked before the audit record is queued (synchronously:
    // records chained after this one may be appended right after this call returns).
    checked = validateTaintRise(rise, audit.lastIndex);
    sessions.checkVersion(checked.row.key, rise.expectedVersion);
    row = sessions.prepare(checked.row);
    prepareTranscriptAppend([checked.entry], { lastSeq: 0, maxEntryBytes: parts.maxEntryBytes });
  } catch (error) {
    return Promise.reject(error);
  }
  const { entry, audit: record } = checked;
  const name = `${INTENT_PREFIX}${String(record.index).padStart(15, "0")}`;
  let intentWritten = false;
  const intent = (async () => {
    if (!(await transcripts.exists(row.sessionId))) {
      throw new SwitchboardError("NOT_FOUND", `no transcript for sessionId ${row.sessionId}`, {
        details: { field: "row.sessionId" },
      });
    }
    const afterSeq = await transcripts.lastSeq(row.sessionId);
    const value: TaintIntent = { row, entry, audit: record, afterSeq };
    await meta.setInternal(name, JSON.stringify(value));
    intentWritten = true;
  })();
  const before = audit.settled();
  const audited = audit.append([record], intent);
  return (async () => {
    try {
      await Promise.all([intent, before]);
    } catch (error) {
      // Nothing of the rise was written (its audit record fails with the gate or the earlier record).
      await audited.catch(() => undefined);
      if (intentWritten) void meta.deleteInternal(name).catch(() => undefined);
      throw error;
    }
    // From here on the intent finishes the rise at the next open if anything below fails.
    const [written, version] = await Promise.all([
      transcripts.append(row.sessionId, [entry]),
      sessions.putChecked(row),
      audited,
    ]);
    void meta.deleteInternal(name).catch((error: unknown) => {
      parts.logger.warn({ error: String(error), name }, "could not remove a finished taint rise's intent");
    });
    return { entry: written[0]!, version };
  })();
}

/** Finishes (or drops) the taint rises a crash interrupted; returns how many it finished. */
export async function finishTaintRises(parts: TaintRiseParts): Promise<number> {
  const { sessions, transcripts, audit, meta, logger } = parts;
  let finished = 0;
  const intents = meta.withPrefix(INTENT_PREFIX).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  for (const [name, value] of intents) {
    const intent = JSON.parse(value) as TaintIntent;
    const { row, entry, audit: record } = intent;
    const last = await audit.last();
    let audited = false;
    if (last !== undefined && last.index >= record.index) {
      const [atIndex] = await audit.read({ after: record.index - 1, limit: 1 });
      audited = atIndex?.hash === record.hash;
    } else if (
      (last?.index ?? -1) === record.index - 1 &&
      (last === undefined || last.hash === record.prevHash)
    ) {
      await audit.append([record]);
      audited = true;
    }
    if (!audited) {
      logger.warn(
        { key: row.key, auditIndex: record.index },
        "dropped a taint rise interrupted before it was written (its audit record could not follow the log)",
      );
    } else {
      if (
        (await transcripts.exists(row.sessionId)) &&
        !(await hasEntry(transcripts, row.sessionId, entry.id, intent.afterSeq))
      ) {
        await transcripts.append(row.sessionId, [entry]);
      }
      const current = await sessions.get(row.key);
      if (current && current.sessionId === row.sessionId && !canFlowTo(row.taint, current.taint)) {
        await sessions.put({
          ...current,
          taint: row.taint,
          updatedAt: Math.max(current.updatedAt, row.updatedAt),
        });
      }
      finished++;
      logger.info({ key: row.key, auditIndex: record.index }, "finished a taint rise interrupted by a crash");
    }
    await meta.deleteInternal(name);
  }
  return finished;
}

/** Whether the transcript holds an entry `id` after `afterSeq` (read backwards from the end). */
async function hasEntry(
  transcripts: FileTranscriptStore,
  sessionId: string,
  id: string,
  afterSeq: number,
): Promise<boolean> {
  let before: number | undefined;
  for (;;) {
    const page = await transcripts.read(sessionId, {
      limit: 64,
      ...(before !== undefined ? { before } : {}),
    });
    if (page.entries.some((item) => item.id === id)) return true;
    const oldest = page.entries[0];
    if (oldest === undefined || oldest.seq <= afterSeq + 1 || page.nextBefore === undefined) return false;
    before = page.nextBefore;
  }
}
