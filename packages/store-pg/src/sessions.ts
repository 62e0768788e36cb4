import {
  classifyKey,
  compileListVisibility,
  compileSessionFilter,
  keyRest,
  levelRank,
  parseSessionId,
  type SessionEntry,
  type SessionIndexStore,
  type SessionListOptions,
  type SessionListQuery,
  type SessionListResult,
  type SessionTouch,
  type SessionVisibility,
  validateSessionEntry,
  validateSessionTouch,
  type WriteOptions,
} from "@switchboard/core";
import { batchedRowReads } from "./batched-reads";
import type { Db } from "./db";
import { GroupedWrites } from "./grouped-writes";
import type { KeyedSerializer } from "./serial";
import { checkExpectedVersion, escapeLike, pgText, toNumber, versionConflict } from "./versions";

/**
 * The kind a key has whatever the gateway's `mainKey`: core's rules with a main key no real key can
 * have. A query's `main` kind is then `rest = mainKey` (or the internal `global` key) in SQL.
 */
const NO_MAIN_KEY = "\u0000";

/** The derived columns of a row, in the order of `COLUMNS`. */
export function sessionColumnValues(row: SessionEntry): unknown[] {
  return [
    row.key,
    row.sessionId,
    pgText(row.agentId),
    row.updatedAt,
    levelRank(row.taint),
    pgText(row.spawnedBy),
    pgText(row.label),
    row.archivedAt ?? null,
    pgText(keyRest(row.key)),
    classifyKey(row.key, { mainKey: NO_MAIN_KEY, ...(row.chatType ? { chatType: row.chatType } : {}) }),
    pgText(row.key.toLowerCase()),
    pgText(row.displayName?.toLowerCase()),
    pgText(row.label?.toLowerCase()),
    JSON.stringify(row),
  ];
}

const COLUMNS = [
  "key",
  "session_id",
  "agent_id",
  "updated_at",
  "taint_rank",
  "spawned_by",
  "label",
  "archived_at",
  "rest",
  "kind_base",
  "key_lc",
  "name_lc",
  "label_lc",
  "row",
];
const PLACEHOLDERS = COLUMNS.map((_, index) => `$${index + 1}`).join(", ");
const UPDATES = COLUMNS.slice(1)
  .map((column) => `${column} = EXCLUDED.${column}`)
  .join(", ");
/** `unnest` over one array parameter per column, typed as the column. */
const COLUMN_ARRAYS = [
  "text",
  "uuid",
  "text",
  "bigint",
  "smallint",
  "text",
  "text",
  "bigint",
  "text",
  "text",
  "text",
  "text",
  "text",
  "json",
]
  .map((type, index) => `$${index + 1}::${type}[]`)
  .join(", ");
const SETS = COLUMNS.slice(1)
  .map((column, index) => `${column} = $${index + 2}`)
  .join(", ");

/** Collects positional parameters while a statement is built. */
class Params {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

/**
 * Rows after a position in list order (`updatedAt` descending, then key). The plain bound on
 * `updated_at` lets the index scan start at the position instead of filtering every newer row.
 */
function afterPosition(position: { updatedAt: number; key: string }, params: Params): string {
  if (!Number.isInteger(position.updatedAt))
    return `updated_at < ${params.add(Math.ceil(position.updatedAt))}`;
  const at = params.add(position.updatedAt);
  return `updated_at <= ${at} AND (updated_at < ${at} OR key > ${params.add(position.key)})`;
}

/** The plain filters of a list as SQL conditions (the same rules as core's `compileSessionFilter`). */
function filterConditions(query: SessionListQuery, params: Params, q: (table: string) => string): string[] {
  const sessionsTable = q("sessions");
  const searchTable = q("session_search");
  const where: string[] = [];
  // Paging (`after`, newer in core than some builds of this package: read without its type).
  const after = (query as { after?: { updatedAt: number; key: string } }).after;
  if (after !== undefined) where.push(afterPosition(after, params));
  if (!query.includeArchived) where.push("archived_at IS NULL");
  if (query.agentId !== undefined) where.push(`agent_id = ${params.add(pgText(query.agentId))}`);
  if (query.activeSince !== undefined)
    where.push(`updated_at >= ${params.add(Math.ceil(query.activeSince))}`);
  if (query.spawnedBy !== undefined) where.push(`spawned_by = ${params.add(pgText(query.spawnedBy))}`);
  if (query.label !== undefined) where.push(`label = ${params.add(pgText(query.label))}`);
  if (query.search !== undefined && query.search !== "") {
    const pattern = params.add(`%${escapeLike(pgText(query.search.toLowerCase()))}%`);
    // The planner either walks the recency order probing each row's search text (a common term) or
    // starts from the trigram index on session_search (a rare one).
    where.push(
      `EXISTS (SELECT 1 FROM ${searchTable} s WHERE s.key = ${sessionsTable}.key AND (s.key_lc LIKE ${pattern} OR s.name_lc LIKE ${pattern} OR s.label_lc LIKE ${pattern}))`,
    );
  }
  if (query.kinds !== undefined) {
    const isMain = `(key = 'global' OR rest = ${params.add(pgText(query.mainKey ?? "main"))})`;
    const others = query.kinds.filter((kind) => kind !== "main");
    const any: string[] = [];
    if (query.kinds.includes("main")) any.push(isMain);
    if (others.length > 0) any.push(`(kind_base = ANY(${params.add(others)}::text[]) AND NOT ${isMain})`);
    where.push(any.length === 0 ? "false" : `(${any.join(" OR ")})`);
  }
  return where;
}

/** An agent-id glob (`*`, `?`, case-insensitive, trimmed) as a LIKE pattern over `lower(agent_id)`. */
function globToLike(pattern: string): string {
  let out = "";
  for (const char of pattern.trim().toLowerCase()) {
    if (char === "*") out += "%";
    else if (char === "?") out += "_";
    else out += escapeLike(char);
  }
  return out;
}

/** What the caller may see, as one SQL condition (see core's `compileSessionVisibility`). */
function visibilityCondition(visibility: SessionVisibility, params: Params): string {
  const self = params.add(pgText(visibility.selfKey));
  const parts = [`taint_rank <= ${params.add(levelRank(visibility.maxTaint))}`];
  const { agents } = visibility;
  if (agents !== "all") {
    const patterns = agents.map(globToLike);
    if (patterns.length === 0) parts.push("false");
    else if (!patterns.includes("%")) parts.push(`lower(agent_id) LIKE ANY(${params.add(patterns)}::text[])`);
  }
  if (visibility.sandboxed) parts.push(`spawned_by = ${self}`);
  return `(key = ${self} OR (${parts.join(" AND ")}))`;
}

const ORDER = "ORDER BY updated_at DESC, key";

/** Insert or replace a whole row (values: `sessionColumnValues`), returning its new version. */
export function sessionUpsertSql(q: (table: string) => string): string {
  const version = `nextval('${q("row_versions").replaceAll("'", "''")}')`;
  return `INSERT INTO ${q("sessions")} (${COLUMNS.join(", ")}, version) VALUES (${PLACEHOLDERS}, ${version})
    ON CONFLICT (key) DO UPDATE SET ${UPDATES}, version = ${version} RETURNING version`;
}

/**
 * Replace a whole row if its version is still the one read (values: `sessionColumnValues`, then the
 * expected version); no row back means another write came first.
 */
export function sessionUpdateIfSql(q: (table: string) => string): string {
  const version = `nextval('${q("row_versions").replaceAll("'", "''")}')`;
  return `UPDATE ${q("sessions")} SET ${SETS}, version = ${version}
    WHERE key = $1 AND version = $${COLUMNS.length + 1} RETURNING version`;
}

/** `inOrder` orders writes per key (shared with the taint-rise commit). */
export function createSessionIndex(
  db: Db,
  q: (table: string) => string,
  inOrder: KeyedSerializer,
): SessionIndexStore {
  const table = q("sessions");
  const versionOf = async (key: string): Promise<number> => {
    const found = await db.read<{ version: string }>(
      "reading a session's version",
      `SELECT version FROM ${table} WHERE key = $1`,
      [key],
    );
    return toNumber(found.rows[0]?.version);
  };

  // A send reads its sessions' rows a dozen times or more: under load those reads share statements.
  const reads = batchedRowReads<SessionEntry>(db, "reading sessions", table, "key");

  // Unconditional writes (the row "touch" after each append, mostly) of different keys that arrive
  // while one is in flight go in one statement: one commit for the group instead of one per row.
  const upsertMany = `INSERT INTO ${table} (${COLUMNS.join(", ")}, version)
    SELECT *, nextval('${q("row_versions").replaceAll("'", "''")}') FROM unnest(${COLUMN_ARRAYS})
    ON CONFLICT (key) DO UPDATE SET ${UPDATES}, version = nextval('${q("row_versions").replaceAll("'", "''")}')
    RETURNING key, version`;
  const upserts = new GroupedWrites<SessionEntry, number>(
    async (rows) => {
      if (rows.length === 1) return [await writeOne(rows[0]!, undefined)];
      const columns: unknown[][] = COLUMNS.map(() => []);
      // Rows in key order (the upsert takes them in array order): two groups of two instances lock
      // the rows they share in the same order instead of waiting on each other until PostgreSQL's
      // deadlock check aborts one (which would then be retried row by row).
      for (const row of [...rows].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)))
        for (const [index, value] of sessionColumnValues(row).entries()) columns[index]!.push(value);
      const written = await db.query<{ key: string; version: string }>(
        `writing ${rows.length} sessions`,
        upsertMany,
        columns,
      );
      const versions = new Map(written.rows.map((hit) => [hit.key, toNumber(hit.version)]));
      return rows.map((row) => versions.get(row.key)!);
    },
    (row) => writeOne(row, undefined),
  );

  // Touches are relative (updatedAt rises, tokens add), so a group of them is one UPDATE with no
  // read first; the row's JSON is changed in SQL. A group holds a key once (per-key order).
  const touchMany = `UPDATE ${table} AS s SET
      updated_at = greatest(s.updated_at, t.at),
      row = (CASE WHEN t.add > 0
        THEN jsonb_set(s.row::jsonb, '{totalTokens}', to_jsonb(coalesce((s.row->>'totalTokens')::bigint, 0) + t.add))
        ELSE s.row::jsonb END || jsonb_build_object('updatedAt', greatest(s.updated_at, t.at)))::json,
      version = nextval('${q("row_versions").replaceAll("'", "''")}')
    FROM unnest($1::text[], $2::uuid[], $3::bigint[], $4::bigint[]) AS t(key, sid, at, add)
    WHERE s.key = t.key AND s.session_id = t.sid
    RETURNING s.key`;
  const touchRows = async (items: Array<{ key: string; touch: SessionTouch }>): Promise<boolean[]> => {
    const sorted = [...items].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const touched = await db.query<{ key: string }>(
      items.length === 1 ? `touching session ${items[0]!.key}` : `touching ${items.length} sessions`,
      touchMany,
      [
        sorted.map((item) => item.key),
        sorted.map((item) => item.touch.sessionId),
        sorted.map((item) => item.touch.at),
        sorted.map((item) => item.touch.addTokens ?? 0),
      ],
    );
    const hit = new Set(touched.rows.map((row) => row.key));
    return items.map((item) => hit.has(item.key));
  };
  const touches = new GroupedWrites<{ key: string; touch: SessionTouch }, boolean>(
    touchRows,
    async (item) => {
      const [result] = await touchRows([item]);
      return result!;
    },
  );

  return {
    async get(key) {
      // A key PostgreSQL refuses (NUL) fails alone, not the batch it would share.
      if (!key.includes("\u0000")) return reads.get(key);
      const found = await db.read<{ row: SessionEntry }>(
        "reading a session",
        `SELECT row FROM ${table} WHERE key = $1`,
        [key],
      );
      return found.rows[0]?.row;
    },
    async getVersioned(key) {
      const found = await db.read<{ row: SessionEntry; version: string }>(
        "reading a session",
        `SELECT row, version FROM ${table} WHERE key = $1`,
        [key],
      );
      const hit = found.rows[0];
      return hit ? { row: hit.row, version: toNumber(hit.version) } : undefined;
    },
    async keysForSessionId(sessionId) {
      const id = parseSessionId(sessionId);
      const found = await db.read<{ key: string }>(
        "finding sessions by sessionId",
        `SELECT key FROM ${table} WHERE session_id = $1 ORDER BY key`,
        [id],
      );
      return found.rows.map((row) => row.key);
    },
    async put(entry, options: WriteOptions = {}) {
      const row = validateSessionEntry(entry);
      const expected = options.expectedVersion;
      checkExpectedVersion(expected);
      return inOrder.run(row.key, () => writeRow(row, expected));
    },
    async touch(key, touch) {
      const valid = validateSessionTouch(touch);
      if (key.includes("\u0000")) return false;
      return inOrder.run(key, () => touches.write({ key, touch: valid }));
    },
    async delete(key, options: WriteOptions = {}) {
      const expected = options.expectedVersion;
      checkExpectedVersion(expected);
      return inOrder.run(key, () => deleteRow(key, expected));
    },
    async list(query: SessionListQuery, options: SessionListOptions = {}): Promise<SessionListResult> {
      return listRows(query, options);
    },
    async count() {
      // Kept exact by triggers (migration 2): one row, whatever the table's size.
      const found = await db.read<{ count: string }>(
        "counting sessions",
        `SELECT n AS count FROM ${q("session_count")}`,
      );
      return toNumber(found.rows[0]?.count);
    },
  };

  async function writeRow(row: SessionEntry, expected: number | undefined): Promise<number> {
    if (expected === undefined) return upserts.write(row);
    return writeOne(row, expected);
  }

  async function writeOne(row: SessionEntry, expected: number | undefined): Promise<number> {
    const values = sessionColumnValues(row);
    const action = `writing session ${row.key}`;
    const version = `nextval('${q("row_versions").replaceAll("'", "''")}')`;
    if (expected === undefined) {
      const written = await db.query<{ version: string }>(
        action,
        `INSERT INTO ${table} (${COLUMNS.join(", ")}, version) VALUES (${PLACEHOLDERS}, ${version})
           ON CONFLICT (key) DO UPDATE SET ${UPDATES}, version = ${version} RETURNING version`,
        values,
      );
      return toNumber(written.rows[0]?.version);
    }
    if (expected === 0) {
      const inserted = await db.query<{ version: string }>(
        action,
        `INSERT INTO ${table} (${COLUMNS.join(", ")}, version) VALUES (${PLACEHOLDERS}, ${version})
           ON CONFLICT (key) DO NOTHING RETURNING version`,
        values,
      );
      const hit = inserted.rows[0];
      if (hit) return toNumber(hit.version);
      throw versionConflict("session", row.key, 0, await versionOf(row.key));
    }
    const updated = await db.query<{ version: string }>(action, sessionUpdateIfSql(q), [...values, expected]);
    const hit = updated.rows[0];
    if (hit) return toNumber(hit.version);
    throw versionConflict("session", row.key, expected, await versionOf(row.key));
  }

  async function deleteRow(key: string, expected: number | undefined): Promise<boolean> {
    const action = `deleting session ${key}`;
    if (expected === undefined) {
      const gone = await db.query(action, `DELETE FROM ${table} WHERE key = $1`, [key]);
      return (gone.rowCount ?? 0) > 0;
    }
    const gone = await db.query(action, `DELETE FROM ${table} WHERE key = $1 AND version = $2`, [
      key,
      expected,
    ]);
    if ((gone.rowCount ?? 0) > 0) return true;
    const actual = await versionOf(key);
    if (actual === 0 && expected === 0) return false;
    throw versionConflict("session", key, expected, actual);
  }

  async function listRows(query: SessionListQuery, options: SessionListOptions): Promise<SessionListResult> {
    // Validation (and its error texts) comes from core, so every store refuses the same input.
    compileSessionFilter(query);
    compileListVisibility(options);
    const { visibility, residual } = options;
    const params = new Params();
    const where = filterConditions(query, params, q);
    const limit = query.limit;
    if (visibility === undefined) {
      const found = await db.read<{ row: SessionEntry }>(
        "listing sessions",
        `SELECT row FROM ${table} ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ${ORDER} LIMIT ${params.add(limit)}`,
        params.values,
      );
      return { entries: found.rows.map((hit) => hit.row), hidden: 0 };
    }

    const visible = visibilityCondition(visibility, params);
    const base = [...where];
    const baseValues = [...params.values];
    const entries: SessionEntry[] = [];
    let hidden = 0;
    let cursor: SessionEntry | undefined;
    // Pages of rows the data admits; the residual (user policy rules) may withhold some, and
    // then the next page continues after the last row seen.
    for (;;) {
      const page = new Params();
      page.values.push(...baseValues);
      const conditions = [...base, `(${visible}) IS TRUE`];
      if (cursor !== undefined) {
        conditions.push(afterPosition(cursor, page));
      }
      const want = limit - entries.length;
      const found = await db.read<{ row: SessionEntry }>(
        "listing sessions",
        `SELECT row FROM ${table} WHERE ${conditions.join(" AND ")} ${ORDER} LIMIT ${page.add(want)}`,
        page.values,
      );
      for (const { row } of found.rows) {
        if (entries.length >= limit) break;
        if (residual && row.key !== visibility.selfKey && !residual(row)) {
          hidden++;
          continue;
        }
        entries.push(row);
      }
      if (entries.length >= limit || found.rows.length < want) break;
      cursor = found.rows.at(-1)!.row;
    }

    // Rows the data withholds, among those the page went through: newer than the last row
    // returned, or every matching row when the page is not full.
    const counted = new Params();
    counted.values.push(...baseValues);
    const conditions = [...base, `(${visible}) IS NOT TRUE`];
    const last = entries.length >= limit ? entries.at(-1) : undefined;
    if (last !== undefined) {
      const at = counted.add(last.updatedAt);
      conditions.push(`updated_at >= ${at} AND (updated_at > ${at} OR key < ${counted.add(last.key)})`);
    }
    const withheld = await db.read<{ count: string }>(
      "counting hidden sessions",
      `SELECT count(*) AS count FROM ${table} WHERE ${conditions.join(" AND ")}`,
      counted.values,
    );
    hidden += toNumber(withheld.rows[0]?.count);
    return { entries, hidden };
  }
}
