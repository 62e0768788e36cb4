import {
  archivedSessionError,
  checkIdempotencyKeyFree,
  checkPruneOptions,
  compileRunFilter,
  type RunListQuery,
  type RunRecord,
  type RunRegistryStore,
  validateRunRecord,
  type WriteOptions,
} from "@switchboard/core";
import { batchedRowReads } from "./batched-reads";
import type { Db } from "./db";
import { isUniqueViolation } from "./errors";
import type { KeyedSerializer } from "./serial";
import { checkExpectedVersion, pgText, toNumber, versionConflict } from "./versions";

const IDEMPOTENCY_CONSTRAINT = "runs_idempotency_key";

/** `inOrder` orders writes per runId. */
export function createRunRegistry(
  db: Db,
  q: (table: string) => string,
  inOrder: KeyedSerializer,
): RunRegistryStore {
  const table = q("runs");
  const version = `nextval('${q("row_versions").replaceAll("'", "''")}')`;
  const columns = "run_id, idempotency_key, session_key, status, created_at, ended_at, pending_announce, row";
  const sets =
    "idempotency_key = $2, session_key = $3, status = $4, created_at = $5, ended_at = $6, pending_announce = $7, row = $8";
  const versionOf = async (runId: string): Promise<number> => {
    const found = await db.read<{ version: string }>(
      "reading a run's version",
      `SELECT version FROM ${table} WHERE run_id = $1`,
      [runId],
    );
    return toNumber(found.rows[0]?.version);
  };
  /** The unique index refused the key: name the run that holds it, as core's rule words it. */
  const keyTaken = async (run: RunRecord, error: unknown): Promise<never> => {
    if (!isUniqueViolation(error, IDEMPOTENCY_CONSTRAINT) || run.idempotencyKey === undefined) throw error;
    const owner = await db.read<{ run_id: string }>(
      "reading a run by idempotency key",
      `SELECT run_id FROM ${table} WHERE idempotency_key = $1`,
      [run.idempotencyKey],
    );
    // The holder may have let the key go meanwhile; the write still lost the race.
    checkIdempotencyKeyFree(run, owner.rows[0]?.run_id ?? "(another run, since changed)", undefined);
    throw error;
  };

  // Waits on several instances read a run as its end is heard: under load those reads share statements.
  const reads = batchedRowReads<RunRecord>(db, "reading runs", table, "run_id");

  return {
    async put(input, options: WriteOptions = {}) {
      const run = validateRunRecord(input);
      const expected = options.expectedVersion;
      checkExpectedVersion(expected);
      const values = [
        run.runId,
        run.idempotencyKey === undefined ? null : pgText(run.idempotencyKey),
        pgText(run.sessionKey),
        run.status,
        run.createdAt,
        run.endedAt ?? null,
        run.spawn?.announce.status === "pending",
        JSON.stringify(run),
      ];
      const action = `writing run ${run.runId}`;
      return inOrder.run(run.runId, async () => {
        try {
          if (expected === undefined) {
            const written = await db.query<{ version: string }>(
              action,
              `INSERT INTO ${table} (${columns}, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, ${version})
             ON CONFLICT (run_id) DO UPDATE SET ${sets}, version = ${version} RETURNING version`,
              values,
            );
            return toNumber(written.rows[0]?.version);
          }
          if (expected === 0) {
            // A new run: its session's row is held FOR KEY SHARE (which only an archive's FOR UPDATE
            // waits for: see archive-idle.ts) while the insert checks it is not archived.
            const inserted = await db.query<{ version: string }>(
              action,
              `WITH session AS MATERIALIZED (
                 SELECT archived_at FROM ${q("sessions")} WHERE key = $3 FOR KEY SHARE
               )
               INSERT INTO ${table} (${columns}, version)
               SELECT $1::text, $2::text, $3::text, $4::text, $5::bigint, $6::bigint, $7::boolean, $8::json, ${version}
               WHERE NOT EXISTS (SELECT 1 FROM session WHERE archived_at IS NOT NULL)
               ON CONFLICT (run_id) DO NOTHING RETURNING version`,
              values,
            );
            const hit = inserted.rows[0];
            if (hit) return toNumber(hit.version);
            const current = await versionOf(run.runId);
            if (current === 0) throw archivedSessionError(run.sessionKey);
            throw versionConflict("run", run.runId, 0, current);
          }
          const updated = await db.query<{ version: string }>(
            action,
            `UPDATE ${table} SET ${sets}, version = ${version} WHERE run_id = $1 AND version = $9 RETURNING version`,
            [...values, expected],
          );
          const hit = updated.rows[0];
          if (hit) return toNumber(hit.version);
          throw versionConflict("run", run.runId, expected, await versionOf(run.runId));
        } catch (error) {
          const cause = (error as { cause?: unknown }).cause;
          if (isUniqueViolation(cause, IDEMPOTENCY_CONSTRAINT)) return keyTaken(run, cause);
          throw error;
        }
      });
    },
    async get(runId) {
      // A run id PostgreSQL refuses (NUL) fails alone, not the batch it would share.
      if (!runId.includes("\u0000")) return reads.get(runId);
      const found = await db.read<{ row: RunRecord }>(
        "reading a run",
        `SELECT row FROM ${table} WHERE run_id = $1`,
        [runId],
      );
      return found.rows[0]?.row;
    },
    async getVersioned(runId) {
      const found = await db.read<{ row: RunRecord; version: string }>(
        "reading a run",
        `SELECT row, version FROM ${table} WHERE run_id = $1`,
        [runId],
      );
      const hit = found.rows[0];
      return hit ? { row: hit.row, version: toNumber(hit.version) } : undefined;
    },
    async getByIdempotencyKey(idempotencyKey) {
      const found = await db.read<{ row: RunRecord }>(
        "reading a run by idempotency key",
        `SELECT row FROM ${table} WHERE idempotency_key = $1`,
        [pgText(idempotencyKey)],
      );
      return found.rows[0]?.row;
    },
    async list(query: RunListQuery) {
      compileRunFilter(query);
      const where: string[] = [];
      const values: unknown[] = [];
      const add = (value: unknown) => {
        values.push(value);
        return `$${values.length}`;
      };
      if (query.statuses !== undefined) where.push(`status = ANY(${add([...query.statuses])}::text[])`);
      if (query.sessionKey !== undefined) where.push(`session_key = ${add(pgText(query.sessionKey))}`);
      if (query.agentId !== undefined) where.push(`row->>'agentId' = ${add(pgText(query.agentId))}`);
      if (query.pendingAnnounce !== undefined) where.push(`pending_announce = ${add(query.pendingAnnounce)}`);
      if (query.pendingFollowUp !== undefined)
        where.push(`(row->>'followUp' IS NOT DISTINCT FROM 'pending') = ${add(query.pendingFollowUp)}`);
      if (query.pendingReplyPost !== undefined)
        where.push(`(row->>'replyPost' IS NOT DISTINCT FROM 'pending') = ${add(query.pendingReplyPost)}`);
      if (query.origins !== undefined) where.push(`row->>'origin' = ANY(${add([...query.origins])}::text[])`);
      const limit = query.limit === undefined ? "" : `LIMIT ${add(query.limit)}`;
      const found = await db.read<{ row: RunRecord }>(
        "listing runs",
        `SELECT row FROM ${table} ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
         ORDER BY created_at DESC, run_id ${limit}`,
        values,
      );
      return found.rows.map((hit) => hit.row);
    },
    async prune(options) {
      checkPruneOptions(options, "endedBefore", options.endedBefore);
      // The same rule as core's `runPrunable`, as a WHERE over the partial index `runs_prunable`.
      const gone = await db.query<{ count: string }>(
        "pruning ended runs",
        `WITH doomed AS (
           SELECT run_id FROM ${table}
           WHERE ended_at IS NOT NULL AND status IN ('ok', 'error', 'timeout') AND NOT pending_announce
             AND ended_at < $1 AND NOT (run_id = ANY($2::text[]))
             AND row->>'followUp' IS DISTINCT FROM 'pending' AND row->>'replyPost' IS DISTINCT FROM 'pending'
             AND NOT (row->>'origin' = ANY($4::text[]))
           ORDER BY ended_at, run_id LIMIT $3
           FOR UPDATE SKIP LOCKED
         ), gone AS (DELETE FROM ${table} WHERE run_id IN (SELECT run_id FROM doomed) RETURNING 1)
         SELECT count(*) AS count FROM gone`,
        [options.endedBefore, [...(options.keep ?? [])], options.limit, [...(options.exceptOrigins ?? [])]],
      );
      return toNumber(gone.rows[0]?.count);
    },

    async countEnded() {
      const counted = await db.query<{ count: string }>(
        "counting ended runs",
        `SELECT count(*) AS count FROM ${table} WHERE ended_at IS NOT NULL AND status IN ('ok', 'error', 'timeout')`,
      );
      return toNumber(counted.rows[0]?.count);
    },
  };
}
