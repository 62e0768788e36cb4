import {
  type AuditRecord,
  type AuditStore,
  normaliseAuditRead,
  SwitchboardError,
  validateAuditBatch,
  validateScanPageSize,
  validateTailLimit,
} from "@switchboard/core";
import type { Db } from "./db";
import { isUniqueViolation } from "./errors";
import { toNumber } from "./versions";

type Queued =
  | { kind: "append"; records: readonly AuditRecord[]; resolve: () => void; reject: (error: unknown) => void }
  | { kind: "turn"; start: () => void; finished: Promise<void> };

/** A place in the audit log's call order, for a write that adds a record in its own transaction. */
export interface AuditTurn {
  /** Resolves when every earlier append has been written. */
  ready: Promise<void>;
  /** Lets the appends after this turn go on; call it once the write settled. */
  release: () => void;
}

export interface AuditLog {
  store: AuditStore;
  /** Settles once every append made so far has been written or refused. */
  idle(): Promise<void>;
  /** Takes the next place in call order now (see `AuditTurn`). */
  takeTurn(): AuditTurn;
}

export function createAuditLog(db: Db, q: (table: string) => string): AuditLog {
  const table = q("audit_records");
  const records = (rows: { record: AuditRecord }[]) => rows.map((row) => row.record);
  // Group commit: appends are taken in call order; those that arrive while one statement is in
  // flight go together in the next one (each caller's batch is still checked on its own). A turn
  // (a taint rise's record) waits for the appends before it and holds back those after it.
  let queue: Queued[] = [];
  let draining = false;
  let drained: Promise<void> = Promise.resolve();

  const flush = async (group: Extract<Queued, { kind: "append" }>[]): Promise<void> => {
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
    const accepted: typeof group = [];
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
        ? auditIndexTaken(combined[0]!.index)
        : error;
      for (const pending of accepted) pending.reject(refused);
    }
  };

  const drain = () => {
    if (draining) return;
    draining = true;
    drained = (async () => {
      while (queue.length > 0) {
        const items = queue;
        queue = [];
        let appends: Extract<Queued, { kind: "append" }>[] = [];
        for (const item of items) {
          if (item.kind === "append") {
            appends.push(item);
            continue;
          }
          if (appends.length > 0) await flush(appends);
          appends = [];
          item.start();
          await item.finished;
        }
        if (appends.length > 0) await flush(appends);
      }
      draining = false;
    })();
  };

  const takeTurn = (): AuditTurn => {
    let start!: () => void;
    let release!: () => void;
    const ready = new Promise<void>((resolve) => {
      start = resolve;
    });
    const finished = new Promise<void>((resolve) => {
      release = resolve;
    });
    queue.push({ kind: "turn", start, finished });
    drain();
    return { ready, release };
  };

  const store: AuditStore = {
    append(batch) {
      return new Promise<void>((resolve, reject) => {
        queue.push({ kind: "append", records: batch, resolve, reject });
        drain();
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
    async *scan(pageSize) {
      const size = validateScanPageSize(pageSize);
      // `idx` is the table's key: its order is the order stored, so keyset pages skip nothing.
      let after: number | undefined;
      for (;;) {
        const page = await store.read({ ...(after === undefined ? {} : { after }), limit: size });
        if (page.length > 0) yield page;
        if (page.length < size) return;
        after = page.at(-1)!.index;
      }
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
  const idle = async (): Promise<void> => {
    while (draining) await drained;
  };
  return { store, takeTurn, idle };
}

/** The CONFLICT of an audit index another writer took first. */
export function auditIndexTaken(index: number): SwitchboardError {
  return new SwitchboardError(
    "CONFLICT",
    `records[0].index: ${index} was written meanwhile by another writer; read the log's last record and retry`,
    { details: { field: "records[0].index" } },
  );
}
