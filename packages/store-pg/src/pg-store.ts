import {
  invalidRequestFromZod,
  type Logger,
  PostgresSchemaNameSchema,
  PostgresUrlSchema,
  type Store,
  type StoreHealth,
  silentLogger,
} from "@switchboard/core";
import pg from "pg";
import { z } from "zod";
import { createArchiveIdle } from "./archive-idle";
import { createAuditLog } from "./audit";
import { Db } from "./db";
import { toStoreError } from "./errors";
import { createMetaStore } from "./meta";
import { migrate, quoteIdent, SCHEMA_VERSION } from "./migrations";
import { connectionConfig, openPool } from "./pool";
import { createRunRegistry } from "./runs";
import { KeyedSerializer } from "./serial";
import { createSessionIndex } from "./sessions";
import { createTaintRiseCommit } from "./taint-rise";
import { createTranscriptStore } from "./transcripts";
import { describeTarget, passwordOf, redactUrl } from "./url";

export const PostgresStoreOptionsSchema = z.strictObject({
  /** `postgres://user:password@host:port/database`; the password never appears in logs or errors. */
  url: PostgresUrlSchema,
  /** The schema holding every table; created and migrated at open. */
  schema: PostgresSchemaNameSchema.default("switchboard"),
  pool: z
    .strictObject({ max: z.number().int().min(1, { error: "must be at least 1" }).max(1000).default(10) })
    .prefault({}),
  /** How long to wait for a connection before failing with UNAVAILABLE. */
  connectTimeoutMs: z.number().int().positive().default(5000),
  /** How long one statement may take before it fails with UNAVAILABLE (a hung server or network). */
  statementTimeoutMs: z.number().int().positive().default(30_000),
  /** `application_name` of the connections (what `pg_stat_activity` shows). */
  applicationName: z.string().min(1).max(63).default("switchboard"),
  /** Largest serialised transcript entry accepted (default: core's limit, 1 MiB + envelope). */
  maxEntryBytes: z.number().int().positive().optional(),
  logger: z.custom<Logger>((value) => typeof value === "object" && value !== null).optional(),
});
export type PostgresStoreOptions = z.input<typeof PostgresStoreOptionsSchema>;

export interface PostgresStore extends Store {
  /** The schema this store works in. */
  readonly schema: string;
  /** The schema version found at open (0: created by this open) and the one it runs at now. */
  readonly migration: { from: number; to: number; searchIndex: boolean };
}

/**
 * Opens (creating or migrating) the Switchboard schema in a PostgreSQL database and returns core's
 * `Store` over it. Several stores, in one process or many, may open the same schema: compare-and-
 * set versions, unique idempotency keys and per-transcript counters hold across them.
 */
export async function openPostgresStore(input: PostgresStoreOptions): Promise<PostgresStore> {
  const parsed = PostgresStoreOptionsSchema.safeParse(input);
  if (!parsed.success) throw invalidRequestFromZod(parsed.error, "store");
  const options = parsed.data;
  const logger = (options.logger ?? silentLogger).child({ component: "store-pg", schema: options.schema });
  const target = describeTarget(options.url);
  const where = { target, password: passwordOf(options.url) };

  const settings = {
    url: options.url,
    max: options.pool.max,
    connectTimeoutMs: options.connectTimeoutMs,
    statementTimeoutMs: options.statementTimeoutMs,
    applicationName: options.applicationName,
  };
  const pool = openPool(settings, where, logger);
  const db = new Db(pool, where, logger);

  // Migrations run on a connection of their own, without the statement timeouts: building an
  // index on a large table may take longer than any request should.
  let migration: PostgresStore["migration"];
  try {
    const client = new pg.Client(connectionConfig(settings));
    client.on("error", () => undefined);
    try {
      await client.connect();
    } catch (error) {
      throw toStoreError(error, {
        ...where,
        action: `connecting to open schema ${options.schema}`,
        hint: "check that PostgreSQL runs there and that the store URL is right",
      });
    }
    try {
      migration = await migrate(client, options.schema, logger);
    } catch (error) {
      throw toStoreError(error, { ...where, action: `migrating schema ${options.schema}` });
    } finally {
      await client.end().catch(() => undefined);
    }
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw error;
  }
  logger.info(
    {
      url: redactUrl(options.url),
      version: SCHEMA_VERSION,
      from: migration.from,
      searchIndex: migration.searchIndex,
    },
    "PostgreSQL store open",
  );

  const schemaName = quoteIdent(options.schema);
  const q = (table: string) => `${schemaName}.${table}`;
  // One instance applies its writes to a row in call order (see serial.ts); the taint-rise commit
  // takes its place in the same queues.
  const sessionOrder = new KeyedSerializer();
  const transcriptOrder = new KeyedSerializer();
  const audit = createAuditLog(db, q);
  const runOrder = new KeyedSerializer();
  const metaOrder = new KeyedSerializer();
  return {
    schema: options.schema,
    migration,
    sessions: createSessionIndex(db, q, sessionOrder),
    transcripts: createTranscriptStore(db, q, options.schema, transcriptOrder, options.maxEntryBytes),
    runs: createRunRegistry(db, q, runOrder),
    audit: audit.store,
    meta: createMetaStore(db, q, metaOrder),
    commitTaintRise: createTaintRiseCommit(
      db,
      q,
      { sessions: sessionOrder, transcripts: transcriptOrder, audit },
      options.maxEntryBytes,
    ),
    archiveIdleSession: createArchiveIdle(db, q, sessionOrder),
    async health(): Promise<StoreHealth> {
      if (db.isClosed)
        return {
          ok: false,
          degraded: { database: { cause: "store is closed", since: new Date().toISOString() } },
        };
      try {
        await db.query("checking health", "SELECT 1");
        return { ok: true };
      } catch (error) {
        const fault = db.currentFault();
        return {
          ok: false,
          degraded: {
            database: fault ?? { cause: (error as Error).message, since: new Date().toISOString() },
          },
        };
      }
    },
    async close() {
      // Writes already started finish (in their call order) before the connections go.
      if (!db.isClosed) {
        await Promise.all([
          sessionOrder.idle(),
          transcriptOrder.idle(),
          audit.idle(),
          runOrder.idle(),
          metaOrder.idle(),
        ]);
      }
      await db.close();
    },
  };
}
