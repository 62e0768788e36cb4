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
 * A taint rise touches three files (transcript, sessions journal, audit log) that a crash or a
 * failed write can leave at different points. It is made one unit by an intent record in the meta
 * journal, written first and removed last:
 *
 * 1. the intent (row, entry with its id and time, the chained audit record) is made durable; the
 *    audit record is queued at once, so the chain keeps its order, but written only after the
 *    intent, and the records before it must be durable too;
 * 2. the audit record is made durable. Until then nothing else of the rise is written, so a
 *    failure up to here leaves none of it: the intent is removed (awaited) and the call rejects;
 * 3. then the transcript entry and the row go out together (one group commit each); once both
 *    are durable the call resolves and the intent is removed (not awaited). If one of them fails,
 *    the call rejects but the intent stays: the audit record says the rise happened, and the next
 *    open finishes it.
 *
 * At open, every intent left behind is finished when its audit record is in the log (or is the
 * next one and is appended: a crash before its write, with nobody answered): the entry and the
 * row's taint are written where missing. When the record is neither (its index went to another
 * record after the write failed, or an earlier record was lost with the crash), step 3 never began
 * and nothing of the rise was written: the intent is dropped. Either way all or none. (Before
 * steps 2 and 3 were split, all three writes went out together, so an intent of that version may
 * have its entry written without its record; that is logged as an error and the row follows the
 * entry, so the session's taint never stays below what its transcript holds.)
 *
 * Cost: one more durable round per rise (intent, record, entry and row, where the record went
 * with the entry and row before). Rises are rare: a session's taint rises at most once per level.
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
      // The audit record fails with its gate (the intent) or with an earlier record.
      await Promise.all([intent, before, audited]);
    } catch (error) {
      // Nothing of the rise was written. The intent goes before the caller hears: the rejection
      // means none, also at the next open (unless removing it fails too; then the open either
      // drops it, or appends its record and finishes it if the record still follows the log).
      await audited.catch(() => undefined);
      if (intentWritten) {
        await meta.deleteInternal(name).catch((deleteError: unknown) => {
          parts.logger.warn(
            { error: String(deleteError), name },
            "could not remove a refused taint rise's intent",
          );
        });
      }
      throw error;
    }
    // The audit record is durable: from here on the intent finishes the rise at the next open if
    // anything below fails.
    const [written, version] = await Promise.all([
      transcripts.append(row.sessionId, [entry]),
      sessions.putChecked(row),
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
    const transcriptThere = await transcripts.exists(row.sessionId);
    // The entry and the row are written only once the record is durable (step 3), so without the
    // record there is no entry either, except from an intent of the version that wrote all three
    // at once.
    const entryThere =
      transcriptThere && (await hasEntry(transcripts, row.sessionId, entry.id, intent.afterSeq));
    if (!audited && !entryThere) {
      logger.warn(
        { key: row.key, auditIndex: record.index },
        "dropped a taint rise whose audit record was never written; nothing else of it was written either",
      );
    } else {
      if (!audited) {
        logger.error(
          { key: row.key, sessionId: row.sessionId, entryId: entry.id, auditIndex: record.index },
          "a taint rise's transcript entry was written but its audit record was lost (left by an earlier version); the rise stands without an audit record",
        );
      }
      if (transcriptThere && !entryThere) await transcripts.append(row.sessionId, [entry]);
      const current = await sessions.get(row.key);
      if (current && current.sessionId === row.sessionId && !canFlowTo(row.taint, current.taint)) {
        await sessions.put({
          ...current,
          taint: row.taint,
          updatedAt: Math.max(current.updatedAt, row.updatedAt),
        });
      }
      if (audited) {
        finished++;
        logger.info(
          { key: row.key, auditIndex: record.index },
          "finished a taint rise interrupted by a crash or a failed write",
        );
      }
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
