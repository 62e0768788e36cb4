import { createHmac, randomUUID } from "node:crypto";
import {
  type AuditChain,
  type AuditEntry,
  type AuditHead,
  type AuditHmac,
  type AuditRecord,
  createAuditChain,
  type TaintRise,
  type TaintRiseResult,
  verifyAuditRecords,
} from "@switchboard/core";
import type pg from "pg";
import { isUniqueViolation } from "../errors";
import { writeTaintRiseIn } from "../taint-rise";
import type { Coordination } from "./context";

function sameHeads(a: Record<string, AuditHead>, b: Record<string, AuditHead>): boolean {
  const ids = Object.keys(b);
  if (Object.keys(a).length !== ids.length) return false;
  return ids.every((id) => a[id]?.index === b[id]!.index && a[id]?.hash === b[id]!.hash);
}

/** A record of one writer's chain. */
export interface ClusterAuditRecord extends AuditRecord {
  chainId: string;
  /** Its position across every chain (`tail`'s `after`); set on records read by `tail`. */
  position?: number;
}

export interface ClusterAuditVerifyResult {
  ok: boolean;
  /** Records verified (every chain's, anchors not counted). */
  entries: number;
  chains: number;
  anchors: number;
  /** Where the first problem is: a chain id, or `anchors` for the anchor chain. */
  chainId?: string;
  firstBadIndex?: number;
  reason?: string;
}

/**
 * Backs the gateway's `AuditChainHead` (and the audit part of the store) across instances without
 * one global hot row: every writer appends to a hash chain of its own (a chain id per open, so one
 * writer per chain and no contention between instances), and anchors — themselves a hash chain of
 * core's format — periodically record the head of every chain.
 *
 * What changes for callers: `append` chains and stores in one call (the head and the log are one
 * component, because the chain lives in the database); there is no global `index`: a record is
 * identified by `chainId` + `index`; `verify` checks every chain, that each chain reaches the head
 * its newest anchor recorded (a removed tail, a removed chain), that each chain's first record
 * names that chain (records moved to another chain id), and the anchor chain itself.
 *
 * Hashing is core's (`createAuditChain`, `verifyAuditRecords`): HMAC-SHA256 of prevHash and the
 * canonical entry, genesis prevHash zeros. What no anchor covers yet — records appended, or chains
 * created, after the newest anchor — can be cut off undetected by someone who can write to the
 * database, as in the single-process gateway after its last anchor.
 */
export interface ClusterAuditLog {
  /** This writer's chain. */
  readonly chainId: string;
  append(entry: AuditEntry): Promise<ClusterAuditRecord>;
  /**
   * Appends `entry` to this writer's chain in one transaction with `write` (which gets the
   * transaction's client and the record): the record and what `write` writes commit together or
   * not at all. The chain goes on from what the database holds after a failure.
   */
  appendWith<T>(
    entry: AuditEntry,
    write: (client: pg.ClientBase, record: AuditRecord) => Promise<T>,
  ): Promise<{ record: ClusterAuditRecord; result: T }>;
  /**
   * A taint rise: its audit record (this writer's chain), the transcript's `taint` entry and the
   * session row (the store's tables, same schema) in one transaction.
   */
  commitTaintRise(
    entry: AuditEntry,
    rise: Omit<TaintRise, "audit">,
  ): Promise<{ record: ClusterAuditRecord; result: TaintRiseResult }>;
  /** Records the head of every chain in a new anchor. */
  anchor(): Promise<void>;
  /** The chain heads of the newest anchor (chain id → head). */
  anchored(): Promise<Record<string, AuditHead>>;
  /**
   * Records across chains in one cluster-wide order, oldest first, each with its `position`:
   * without `after` the newest `limit`, with it the first `limit` after that position. A reader
   * following with `after` = the last position it got misses and repeats nothing.
   */
  tail(limit: number, after?: number): Promise<ClusterAuditRecord[]>;
  verify(): Promise<ClusterAuditVerifyResult>;
}

/** node:crypto's synchronous HMAC: the same hashes as core's WebCrypto default. */
export const nodeAuditHmac: AuditHmac = (key, message) =>
  createHmac("sha256", key).update(message).digest("hex");

const CHAIN_START = "audit.chain";
const ANCHOR = "audit.anchor";
const ANCHOR_LOCK_CLASS = 0x5357_4241; // "SWBA"

interface RecordRow {
  chain_id: string;
  record: AuditRecord;
}

/** Records per group insert, at most. */
const MAX_GROUP = 500;
/** Positions per transaction in `tail` (more than MAX_GROUP records). */
const POSITION_SLOTS = 1024;

interface PendingAudit {
  entry: AuditEntry;
  resolve: (record: AuditRecord) => void;
  reject: (error: unknown) => void;
}

export async function openClusterAuditLog(
  coordination: Coordination,
  key: Uint8Array,
  options: {
    hmac?: AuditHmac;
    /** Records per read while verifying (default 1000). */
    pageSize?: number;
  } = {},
): Promise<ClusterAuditLog> {
  const hmac = options.hmac ?? nodeAuditHmac;
  const pageSize = options.pageSize ?? 1000;
  const { db, q, instanceId, schema } = coordination;
  const records = q("audit_chain_records");
  const anchors = q("audit_anchors");
  const chainId = `${instanceId}:${randomUUID()}`;

  const insertSql = `INSERT INTO ${records} (chain_id, idx, at, record) VALUES ($1, $2, $3, $4)`;
  const insertValues = (record: AuditRecord) => [chainId, record.index, record.at, JSON.stringify(record)];
  const insert = (record: AuditRecord) =>
    db.query("appending an audit record", insertSql, insertValues(record));
  const insertMany = (group: AuditRecord[]) =>
    db.query(
      "appending audit records",
      `INSERT INTO ${records} (chain_id, idx, at, record)
       SELECT $1, t.idx, t.at, t.record FROM unnest($2::bigint[], $3::bigint[], $4::json[]) AS t(idx, at, record)`,
      [
        chainId,
        group.map((record) => record.index),
        group.map((record) => record.at),
        group.map((record) => JSON.stringify(record)),
      ],
    );
  /** This chain's newest record in the database (the truth after any failure). */
  const storedHead = async (): Promise<AuditRecord | undefined> => {
    const found = await db.read<{ record: AuditRecord }>(
      "reading an audit chain's head",
      `SELECT record FROM ${records} WHERE chain_id = $1 ORDER BY idx DESC LIMIT 1`,
      [chainId],
    );
    return found.rows[0]?.record;
  };
  const chainAfter = (last: AuditRecord | undefined): AuditChain =>
    createAuditChain({ key, hmac, ...(last ? { last: { index: last.index, hash: last.hash } } : {}) });
  /** The chain continued after what the database holds. */
  const rebuild = async (): Promise<AuditChain> => chainAfter(await storedHead());
  await db.query(
    "registering an audit chain",
    `INSERT INTO ${q("audit_chains")} (chain_id, instance_id) VALUES ($1, $2)`,
    [chainId, instanceId],
  );
  let chain: AuditChain | undefined = createAuditChain({ key, hmac });
  let queue: Promise<unknown> = Promise.resolve();
  /**
   * Chains and stores one record (one writer per chain, so no lock). After a failed insert the
   * chain is rebuilt from the database, which may hold the record after all (COMMIT reached the
   * server, its answer did not): then the index is taken, and the entry is chained once more after it.
   */
  const appendOne = async (entry: AuditEntry): Promise<AuditRecord> => {
    for (let attempt = 0; ; attempt++) {
      chain ??= await rebuild();
      const record = await chain.next(entry);
      try {
        await insert(record);
        return record;
      } catch (error) {
        chain = undefined;
        chain = await rebuild().catch(() => undefined);
        const taken = isUniqueViolation((error as { cause?: unknown }).cause ?? error);
        if (attempt > 0 || !taken) throw error;
      }
    }
  };
  /**
   * Entries appended while the previous write is in flight, stored together in one statement (a
   * group commit: one writer per chain made every record of an instance wait for the previous
   * record's commit). A group that fails is rebuilt from the database and written record by record,
   * so a record the database refuses fails alone.
   */
  const appendGroup = async (group: PendingAudit[]): Promise<void> => {
    if (group.length > 1) {
      const records: AuditRecord[] = [];
      try {
        chain ??= await rebuild();
        for (const item of group) records.push(await chain.next(item.entry));
        await insertMany(records);
        for (const [index, item] of group.entries()) item.resolve(records[index]!);
        return;
      } catch (error) {
        chain = undefined;
        // One statement: the database holds all of the group or none of it. Unless it is known to
        // hold none, writing the entries again could store them twice.
        let last: AuditRecord | undefined;
        try {
          last = await storedHead();
        } catch {
          for (const item of group) item.reject(error);
          return;
        }
        chain = chainAfter(last);
        const final = records.at(-1);
        if (final && last?.index === final.index && last.hash === final.hash) {
          // Stored, though its answer was lost.
          for (const [index, item] of group.entries()) item.resolve(records[index]!);
          return;
        }
      }
    }
    for (const item of group) await appendOne(item.entry).then(item.resolve, item.reject);
  };
  /** The group not yet being written, which a new entry joins. */
  let open: PendingAudit[] | undefined;
  const append = (entry: AuditEntry): Promise<AuditRecord> =>
    new Promise<AuditRecord>((resolve, reject) => {
      if (open && open.length < MAX_GROUP) {
        open.push({ entry, resolve, reject });
        return;
      }
      const group: PendingAudit[] = [{ entry, resolve, reject }];
      open = group;
      queue = queue
        .then(() => {
          if (open === group) open = undefined;
          return appendGroup(group);
        })
        .catch(() => undefined);
    });
  /** One record and its data in one transaction, in chain order; the chain is rebuilt after a failure. */
  const appendWith = <T>(
    entry: AuditEntry,
    write: (client: pg.ClientBase, record: AuditRecord) => Promise<T>,
  ): Promise<{ record: ClusterAuditRecord; result: T }> => {
    // Entries appended after this one come after it: the open group takes no more.
    open = undefined;
    const run = queue.then(async () => {
      chain ??= await rebuild();
      const record = await chain.next(entry);
      try {
        const result = await db.transaction("appending an audit record with its data", async (client) => {
          await client.query(insertSql, insertValues(record));
          return write(client, record);
        });
        return { record: { ...record, chainId }, result };
      } catch (error) {
        // Rolled back (or committed with its answer lost): go on from what the database holds.
        chain = undefined;
        chain = await rebuild().catch(() => undefined);
        throw error;
      }
    });
    queue = run.catch(() => undefined);
    return run;
  };
  // The chain's first record binds its id into the hashes: moving records to another id breaks it.
  await append({ kind: CHAIN_START, at: Date.now(), data: { chainId, instanceId } });

  /** One chain in index order, a page at a time (a chain may be far larger than memory should hold). */
  async function* readChain(id: string, seen: (record: AuditRecord) => void): AsyncGenerator<AuditRecord> {
    let after = -1;
    for (;;) {
      const page = await db.read<{ idx: string; record: AuditRecord }>(
        "reading an audit chain",
        `SELECT idx, record FROM ${records} WHERE chain_id = $1 AND idx > $2 ORDER BY idx LIMIT $3`,
        [id, after, pageSize],
      );
      for (const row of page.rows) {
        seen(row.record);
        yield row.record;
      }
      if (page.rows.length < pageSize) return;
      after = Number(page.rows.at(-1)!.idx);
    }
  }
  const latestAnchors = async (): Promise<AuditRecord[]> => {
    const found = await db.read<{ record: AuditRecord }>(
      "reading audit anchors",
      `SELECT record FROM ${anchors} ORDER BY idx`,
    );
    return found.rows.map((row) => row.record);
  };
  const headsOf = (anchor: AuditRecord | undefined): Record<string, AuditHead> =>
    (anchor?.data.heads as Record<string, AuditHead> | undefined) ?? {};

  return {
    chainId,
    async append(entry) {
      const record = await append(entry);
      return { ...record, chainId };
    },
    appendWith,
    commitTaintRise(entry, rise) {
      return appendWith(entry, (client, record) => writeTaintRiseIn(client, q, rise, record));
    },
    async anchor() {
      await db.transaction("anchoring the audit chains", async (client) => {
        // One anchor at a time, cluster-wide (normally only the leader anchors).
        await client.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", [
          ANCHOR_LOCK_CLASS,
          `${schema}.audit`,
        ]);
        const last = await client.query<{ record: AuditRecord }>(
          `SELECT record FROM ${anchors} ORDER BY idx DESC LIMIT 1`,
        );
        // Each chain's newest record, found by walking the primary key from chain to chain: a
        // DISTINCT ON over the table read every record ever written, every 5 s on every instance
        // (21 ms at 40 000 records, under the anchor lock), and grew with the log.
        const heads = await client.query<{ chain_id: string; idx: string; hash: string }>(
          `WITH RECURSIVE ids(chain_id) AS (
             (SELECT chain_id FROM ${records} ORDER BY chain_id LIMIT 1)
             UNION ALL
             SELECT (SELECT r.chain_id FROM ${records} r WHERE r.chain_id > ids.chain_id ORDER BY r.chain_id LIMIT 1)
             FROM ids WHERE ids.chain_id IS NOT NULL
           )
           SELECT ids.chain_id, head.idx, head.hash FROM ids CROSS JOIN LATERAL (
             SELECT r.idx, r.record->>'hash' AS hash FROM ${records} r
             WHERE r.chain_id = ids.chain_id ORDER BY r.idx DESC LIMIT 1
           ) head
           WHERE ids.chain_id IS NOT NULL`,
        );
        const previous = last.rows[0]?.record;
        const anchorChain = createAuditChain({
          key,
          hmac,
          ...(previous ? { last: { index: previous.index, hash: previous.hash } } : {}),
        });
        const data: Record<string, AuditHead> = {};
        for (const row of heads.rows) data[row.chain_id] = { index: Number(row.idx), hash: row.hash };
        // Every instance anchors every 5 s and the leader every 10 s: an anchor naming the heads the
        // newest one names adds nothing to `verify`, and an idle cluster wrote one every few seconds
        // for ever (each naming every chain ever started).
        if (previous && sameHeads(headsOf(previous), data)) return;
        const record = await anchorChain.next({
          kind: ANCHOR,
          at: Date.now(),
          actor: instanceId,
          data: { heads: data },
        });
        await client.query(`INSERT INTO ${anchors} (idx, record) VALUES ($1, $2)`, [
          record.index,
          JSON.stringify(record),
        ]);
      });
    },
    async anchored() {
      const found = await db.read<{ record: AuditRecord }>(
        "reading the newest audit anchor",
        `SELECT record FROM ${anchors} ORDER BY idx DESC LIMIT 1`,
      );
      return headsOf(found.rows[0]?.record);
    },
    /**
     * The position is the id of the transaction that wrote the record, times POSITION_SLOTS, plus
     * the record's place among that transaction's records (a group commit writes up to MAX_GROUP
     * records of one chain in one statement, always the transaction's first write). Ids are handed
     * out in start order, not commit order, so only records below every transaction that may still
     * add one are answered: those can no longer be joined by a record with a smaller id, and a
     * reader continuing after the last position never skips one that commits late. "May still add
     * one": in progress at this statement's snapshot, unless it is still running without any lock on
     * the records table — it has written something else first, so (first write) it writes no
     * record. Other writers of the database therefore do not hold readers back. Instances append
     * without a shared lock.
     */
    async tail(limit, after) {
      const settled = `r.xid < COALESCE(
        (SELECT min(f.x) FROM pg_snapshot_xip(pg_current_snapshot()) AS f(x) WHERE NOT EXISTS (
          SELECT 1 FROM pg_locks t WHERE t.locktype = 'transactionid' AND t.mode = 'ExclusiveLock'
            AND t.transactionid = f.x::xid
            AND NOT EXISTS (SELECT 1 FROM pg_locks r WHERE r.pid = t.pid AND r.locktype = 'relation'
              AND r.relation = '${records.replaceAll("'", "''")}'::regclass))),
        pg_snapshot_xmax(pg_current_snapshot()))`;
      const place = `(r.idx - (SELECT min(p.idx) FROM ${records} p WHERE p.xid = r.xid AND p.chain_id = r.chain_id))`;
      const position = `(r.xid::text::numeric * ${POSITION_SLOTS} + ${place})::text AS position`;
      const found =
        after === undefined
          ? await db.read<RecordRow & { position: string }>(
              "reading the newest audit records",
              `SELECT r.chain_id, r.record, ${position} FROM ${records} r WHERE ${settled}
               ORDER BY r.xid DESC, r.chain_id DESC, r.idx DESC LIMIT $1`,
              [limit],
            )
          : await db.read<RecordRow & { position: string }>(
              "reading audit records after a position",
              `SELECT r.chain_id, r.record, ${position} FROM ${records} r
               WHERE ${settled} AND (r.xid > $2::text::xid8 OR (r.xid = $2::text::xid8 AND ${place} > $3))
               ORDER BY r.xid, r.chain_id, r.idx LIMIT $1`,
              [
                limit,
                String(Math.max(0, Math.floor(after / POSITION_SLOTS))),
                after < 0 ? -1 : after % POSITION_SLOTS,
              ],
            );
      const rows = after === undefined ? found.rows.reverse() : found.rows;
      return rows.map((row) => ({ ...row.record, chainId: row.chain_id, position: Number(row.position) }));
    },
    async verify() {
      const anchorRecords = await latestAnchors();
      const anchorCheck = await verifyAuditRecords(key, anchorRecords, { hmac });
      const result = (fields: Omit<ClusterAuditVerifyResult, "anchors">): ClusterAuditVerifyResult => ({
        ...fields,
        anchors: anchorRecords.length,
      });
      if (!anchorCheck.ok || anchorRecords.some((record) => record.kind !== ANCHOR)) {
        return result({
          ok: false,
          entries: 0,
          chains: 0,
          chainId: "anchors",
          firstBadIndex: anchorCheck.firstBadIndex ?? 0,
          reason: anchorCheck.reason ?? "an anchor record is not an anchor",
        });
      }
      // The newest head each anchor recorded per chain; anchors only grow, so the last one wins.
      const expected: Record<string, AuditHead> = {};
      for (const anchor of anchorRecords) Object.assign(expected, headsOf(anchor));
      const registered = await db.read<{ chain_id: string }>(
        "listing audit chains",
        `SELECT chain_id FROM ${q("audit_chains")} UNION SELECT DISTINCT chain_id FROM ${records}`,
      );
      const chainIds = [
        ...new Set([...registered.rows.map((row) => row.chain_id), ...Object.keys(expected)]),
      ].sort();
      let entries = 0;
      for (const id of chainIds) {
        let first: AuditRecord | undefined;
        const head = expected[id];
        const check = await verifyAuditRecords(
          key,
          readChain(id, (record) => {
            first ??= record;
          }),
          {
            hmac,
            ...(head ? { expectedHead: head } : {}),
          },
        );
        if (!check.ok) {
          return result({
            ok: false,
            entries: entries + check.entries,
            chains: chainIds.length,
            chainId: id,
            firstBadIndex: check.firstBadIndex ?? 0,
            reason: check.reason ?? "chain does not verify",
          });
        }
        if (first && (first.kind !== CHAIN_START || first.data.chainId !== id)) {
          return result({
            ok: false,
            entries,
            chains: chainIds.length,
            chainId: id,
            firstBadIndex: 0,
            reason: `chain ${id} does not start with its own ${CHAIN_START} record (records moved from another chain)`,
          });
        }
        entries += check.entries;
      }
      return result({ ok: true, entries, chains: chainIds.length });
    },
  };
}
