import {
  type AuditRecord,
  type AuditStore,
  checkIdempotencyKeyFree,
  checkPruneOptions,
  compileRunFilter,
  type MetaStore,
  normaliseAuditRead,
  type RunListQuery,
  type RunRecord,
  type RunRegistryStore,
  SwitchboardError,
  validateAuditBatch,
  validateMetaName,
  validateMetaValue,
  validateRunRecord,
  validateTailLimit,
  type WriteOptions,
} from "@switchboard/core";
import type { Db } from "./db";
import { isUniqueViolation } from "./errors";
import { KeyedSerializer } from "./serial";
import { checkExpectedVersion, pgText, toNumber, versionConflict } from "./versions";

const IDEMPOTENCY_CONSTRAINT = "runs_idempotency_key";

export function createRunRegistry(db: Db, q: (table: string) => string): RunRegistryStore {
  const table = q("runs");
  const inOrder = new KeyedSerializer();
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
            const inserted = await db.query<{ version: string }>(
              action,
              `INSERT INTO ${table} (${columns}, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, ${version})
             ON CONFLICT (run_id) DO NOTHING RETURNING version`,
              values,
            );
            const hit = inserted.rows[0];
            if (hit) return toNumber(hit.version);
            throw versionConflict("run", run.runId, 0, await versionOf(run.runId));
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
      if (query.pendingAnnounce !== undefined) where.push(`pending_announce = ${add(query.pendingAnnounce)}`);
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
           ORDER BY ended_at, run_id LIMIT $3
           FOR UPDATE SKIP LOCKED
         ), gone AS (DELETE FROM ${table} WHERE run_id IN (SELECT run_id FROM doomed) RETURNING 1)
         SELECT count(*) AS count FROM gone`,
        [options.endedBefore, [...(options.keep ?? [])], options.limit],
      );
      return toNumber(gone.rows[0]?.count);
    },
  };
}

interface PendingAppend {
  records: readonly AuditRecord[];
  resolve: () => void;
  reject: (error: unknown) => void;
}

export function createAuditStore(db: Db, q: (table: string) => string): AuditStore {
  const table = q("audit_records");
  const records = (rows: { record: AuditRecord }[]) => rows.map((row) => row.record);
  // Group commit: appends are taken in call order; those that arrive while one statement is in
  // flight go together in the next one (each caller's batch is still checked on its own).
  let queue: PendingAppend[] = [];
  let flushing = false;

  const flush = async (group: PendingAppend[]): Promise<void> => {
    let last: number | undefined;
    try {
      const found = await db.read<{ idx: string | null }>(
        "reading the audit log",
        `SELECT max(idx) AS idx FROM ${table}`,
      );
      const idx = found.rows[0]?.idx;
      last = idx === null || idx === undefined ? undefined : toNumber(idx);
    } catch (error) {
      for (const pending of group) pending.reject(error);
      return;
    }
    const accepted: PendingAppend[] = [];
    const combined: AuditRecord[] = [];
    for (const pending of group) {
      try {
        const valid = validateAuditBatch(pending.records, last);
        if (valid.length > 0) last = valid.at(-1)!.index;
        combined.push(...valid);
        accepted.push(pending);
      } catch (error) {
        pending.reject(error);
      }
    }
    try {
      // Records are never deleted, so a batch checked against the last index can only lose a race
      // to another writer of the same index, which the primary key refuses.
      if (combined.length > 0) {
        await db.query(
          "appending to the audit log",
          `INSERT INTO ${table} (idx, record) SELECT * FROM unnest($1::bigint[], $2::json[])`,
          [combined.map((record) => record.index), combined.map((record) => JSON.stringify(record))],
        );
      }
      for (const pending of accepted) pending.resolve();
    } catch (error) {
      const refused = isUniqueViolation((error as { cause?: unknown }).cause)
        ? new SwitchboardError(
            "CONFLICT",
            `records[0].index: ${combined[0]!.index} was written meanwhile by another writer; read the log's last record and retry`,
            { details: { field: "records[0].index" } },
          )
        : error;
      for (const pending of accepted) pending.reject(refused);
    }
  };

  return {
    append(batch) {
      return new Promise<void>((resolve, reject) => {
        queue.push({ records: batch, resolve, reject });
        if (flushing) return;
        flushing = true;
        void (async () => {
          while (queue.length > 0) {
            const group = queue;
            queue = [];
            await flush(group);
          }
          flushing = false;
        })();
      });
    },
    async last() {
      const found = await db.read<{ record: AuditRecord }>(
        "reading the audit log",
        `SELECT record FROM ${table} ORDER BY idx DESC LIMIT 1`,
      );
      return found.rows[0]?.record;
    },
    async read(options) {
      const { after, limit } = normaliseAuditRead(options);
      const values: number[] = [];
      const where = after === undefined ? "" : `WHERE idx > $${values.push(after)}`;
      const capped = limit === undefined ? "" : `LIMIT $${values.push(limit)}`;
      const found = await db.read<{ record: AuditRecord }>(
        "reading the audit log",
        `SELECT record FROM ${table} ${where} ORDER BY idx ${capped}`,
        values,
      );
      return records(found.rows);
    },
    async tail(limit) {
      const count = validateTailLimit(limit);
      if (count === 0) return [];
      const found = await db.read<{ record: AuditRecord }>(
        "reading the audit log",
        `SELECT record FROM (SELECT idx, record FROM ${table} ORDER BY idx DESC LIMIT $1) t ORDER BY idx`,
        [count],
      );
      return records(found.rows);
    },
    async count() {
      // Indexes are consecutive (append refuses gaps), so the count is two index lookups.
      const found = await db.read<{ count: string | null }>(
        "counting the audit log",
        `SELECT max(idx) - min(idx) + 1 AS count FROM ${table}`,
      );
      return toNumber(found.rows[0]?.count);
    },
  };
}

export function createMetaStore(db: Db, q: (table: string) => string): MetaStore {
  const table = q("meta");
  const inOrder = new KeyedSerializer();
  return {
    async get(name) {
      const found = await db.read<{ value: string }>(
        "reading meta",
        `SELECT value FROM ${table} WHERE name = $1`,
        [pgText(validateMetaName(name))],
      );
      return found.rows[0]?.value;
    },
    async set(name, value) {
      const key = pgText(validateMetaName(name));
      const stored = JSON.stringify(validateMetaValue(value));
      await inOrder.run(key, () =>
        db.query(
          `writing meta ${key}`,
          `INSERT INTO ${table} (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`,
          [key, stored],
        ),
      );
    },
  };
}
