import { type Logger, SwitchboardError } from "@switchboard/core";
import type pg from "pg";

/**
 * The schema, as numbered migrations. A migration is never edited once released: a change is a new
 * one. Names are qualified with the configured schema (`q`), so nothing depends on `search_path`.
 */
export interface Migration {
  version: number;
  name: string;
  statements: (q: (table: string) => string) => string[];
  /** Work beyond fixed SQL (values known only when it runs), in the same transaction. */
  run?: (client: pg.ClientBase, q: (table: string) => string) => Promise<unknown>;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "sessions, transcripts, runs, audit, meta",
    statements: (q) => [
      // One sequence for every row version: a version is never reused, even after a delete (no ABA).
      `CREATE SEQUENCE ${q("row_versions")}`,
      // The row itself is `row` (json keeps it byte for byte); the other columns are derived from it
      // on every write, for filters and indexes. Keys sort with "C" (code point order), as in JS.
      `CREATE TABLE ${q("sessions")} (
        key text COLLATE "C" PRIMARY KEY,
        session_id uuid NOT NULL,
        agent_id text NOT NULL,
        updated_at bigint NOT NULL,
        taint_rank smallint NOT NULL,
        spawned_by text COLLATE "C",
        label text COLLATE "C",
        archived_at bigint,
        rest text COLLATE "C" NOT NULL,
        kind_base text COLLATE "C" NOT NULL,
        key_lc text COLLATE "C" NOT NULL,
        name_lc text COLLATE "C",
        label_lc text COLLATE "C",
        version bigint NOT NULL,
        row json NOT NULL
      )`,
      `CREATE INDEX sessions_recent ON ${q("sessions")} (updated_at DESC, key)`,
      `CREATE INDEX sessions_agent_recent ON ${q("sessions")} (agent_id, updated_at DESC, key)`,
      `CREATE INDEX sessions_spawned_by_recent ON ${q("sessions")} (spawned_by, updated_at DESC, key)
        WHERE spawned_by IS NOT NULL`,
      `CREATE INDEX sessions_kind_recent ON ${q("sessions")} (kind_base, updated_at DESC, key)`,
      `CREATE INDEX sessions_rest ON ${q("sessions")} (rest)`,
      `CREATE INDEX sessions_session_id ON ${q("sessions")} (session_id)`,

      // Archived transcripts keep their rows; a sessionId has at most one live transcript.
      `CREATE TABLE ${q("transcripts")} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id uuid NOT NULL,
        key text NOT NULL,
        created_at bigint NOT NULL,
        last_seq bigint NOT NULL DEFAULT 0,
        archived_at bigint,
        archive_reason text
      )`,
      `CREATE UNIQUE INDEX transcripts_live ON ${q("transcripts")} (session_id) WHERE archived_at IS NULL`,
      `CREATE INDEX transcripts_archived ON ${q("transcripts")} (archived_at, id) WHERE archived_at IS NOT NULL`,
      // `entry` is the serialised entry without its seq; `bytes` its UTF-8 length (the full entry is
      // bytes + 7 + digits of seq). The primary key carries `bytes`, so a byte-capped tail read finds
      // where to stop from the index alone.
      `CREATE TABLE ${q("transcript_entries")} (
        transcript_id bigint NOT NULL,
        seq bigint NOT NULL,
        bytes integer NOT NULL,
        entry json NOT NULL,
        CONSTRAINT transcript_entries_pkey PRIMARY KEY (transcript_id, seq) INCLUDE (bytes)
      )`,

      `CREATE TABLE ${q("runs")} (
        run_id text COLLATE "C" PRIMARY KEY,
        idempotency_key text COLLATE "C",
        session_key text COLLATE "C" NOT NULL,
        status text NOT NULL,
        created_at bigint NOT NULL,
        ended_at bigint,
        pending_announce boolean NOT NULL,
        version bigint NOT NULL,
        row json NOT NULL,
        CONSTRAINT runs_idempotency_key UNIQUE (idempotency_key)
      )`,
      `CREATE INDEX runs_recent ON ${q("runs")} (created_at DESC, run_id)`,
      `CREATE INDEX runs_session_recent ON ${q("runs")} (session_key, created_at DESC, run_id)`,
      `CREATE INDEX runs_status_recent ON ${q("runs")} (status, created_at DESC, run_id)`,
      // Retention: ended runs oldest first (pending announces are never pruned).
      `CREATE INDEX runs_prunable ON ${q("runs")} (ended_at, run_id)
        WHERE ended_at IS NOT NULL AND status IN ('ok', 'error', 'timeout') AND NOT pending_announce`,
      `CREATE INDEX runs_pending_announce ON ${q("runs")} (created_at DESC, run_id) WHERE pending_announce`,

      `CREATE TABLE ${q("audit_records")} (idx bigint PRIMARY KEY, record json NOT NULL)`,
      // Values are stored as JSON strings, so any JS string (NUL included) round-trips.
      `CREATE TABLE ${q("meta")} (name text COLLATE "C" PRIMARY KEY, value json NOT NULL)`,
    ],
  },
  {
    version: 2,
    name: "exact session count kept by statement triggers",
    statements: (q) => [
      // `count()` was a scan of the whole table (a metrics scrape at 1M sessions). The count is
      // kept in one row instead, by statement-level triggers that see only rows really inserted or
      // deleted (an upsert that updates adds nothing), so a bulk load costs one update.
      `CREATE TABLE ${q("session_count")} (
        only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
        n bigint NOT NULL
      )`,
      `INSERT INTO ${q("session_count")} (n) SELECT count(*) FROM ${q("sessions")}`,
      `CREATE FUNCTION ${q("count_sessions")}() RETURNS trigger LANGUAGE plpgsql AS $fn$
       DECLARE delta bigint;
       BEGIN
         IF TG_OP = 'INSERT' THEN
           SELECT count(*) INTO delta FROM inserted_rows;
         ELSE
           SELECT -count(*) INTO delta FROM deleted_rows;
         END IF;
         -- No row lock for statements that changed nothing (every plain update of a session).
         IF delta <> 0 THEN
           UPDATE ${q("session_count")} SET n = n + delta;
         END IF;
         RETURN NULL;
       END
       $fn$`,
      `CREATE TRIGGER sessions_count_inserted AFTER INSERT ON ${q("sessions")}
        REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION ${q("count_sessions")}()`,
      `CREATE TRIGGER sessions_count_deleted AFTER DELETE ON ${q("sessions")}
        REFERENCING OLD TABLE AS deleted_rows FOR EACH STATEMENT EXECUTE FUNCTION ${q("count_sessions")}()`,
    ],
  },
  {
    version: 3,
    name: "search columns in a side table, so a session touch does not rewrite the trigram index",
    statements: (q) => [
      // Every append touches its session row (updatedAt), and an update of an indexed column
      // writes a new entry into every index of the table: the trigram index made that ~30% dearer.
      // The search text changes rarely, so it lives in a table of its own, kept by row triggers
      // that fire on an update only when the text changed.
      `CREATE TABLE ${q("session_search")} (
        key text COLLATE "C" PRIMARY KEY,
        key_lc text COLLATE "C" NOT NULL,
        name_lc text COLLATE "C",
        label_lc text COLLATE "C"
      )`,
      `INSERT INTO ${q("session_search")} (key, key_lc, name_lc, label_lc)
        SELECT key, key_lc, name_lc, label_lc FROM ${q("sessions")}`,
      `DROP INDEX IF EXISTS ${q("sessions_search")}`,
      `CREATE FUNCTION ${q("sync_session_search")}() RETURNS trigger LANGUAGE plpgsql AS $fn$
       BEGIN
         IF TG_OP = 'DELETE' THEN
           DELETE FROM ${q("session_search")} WHERE key = OLD.key;
         ELSE
           INSERT INTO ${q("session_search")} (key, key_lc, name_lc, label_lc)
             VALUES (NEW.key, NEW.key_lc, NEW.name_lc, NEW.label_lc)
             ON CONFLICT (key) DO UPDATE SET key_lc = EXCLUDED.key_lc, name_lc = EXCLUDED.name_lc,
               label_lc = EXCLUDED.label_lc;
         END IF;
         RETURN NULL;
       END
       $fn$`,
      `CREATE TRIGGER sessions_search_inserted AFTER INSERT ON ${q("sessions")}
        FOR EACH ROW EXECUTE FUNCTION ${q("sync_session_search")}()`,
      `CREATE TRIGGER sessions_search_updated AFTER UPDATE ON ${q("sessions")} FOR EACH ROW
        WHEN (OLD.name_lc IS DISTINCT FROM NEW.name_lc OR OLD.label_lc IS DISTINCT FROM NEW.label_lc
          OR OLD.key_lc IS DISTINCT FROM NEW.key_lc)
        EXECUTE FUNCTION ${q("sync_session_search")}()`,
      `CREATE TRIGGER sessions_search_deleted AFTER DELETE ON ${q("sessions")}
        FOR EACH ROW EXECUTE FUNCTION ${q("sync_session_search")}()`,
    ],
  },
];

/** The schema version this build writes and understands. */
export const SCHEMA_VERSION = MIGRATIONS.at(-1)!.version;

/** First key of the two-key advisory lock; the second is the schema name's hash. */
const MIGRATION_LOCK_CLASS = 0x5357_4244; // "SWBD"

export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

export interface MigrationResult {
  /** The version found (0: a new schema). */
  from: number;
  to: number;
  /** Whether the trigram index for `search` exists (it needs the pg_trgm extension). */
  searchIndex: boolean;
}

/**
 * Brings `schema` to `SCHEMA_VERSION`, one instance at a time (a session advisory lock, which the
 * server also releases if this connection dies). Each migration commits with its version row, so a
 * crash leaves the schema at a known version. A schema newer than this build is refused.
 */
export async function migrate(
  client: pg.ClientBase,
  schema: string,
  logger: Logger,
  /** Tests pass a prefix of `MIGRATIONS`, to build an older schema and upgrade it. */
  migrations: readonly Migration[] = MIGRATIONS,
): Promise<MigrationResult> {
  const result = await applyMigrations(
    client,
    schema,
    {
      table: "schema_migrations",
      migrations,
      supported: SCHEMA_VERSION,
      what: `PostgreSQL schema "${schema}"`,
    },
    (q) => ensureSearchIndex(client, schema, q, logger),
    (migration) =>
      logger.info({ schema, version: migration.version, name: migration.name }, "schema migrated"),
  );
  return { from: result.from, to: result.to, searchIndex: result.locked };
}

/**
 * One numbered list of migrations recorded in `table` of `schema` (the store's, and the coordination
 * tables'), applied under the one migration lock: each commits with its version row; a version newer
 * than `supported` is refused naming both. `whileLocked` runs before the lock is released.
 */
export async function applyMigrations<T>(
  client: pg.ClientBase,
  schema: string,
  options: { table: string; migrations: readonly Migration[]; supported: number; what: string },
  whileLocked: (q: (table: string) => string) => Promise<T>,
  applied?: (migration: Migration) => void,
): Promise<{ from: number; to: number; locked: T }> {
  const q = (table: string) => `${quoteIdent(schema)}.${table}`;
  const versions = q(options.table);
  await client.query("SELECT pg_advisory_lock($1, hashtext($2))", [MIGRATION_LOCK_CLASS, schema]);
  try {
    const exists = await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
    if (exists.rowCount === 0) await client.query(`CREATE SCHEMA ${quoteIdent(schema)}`);
    await client.query(`CREATE TABLE IF NOT EXISTS ${versions} (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
    const found = await client.query<{ version: number }>(
      `SELECT coalesce(max(version), 0)::int AS version FROM ${versions}`,
    );
    const from = found.rows[0]?.version ?? 0;
    if (from > options.supported) {
      throw new SwitchboardError(
        "UNAVAILABLE",
        `${options.what} is at version ${from}, newer than this Switchboard supports (${options.supported}); upgrade Switchboard or configure another schema`,
        { details: { schema, version: from, supported: options.supported } },
      );
    }
    for (const migration of options.migrations) {
      if (migration.version <= from) continue;
      await client.query("BEGIN");
      try {
        for (const statement of migration.statements(q)) await client.query(statement);
        await migration.run?.(client, q);
        await client.query(`INSERT INTO ${versions} (version, name) VALUES ($1, $2)`, [
          migration.version,
          migration.name,
        ]);
        await client.query("COMMIT");
      } catch (error) {
        await client.query("ROLLBACK").catch(() => undefined);
        throw error;
      }
      applied?.(migration);
    }
    const locked = await whileLocked(q);
    return { from, to: options.migrations.at(-1)?.version ?? from, locked };
  } finally {
    await client.query("SELECT pg_advisory_unlock($1, hashtext($2))", [MIGRATION_LOCK_CLASS, schema]);
  }
}

async function trigramSchema(client: pg.ClientBase): Promise<string | undefined> {
  const found = await client.query<{ schema: string }>(
    `SELECT n.nspname AS schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'pg_trgm'`,
  );
  return found.rows[0]?.schema;
}

/**
 * The trigram index that makes `search` (a substring match) cost what it finds. It needs the
 * pg_trgm extension (shipped with PostgreSQL, installable by a database owner); without it the
 * store works the same and `search` scans newest first. Not a numbered migration: it appears as
 * soon as the extension does, on the next start.
 */
async function ensureSearchIndex(
  client: pg.ClientBase,
  schema: string,
  q: (table: string) => string,
  logger: Logger,
): Promise<boolean> {
  let extension = await trigramSchema(client);
  if (extension === undefined) {
    try {
      await client.query("CREATE EXTENSION IF NOT EXISTS pg_trgm");
    } catch (error) {
      // No privilege, or another instance created it at the same moment: look again below.
      logger.debug({ error: (error as Error).message }, "could not create extension pg_trgm");
    }
    extension = await trigramSchema(client);
  }
  if (extension === undefined) {
    logger.warn(
      { schema },
      "pg_trgm is not installed: sessions.list search scans newest first instead of using an index (CREATE EXTENSION pg_trgm as a database owner to add it)",
    );
    return false;
  }
  // A schema migrated only part of the way (tests of upgrades) has no search table yet.
  const table = await client.query<{ found: string | null }>("SELECT to_regclass($1)::text AS found", [
    q("session_search"),
  ]);
  if (table.rows[0]?.found === null) return false;
  const ops = `${quoteIdent(extension)}.gin_trgm_ops`;
  await client.query(
    `CREATE INDEX IF NOT EXISTS session_search_trgm ON ${q("session_search")} USING gin (key_lc ${ops}, name_lc ${ops}, label_lc ${ops})`,
  );
  return true;
}
