import { randomUUID } from "node:crypto";
import {
  invalidRequestFromZod,
  type Logger,
  PostgresSchemaNameSchema,
  PostgresUrlSchema,
  type SwitchboardError,
  silentLogger,
} from "@switchboard/core";
import pg from "pg";
import { z } from "zod";
import { Db } from "../db";
import { toStoreError } from "../errors";
import { quoteIdent } from "../migrations";
import { connectionConfig, openPool } from "../pool";
import { describeTarget, passwordOf } from "../url";
import { type ChannelListener, openChannelListener } from "./listener";
import { ensureCoordinationSchema } from "./schema";

/** `application_name` of an instance's listener connection (at most 63 bytes, as the server keeps). */
export function listenerApplicationName(applicationName: string): string {
  return `${applicationName.slice(0, 63 - ":listen".length)}:listen`;
}

export const CoordinationOptionsSchema = z.strictObject({
  /** `postgres://user:password@host:port/database`; the password never appears in logs or errors. */
  url: PostgresUrlSchema,
  /** The store's schema: the coordination tables live beside the store's. */
  schema: PostgresSchemaNameSchema.default("switchboard"),
  /** This gateway instance, as other instances name it (e.g. in a lost run's error). Default: a UUID. */
  instanceId: z
    .string({ error: "must be a string" })
    .min(1, { error: "must not be empty" })
    .max(200, { error: "must be at most 200 characters" })
    .optional(),
  pool: z
    .strictObject({ max: z.number().int().min(1, { error: "must be at least 1" }).max(1000).default(4) })
    .prefault({}),
  connectTimeoutMs: z.number().int().positive().default(5000),
  statementTimeoutMs: z.number().int().positive().default(30_000),
  /**
   * The server ends a transaction of this pool left idle this long: a frozen instance (SIGSTOP, a
   * stalled VM) in the middle of a publish must not hold the cluster's event lock for ever.
   */
  idleInTransactionTimeoutMs: z.number().int().positive().default(5000),
  applicationName: z.string().min(1).max(63).default("switchboard-cluster"),
  logger: z.custom<Logger>((value) => typeof value === "object" && value !== null).optional(),
});
export type CoordinationOptions = z.input<typeof CoordinationOptionsSchema>;

/**
 * What every coordination component of one gateway instance shares: a pool of its own (so the
 * store's request traffic never starves a lease renewal), the store's error rules (`Db`: connection
 * loss is `UNAVAILABLE`), schema-qualified names and the instance's id.
 */
export interface Coordination {
  readonly db: Db;
  readonly schema: string;
  readonly instanceId: string;
  readonly logger: Logger;
  /** `"schema".table` */
  q(table: string): string;
  /** A fresh dedicated connection (session advisory locks, migrations); the caller ends it. */
  connect(purpose: string): Promise<pg.Client>;
  /**
   * The instance's one LISTEN connection, shared by every component that needs wake-ups (its
   * `application_name` is the pool's with `:listen` appended).
   */
  readonly listener: ChannelListener;
  /** Wraps a driver error like every other failure (UNAVAILABLE on connection loss). */
  fail(error: unknown, action: string): SwitchboardError;
  close(): Promise<void>;
}

/**
 * Opens the coordination layer of one gateway instance on the store's schema, creating the
 * coordination tables if missing (under the same advisory lock as the store's migrations).
 */
export async function openCoordination(input: CoordinationOptions): Promise<Coordination> {
  const parsed = CoordinationOptionsSchema.safeParse(input);
  if (!parsed.success) throw invalidRequestFromZod(parsed.error, "cluster");
  const options = parsed.data;
  const instanceId = options.instanceId ?? randomUUID();
  const logger = (options.logger ?? silentLogger).child({ component: "cluster", instanceId });
  const target = describeTarget(options.url);
  const where = { target, password: passwordOf(options.url) };
  const settings = {
    url: options.url,
    max: options.pool.max,
    connectTimeoutMs: options.connectTimeoutMs,
    statementTimeoutMs: options.statementTimeoutMs,
    idleInTransactionTimeoutMs: options.idleInTransactionTimeoutMs,
    applicationName: options.applicationName,
  };
  const pool = openPool(
    {
      ...settings,
      // The coordination's statements are a fixed set of key lookups and small CTEs. PostgreSQL's
      // default keeps re-planning a statement whose generic plan it estimates dearer than a custom
      // one: the lane claim (`claimNext`) was planned on every call, 0.3 ms of server CPU each, on
      // the path of every run handed from one instance to another.
      // Their queue tables churn (a row in and out per run) and autovacuum passes about once a
      // minute. A bitmap index scan never marks the dead entries it meets, so each search of the
      // run queue walked every run queued since the last vacuum (0.36 ms a search after 2 700
      // runs); a plain index scan marks them and the next search steps over them (0.03 ms).
      sessionSettings: { plan_cache_mode: "force_generic_plan", enable_bitmapscan: "off" },
    },
    where,
    logger,
  );
  const db = new Db(pool, where, logger);
  const schemaName = quoteIdent(options.schema);
  const q = (table: string) => `${schemaName}.${table}`;
  const fail = (error: unknown, action: string) => toStoreError(error, { ...where, action });
  const connect = async (purpose: string, applicationName = settings.applicationName): Promise<pg.Client> => {
    const client = new pg.Client(connectionConfig({ ...settings, applicationName }));
    // Errors of a dedicated connection are reported by its owner's `end`/`error` handling.
    client.on("error", () => undefined);
    try {
      await client.connect();
      return client;
    } catch (error) {
      await client.end().catch(() => undefined);
      throw fail(error, `connecting (${purpose})`);
    }
  };
  try {
    const client = await connect("creating the coordination tables");
    try {
      await ensureCoordinationSchema(client, options.schema);
    } catch (error) {
      throw fail(error, `creating the coordination tables in schema ${options.schema}`);
    } finally {
      await client.end().catch(() => undefined);
    }
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw error;
  }
  const listener = openChannelListener(
    () => connect("listening for notifications", listenerApplicationName(options.applicationName)),
    logger,
  );
  return {
    db,
    schema: options.schema,
    instanceId,
    logger,
    q,
    connect: (purpose) => connect(purpose),
    listener,
    fail,
    close: async () => {
      await listener.close();
      await db.close();
    },
  };
}
