import {
  buildTranscriptHeader,
  checkPruneOptions,
  DEFAULT_MAX_ENTRY_BYTES,
  normaliseReadOptions,
  parseSessionId,
  prepareTranscriptAppend,
  SwitchboardError,
  TailCollector,
  type TranscriptEntry,
  type TranscriptReadResult,
  type TranscriptStore,
  utf8ByteLength,
} from "@switchboard/core";
import type { Db } from "./db";
import { GroupedWrites } from "./grouped-writes";
import type { KeyedSerializer } from "./serial";
import { toNumber } from "./versions";

/** Larger than any seq, for "no `before`". */
const NO_BEFORE = Number.MAX_SAFE_INTEGER;
/** Rows fetched per step of a filtered scan: a first page near `limit`, then growing. */
const MIN_CHUNK = 16;
const MAX_CHUNK = 1024;

/** `"seq":N,` — what the stored text lacks compared with the entry's serialised form. */
const seqBytes = (seq: number) => 7 + String(seq).length;

/** A row of the capped tail query: the entry is null where it did not fit the byte cap. */
interface CappedTailRow {
  seq: string;
  size: number;
  entry: Omit<TranscriptEntry, "seq"> | null;
}

interface EntryRow {
  seq: string;
  bytes: number;
  entry: Omit<TranscriptEntry, "seq"> | null;
}

/** The entry with its seq back in second place, so it serialises exactly as it was appended. */
function withSeq(stored: Omit<TranscriptEntry, "seq">, seq: number): TranscriptEntry {
  const { type, ...rest } = stored;
  return { type, seq, ...rest } as TranscriptEntry;
}

/** The serialised entry without `"seq":N,` (seq is a column, assigned by the database). */
function withoutSeq(entry: TranscriptEntry): string {
  const { seq: _seq, ...rest } = entry;
  return JSON.stringify(rest);
}

/**
 * Appends entries (values: sessionId, count, sizes, texts — see `appendValues`) in one statement,
 * so one transaction: the counter on the transcript row is raised (its row lock orders concurrent
 * appends, from any instance) and the entries are inserted with the seqs it hands out. A failed
 * statement leaves no gap: the counter rolls back with it. No row comes back when there is no live
 * transcript.
 */
export function appendSql(q: (table: string) => string): string {
  return `WITH bump AS (
      UPDATE ${q("transcripts")} SET last_seq = last_seq + $2::bigint
      WHERE session_id = $1 AND archived_at IS NULL
      RETURNING id, last_seq - $2::bigint AS base
    )
    INSERT INTO ${q("transcript_entries")} (transcript_id, seq, bytes, entry)
    SELECT bump.id, bump.base + u.ord, u.bytes, u.entry
    FROM bump, unnest($3::int[], $4::json[]) WITH ORDINALITY AS u(bytes, entry, ord)
    RETURNING seq`;
}

/**
 * `appendSql` for several transcripts in one statement (values: see `appendManyValues`), each
 * transcript's counter raised by its own count. The rows are locked in id order first, so two such
 * statements (two instances) never wait on each other in a cycle. Rows come back as
 * (session_id, seq); none for a sessionId without a live transcript.
 */
export function appendManySql(q: (table: string) => string): string {
  return `WITH req AS (
      SELECT * FROM unnest($1::uuid[], $2::bigint[]) AS r(session_id, n)
    ), locked AS MATERIALIZED (
      SELECT t.id, t.session_id FROM ${q("transcripts")} t JOIN req ON req.session_id = t.session_id
      WHERE t.archived_at IS NULL ORDER BY t.id FOR UPDATE OF t
    ), bump AS (
      UPDATE ${q("transcripts")} t SET last_seq = t.last_seq + req.n
      FROM locked JOIN req ON req.session_id = locked.session_id
      WHERE t.id = locked.id
      RETURNING t.id, t.session_id, t.last_seq - req.n AS base
    ), ins AS (
      INSERT INTO ${q("transcript_entries")} (transcript_id, seq, bytes, entry)
      SELECT bump.id, bump.base + u.ord, u.bytes, u.entry
      FROM bump JOIN unnest($3::uuid[], $4::int[], $5::json[], $6::bigint[]) AS u(session_id, bytes, entry, ord)
        ON u.session_id = bump.session_id
      RETURNING transcript_id, seq
    )
    SELECT bump.session_id::text AS session_id, ins.seq FROM ins JOIN bump ON bump.id = ins.transcript_id`;
}

/** The parameters of `appendManySql` for the appends of distinct sessionIds. */
export function appendManyValues(
  appends: readonly { sessionId: string; entries: readonly TranscriptEntry[] }[],
): unknown[] {
  const sessionIds: string[] = [];
  const counts: number[] = [];
  const entrySessionIds: string[] = [];
  const sizes: number[] = [];
  const texts: string[] = [];
  const ords: number[] = [];
  for (const { sessionId, entries } of appends) {
    sessionIds.push(sessionId);
    counts.push(entries.length);
    for (const [index, entry] of entries.entries()) {
      const text = withoutSeq(entry);
      entrySessionIds.push(sessionId);
      sizes.push(utf8ByteLength(text));
      texts.push(text);
      ords.push(index + 1);
    }
  }
  return [sessionIds, counts, entrySessionIds, sizes, texts, ords];
}

/** The parameters of `appendSql` for entries prepared by core (their seqs are replaced). */
export function appendValues(sessionId: string, entries: readonly TranscriptEntry[]): unknown[] {
  const texts = entries.map(withoutSeq);
  return [sessionId, texts.length, texts.map(utf8ByteLength), texts];
}

/** The appended entries with the seqs the database gave them. */
export function withAssignedSeqs(
  entries: readonly TranscriptEntry[],
  seqs: readonly { seq: string }[],
): TranscriptEntry[] {
  const base = Math.min(...seqs.map((row) => toNumber(row.seq))) - 1;
  return entries.map((entry, index) => ({ ...entry, seq: base + index + 1 }));
}

/** `inOrder` orders writes per sessionId (shared with the taint-rise commit). */
export function createTranscriptStore(
  db: Db,
  q: (table: string) => string,
  schema: string,
  inOrder: KeyedSerializer,
  maxEntryBytes = DEFAULT_MAX_ENTRY_BYTES,
): TranscriptStore {
  const transcripts = q("transcripts");
  const entriesTable = q("transcript_entries");
  // The newest entries before $2 (at most $3) with each one's stored size and the running total:
  // an entry's JSON is fetched only while the total fits in $4 bytes (the newest one always), so a
  // byte-capped page decides from the (seq, bytes) index which entries it can keep.
  const cappedTailOf = (transcriptId: string) => `SELECT t.seq, t.size,
      CASE WHEN t.running <= $4 OR t.rn = 1 THEN
        (SELECT e.entry FROM ${entriesTable} e WHERE e.transcript_id = ${transcriptId} AND e.seq = t.seq)
      END AS entry
    FROM (
      SELECT s.seq, s.size,
        sum(s.size) OVER (ORDER BY s.seq DESC ROWS UNBOUNDED PRECEDING) AS running,
        row_number() OVER (ORDER BY s.seq DESC) AS rn
      FROM (
        SELECT seq, bytes + 7 + length(seq::text) AS size FROM ${entriesTable}
        WHERE transcript_id = ${transcriptId} AND seq < $2 ORDER BY seq DESC LIMIT $3
      ) s
    ) t
    ORDER BY t.seq DESC`;
  const cappedTail = cappedTailOf("$1");
  // The same for a session's live transcript, found in the same statement ($1: its sessionId): no
  // row when there is none, one row with a null seq when it has no entry before $2.
  const liveCappedTail = `SELECT tr.id AS transcript_id, x.seq, x.size, x.entry
    FROM (SELECT id FROM ${transcripts} WHERE session_id = $1 AND archived_at IS NULL) tr
    LEFT JOIN LATERAL (${cappedTailOf("tr.id")}) x ON true
    ORDER BY x.seq DESC NULLS LAST`;

  // Appends to different transcripts that arrive while one is in flight go in one statement (one
  // commit); the store's per-sessionId order keeps one append per transcript in flight.
  type Append = { sessionId: string; entries: readonly TranscriptEntry[] };
  const appendOne = async ({ sessionId, entries }: Append) =>
    (
      await db.query<{ seq: string }>(
        `appending to transcript ${sessionId}`,
        appendSql(q),
        appendValues(sessionId, entries),
      )
    ).rows;
  const appends = new GroupedWrites<Append, { seq: string }[]>(async (items) => {
    if (items.length === 1) return [await appendOne(items[0]!)];
    const found = await db.query<{ session_id: string; seq: string }>(
      `appending to ${items.length} transcripts`,
      appendManySql(q),
      appendManyValues(items),
    );
    const bySession = new Map<string, { seq: string }[]>();
    for (const row of found.rows) {
      const seqs = bySession.get(row.session_id) ?? [];
      seqs.push({ seq: row.seq });
      bySession.set(row.session_id, seqs);
    }
    return items.map((item) => bySession.get(item.sessionId) ?? []);
  }, appendOne);

  /** The live transcript's id and last seq; NOT_FOUND when there is none. */
  const live = async (id: string, action: string): Promise<{ id: string; lastSeq: number }> => {
    const found = await db.read<{ id: string; last_seq: string }>(
      action,
      `SELECT id, last_seq FROM ${transcripts} WHERE session_id = $1 AND archived_at IS NULL`,
      [id],
    );
    const hit = found.rows[0];
    if (!hit) throw new SwitchboardError("NOT_FOUND", `no transcript for sessionId ${id}`);
    return { id: hit.id, lastSeq: toNumber(hit.last_seq) };
  };

  /**
   * The first capped step of a read by sessionId: the live transcript is looked up in the same
   * statement (a run's history: one round trip). NOT_FOUND when the session has none.
   */
  async function liveCapped(
    sessionId: string,
    before: number,
    limit: number,
    maxBytes: number,
    action: string,
  ): Promise<{ transcriptId: string; rows: CappedTailRow[] }> {
    const found = await db.read<
      (CappedTailRow | { seq: null; size: null; entry: null }) & { transcript_id: string }
    >(action, liveCappedTail, [sessionId, before, limit, maxBytes]);
    if (found.rows.length === 0)
      throw new SwitchboardError("NOT_FOUND", `no transcript for sessionId ${sessionId}`);
    return {
      transcriptId: found.rows[0]!.transcript_id,
      rows: found.rows.filter((row): row is CappedTailRow & { transcript_id: string } => row.seq !== null),
    };
  }

  /**
   * A filtered read under a byte cap. Each step reads a chunk of (seq, size) from the index and, in
   * the same statement, the entries that fit in the bytes still free even if every one of them were
   * kept (the usual case: one statement). Entries past that are fetched in groups no bigger than
   * the bytes still free (at least one entry), since no more than that can be kept: a page next to
   * huge entries fetches one of them, not a chunk of them. The first step finds the session's live
   * transcript in its own statement (`liveCapped`).
   */
  async function budgetedScan(
    sessionId: string,
    before: number,
    limit: number,
    maxBytes: number,
    collector: TailCollector,
    action: string,
  ): Promise<TranscriptReadResult> {
    let kept = 0;
    // Filters usually drop some entries (tool results, events): start with room for that.
    let chunk = Math.min(Math.max(limit * 2, MIN_CHUNK), MAX_CHUNK);
    let cursor = before;
    let transcriptId: string | undefined;
    for (;;) {
      let rows: CappedTailRow[];
      if (transcriptId === undefined) {
        ({ transcriptId, rows } = await liveCapped(sessionId, cursor, chunk, maxBytes - kept, action));
      } else {
        const step = await db.read<CappedTailRow>(action, cappedTail, [
          transcriptId,
          cursor,
          chunk,
          maxBytes - kept,
        ]);
        rows = step.rows;
      }
      let next = 0;
      while (next < rows.length) {
        if (rows[next]!.entry === null) {
          const free = maxBytes - kept;
          let end = next + 1;
          let bytes = rows[next]!.size;
          while (end < rows.length && rows[end]!.entry === null && bytes + rows[end]!.size <= free)
            bytes += rows[end++]!.size;
          const found = await db.read<{ seq: string; entry: Omit<TranscriptEntry, "seq"> }>(
            action,
            `SELECT seq, entry FROM ${entriesTable}
             WHERE transcript_id = $1 AND seq <= $2 AND seq >= $3 ORDER BY seq DESC`,
            [transcriptId, rows[next]!.seq, rows[end - 1]!.seq],
          );
          found.rows.forEach((row, index) => {
            rows[next + index]!.entry = row.entry;
          });
        }
        const row = rows[next]!;
        const seq = toNumber(row.seq);
        const countBefore = collector.count;
        if (!collector.offer(withSeq(row.entry!, seq), row.size)) return collector.result(false);
        if (collector.count > countBefore) kept += row.size;
        next++;
      }
      if (rows.length < chunk) return collector.result(true);
      cursor = toNumber(rows.at(-1)!.seq);
      chunk = Math.min(chunk * 2, MAX_CHUNK);
    }
  }

  return {
    async create(input) {
      const header = buildTranscriptHeader(input);
      const action = `creating transcript ${header.sessionId}`;
      const inserted = await inOrder.run(header.sessionId, () =>
        db.query(
          action,
          `INSERT INTO ${transcripts} (session_id, key, created_at) VALUES ($1, $2, $3)
         ON CONFLICT (session_id) WHERE archived_at IS NULL DO NOTHING`,
          [header.sessionId, header.key, header.createdAt],
        ),
      );
      if ((inserted.rowCount ?? 0) > 0) return;
      const existing = await db.read<{ key: string }>(
        action,
        `SELECT key FROM ${transcripts} WHERE session_id = $1 AND archived_at IS NULL`,
        [header.sessionId],
      );
      const key = existing.rows[0]?.key;
      if (key !== undefined && key !== header.key) {
        throw new SwitchboardError(
          "CONFLICT",
          `transcript ${header.sessionId} already exists for key ${key}`,
        );
      }
    },

    async append(sessionId, inputs) {
      const id = parseSessionId(sessionId);
      // Validate (and fill ids and timestamps) before touching the database: one bad entry and
      // nothing is written. The seqs are the database's, assigned below.
      const prepared = prepareTranscriptAppend(inputs, { lastSeq: 0, maxEntryBytes });
      const action = `appending to transcript ${id}`;
      if (prepared.entries.length === 0) {
        await live(id, action);
        return [];
      }
      const seqs = await inOrder.run(id, () => appends.write({ sessionId: id, entries: prepared.entries }));
      if (seqs.length === 0) throw new SwitchboardError("NOT_FOUND", `no transcript for sessionId ${id}`);
      return withAssignedSeqs(prepared.entries, seqs);
    },

    async read(sessionId, options): Promise<TranscriptReadResult> {
      const id = parseSessionId(sessionId);
      const normalised = normaliseReadOptions(options);
      const action = `reading transcript ${id}`;
      const collector = new TailCollector(normalised);
      const before = normalised.before ?? NO_BEFORE;

      if (normalised.filter === undefined && normalised.maxBytes !== undefined) {
        // A byte cap without a filter is decided from the index (seq, bytes): entries that do not
        // fit are never fetched, so a page of small entries next to a huge one costs the small ones.
        const { rows } = await liveCapped(id, before, normalised.limit, normalised.maxBytes, action);
        let stopped = false;
        for (const row of rows) {
          const seq = toNumber(row.seq);
          if (row.entry === null) {
            // Past the byte cap: the collector stops here without keeping it.
            if (collector.offer({ seq } as TranscriptEntry, row.size)) {
              throw new SwitchboardError(
                "INTERNAL",
                `transcript ${id}: entry ${seq} was needed but not fetched`,
              );
            }
            stopped = true;
            break;
          }
          if (!collector.offer(withSeq(row.entry, seq), row.size)) {
            stopped = true;
            break;
          }
        }
        return collector.result(!stopped && rows.length < normalised.limit);
      }

      if (normalised.filter !== undefined && normalised.maxBytes !== undefined) {
        return budgetedScan(id, before, normalised.limit, normalised.maxBytes, collector, action);
      }
      const transcript = await live(id, action);

      // Newest first, in steps: without a filter one step of `limit` rows; with one, steps grow
      // until the filter has kept `limit` entries or the transcript's start is reached.
      let chunk =
        normalised.filter === undefined
          ? normalised.limit
          : Math.min(Math.max(normalised.limit, MIN_CHUNK), MAX_CHUNK);
      let cursor = before;
      for (;;) {
        const found = await db.read<EntryRow>(
          action,
          `SELECT seq, bytes, entry FROM ${entriesTable}
           WHERE transcript_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`,
          [transcript.id, cursor, chunk],
        );
        for (const row of found.rows) {
          const seq = toNumber(row.seq);
          if (!collector.offer(withSeq(row.entry!, seq), row.bytes + seqBytes(seq)))
            return collector.result(false);
        }
        if (found.rows.length < chunk) return collector.result(true);
        cursor = toNumber(found.rows.at(-1)!.seq);
        chunk = Math.min(chunk * 2, MAX_CHUNK);
      }
    },

    async lastSeq(sessionId) {
      const id = parseSessionId(sessionId);
      return (await live(id, `reading transcript ${id}`)).lastSeq;
    },

    async exists(sessionId) {
      const id = parseSessionId(sessionId);
      const found = await db.read(
        `reading transcript ${id}`,
        `SELECT 1 FROM ${transcripts} WHERE session_id = $1 AND archived_at IS NULL`,
        [id],
      );
      return (found.rowCount ?? 0) > 0;
    },

    async archive(sessionId, reason) {
      const id = parseSessionId(sessionId);
      await inOrder.run(id, () =>
        db.query(
          `archiving transcript ${id}`,
          `UPDATE ${transcripts} SET archived_at = $3, archive_reason = $2
         WHERE session_id = $1 AND archived_at IS NULL`,
          [id, reason, Date.now()],
        ),
      );
    },

    async pruneArchives(options) {
      checkPruneOptions(options, "archivedBefore", options.archivedBefore);
      const gone = await db.query<{ count: string }>(
        "pruning archived transcripts",
        `WITH doomed AS (
           SELECT id FROM ${transcripts} WHERE archived_at IS NOT NULL AND archived_at < $1
           ORDER BY archived_at, id LIMIT $2
           FOR UPDATE SKIP LOCKED
         ), gone AS (DELETE FROM ${transcripts} WHERE id IN (SELECT id FROM doomed) RETURNING id),
         erased AS (DELETE FROM ${entriesTable} WHERE transcript_id IN (SELECT id FROM gone))
         SELECT count(*) AS count FROM gone`,
        [options.archivedBefore, options.limit],
      );
      return toNumber(gone.rows[0]?.count);
    },

    async remove(sessionId) {
      const id = parseSessionId(sessionId);
      await inOrder.run(id, () =>
        db.query(
          `removing transcript ${id}`,
          `WITH gone AS (
           DELETE FROM ${transcripts} WHERE session_id = $1 AND archived_at IS NULL RETURNING id
         )
         DELETE FROM ${entriesTable} WHERE transcript_id IN (SELECT id FROM gone)`,
          [id],
        ),
      );
    },

    locate(sessionId) {
      return `postgres:${schema}.transcripts/${parseSessionId(sessionId)}`;
    },
  };
}
