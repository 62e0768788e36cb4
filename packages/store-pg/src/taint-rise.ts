import {
  type AuditRecord,
  DEFAULT_MAX_ENTRY_BYTES,
  prepareTranscriptAppend,
  type SessionEntry,
  SwitchboardError,
  type TaintRise,
  type TaintRiseResult,
  validateAuditBatch,
  validateTaintRise,
} from "@switchboard/core";
import type pg from "pg";
import { type AuditLog, auditIndexTaken } from "./audit";
import type { Db } from "./db";
import { isUniqueViolation } from "./errors";
import type { KeyedSerializer } from "./serial";
import { sessionColumnValues, sessionUpdateIfSql, sessionUpsertSql } from "./sessions";
import { appendSql, appendValues, withAssignedSeqs } from "./transcripts";
import { toNumber, versionConflict } from "./versions";

export interface TaintRiseQueues {
  sessions: KeyedSerializer;
  transcripts: KeyedSerializer;
  audit: AuditLog;
}

/**
 * A taint rise in one transaction: the transcript's `taint` entry, the session row and the audit
 * record commit together or not at all. Its place in each call order (the row's, the transcript's
 * and the audit log's) is taken when it is called, so it neither overtakes nor is overtaken by this
 * instance's other writes; the places are taken all at once, in one order, so two rises can never
 * wait for each other.
 */
export function createTaintRiseCommit(
  db: Db,
  q: (table: string) => string,
  queues: TaintRiseQueues,
  maxEntryBytes = DEFAULT_MAX_ENTRY_BYTES,
): (rise: TaintRise) => Promise<TaintRiseResult> {
  const audit = q("audit_records");
  return async (input) => {
    // Every check that needs no database first (the audit index is checked in the transaction).
    const { row, entry, audit: record } = validateTaintRise(input, undefined);
    const prepared = prepareTranscriptAppend([entry], { lastSeq: 0, maxEntryBytes });

    let finish!: () => void;
    const finished = new Promise<void>((resolve) => {
      finish = resolve;
    });
    const placeIn = (queue: KeyedSerializer, key: string) =>
      new Promise<void>((ready) => {
        void queue.run(key, () => {
          ready();
          return finished;
        });
      });
    const turns = [placeIn(queues.sessions, row.key), placeIn(queues.transcripts, row.sessionId)];
    const auditTurn = queues.audit.takeTurn();
    try {
      await Promise.all([...turns, auditTurn.ready]);
      return await db.transaction(`committing the taint rise of session ${row.key}`, async (client) => {
        const last = await client.query<{ idx: string | null }>(`SELECT max(idx) AS idx FROM ${audit}`);
        const lastIndex = last.rows[0]?.idx;
        validateAuditBatch(
          [record],
          lastIndex === null || lastIndex === undefined ? undefined : toNumber(lastIndex),
        );
        const result = await writeRise(client, q, row, prepared, input.expectedVersion);
        try {
          await client.query(`INSERT INTO ${audit} (idx, record) VALUES ($1, $2)`, [
            record.index,
            JSON.stringify(record),
          ]);
        } catch (error) {
          if (isUniqueViolation(error)) throw auditIndexTaken(record.index);
          throw error;
        }
        return result;
      });
    } finally {
      finish();
      auditTurn.release();
    }
  };
}

type PreparedRise = ReturnType<typeof prepareTranscriptAppend>;

/** The rise's transcript entry and session row, inside the caller's transaction. */
async function writeRise(
  client: pg.ClientBase,
  q: (table: string) => string,
  row: SessionEntry,
  prepared: PreparedRise,
  expectedVersion: number | undefined,
): Promise<TaintRiseResult> {
  const appended = await client.query<{ seq: string }>(
    appendSql(q),
    appendValues(row.sessionId, prepared.entries),
  );
  if (appended.rows.length === 0) {
    throw new SwitchboardError("NOT_FOUND", `no transcript for sessionId ${row.sessionId}`);
  }
  const values = sessionColumnValues(row);
  const written =
    expectedVersion === undefined
      ? await client.query<{ version: string }>(sessionUpsertSql(q), values)
      : await client.query<{ version: string }>(sessionUpdateIfSql(q), [...values, expectedVersion]);
  if (written.rows.length === 0) {
    // Another instance wrote the row since it was read: the transaction rolls back, the caller reads again.
    const now = await client.query<{ version: string }>(
      `SELECT version FROM ${q("sessions")} WHERE key = $1`,
      [row.key],
    );
    throw versionConflict("session", row.key, expectedVersion!, toNumber(now.rows[0]?.version));
  }
  return {
    entry: withAssignedSeqs(prepared.entries, appended.rows)[0]!,
    version: toNumber(written.rows[0]?.version),
  };
}

/**
 * A taint rise whose audit record is written elsewhere in the same transaction (a cluster's audit
 * chain, see coordination/audit-chains.ts): the transcript's `taint` entry and the session row on
 * the caller's client, so the three commit together or not at all. The caller holds the session's
 * lock (the gateway's per-key lock), as for any write of the row.
 */
export async function writeTaintRiseIn(
  client: pg.ClientBase,
  q: (table: string) => string,
  rise: Omit<TaintRise, "audit">,
  audit: AuditRecord,
  maxEntryBytes = DEFAULT_MAX_ENTRY_BYTES,
): Promise<TaintRiseResult> {
  // The record's place is its own chain's: only its shape is checked here.
  const { row, entry } = validateTaintRise({ ...rise, audit }, undefined);
  return writeRise(
    client,
    q,
    row,
    prepareTranscriptAppend([entry], { lastSeq: 0, maxEntryBytes }),
    rise.expectedVersion,
  );
}
