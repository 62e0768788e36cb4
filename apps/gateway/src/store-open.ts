import { type Config, type Store, SwitchboardError } from "@switchboard/core";
import { openFileStore } from "@switchboard/store-fs";
import type { Logger } from "pino";

export interface StoreOpenOptions {
  dataDir: string;
  logger: Logger;
  /** `fsync` mode of the file store (tests may pass "none"). */
  fsync?: "always" | "none";
  /** Where `store.urlEnv` is looked up (default `process.env`). */
  env?: Record<string, string | undefined>;
}

/** The PostgreSQL URL of a `store: { kind: "postgres" }` section: `url`, or the variable `urlEnv` names. */
export function postgresUrl(
  store: Extract<Config["store"], { kind: "postgres" }>,
  env = process.env,
): string {
  if (store.url !== undefined) return store.url;
  const name = store.urlEnv ?? "";
  const value = env[name];
  if (value === undefined || value === "") {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `store.urlEnv: the environment variable ${name} is not set (it should hold the postgres:// URL)`,
      { details: { field: "store.urlEnv" } },
    );
  }
  if (!/^postgres(ql)?:\/\//.test(value)) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `store.urlEnv: ${name} must hold a URL starting with postgres:// or postgresql://`,
      { details: { field: "store.urlEnv" } },
    );
  }
  return value;
}

/**
 * Opens the store the config names: the embedded file store in the data dir (default), or the
 * PostgreSQL store (created or migrated at open). The data dir still holds the operator token and
 * the audit key either way.
 */
export async function openConfiguredStore(config: Config, options: StoreOpenOptions): Promise<Store> {
  const logger = options.logger.child({ component: "store" });
  const store = config.store;
  if (store.kind === "postgres") {
    // Loaded only for this store (the driver and its migrations cost ~100 ms of every start-up).
    const { openPostgresStore } = await import("@switchboard/store-pg");
    return openPostgresStore({
      url: postgresUrl(store, options.env),
      schema: store.schema,
      pool: { max: store.pool.max },
      logger,
    });
  }
  return openFileStore({
    dataDir: options.dataDir,
    logger,
    // Every transcript the gateway writes belongs to a row; one without is what a kill in the
    // middle of a reset or delete left behind, so it is archived as the interrupted step would have.
    archiveOrphanTranscripts: true,
    // Built once the gateway serves (`startDeferredWork`), not while the rest of it starts.
    deferIndexing: true,
    ...(options.fsync ? { fsyncMode: options.fsync } : {}),
  });
}
