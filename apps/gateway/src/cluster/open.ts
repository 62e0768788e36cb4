import type { Config } from "@switchboard/core";
import type { Cluster, LostRun } from "@switchboard/store-pg";
import type { Logger } from "pino";
import { postgresUrl } from "../store-open";

export interface GatewayClusterOptions {
  /** This instance's id (other instances name it, e.g. in a lost run's error). */
  instanceId: string;
  logger: Logger;
  /** Where `store.urlEnv` is looked up (default `process.env`). */
  env?: Record<string, string | undefined>;
  /** Runs of lost instances found by the leader's sweep (bound once the gateway's parts exist). */
  onLostRuns: (runs: { requeued: LostRun[]; failed: LostRun[] }) => Promise<void>;
  /** This instance learnt it was declared lost: what it still holds must be let go (bound once the gateway's parts exist). */
  onLost?: () => void;
}

/**
 * The coordination of one gateway instance on the postgres store's database and schema: every
 * instance started with the same `store` section joins the same cluster. Its pool is separate from
 * the store's (lease renewals never queue behind requests) and as large as the store's (at least
 * 4): every run takes a lane claim and every event a publish on it.
 */
export async function openGatewayCluster(config: Config, options: GatewayClusterOptions): Promise<Cluster> {
  const store = config.store;
  if (store.kind !== "postgres") throw new Error("a cluster needs the postgres store");
  const log = options.logger;
  // Loaded only for the postgres store, like the store itself (see `openConfiguredStore`).
  const { openCluster } = await import("@switchboard/store-pg");
  return openCluster({
    url: postgresUrl(store, options.env),
    schema: store.schema,
    pool: { max: Math.max(4, store.pool.max) },
    // A lost instance is noticed within the lease plus one sweep (1 s); its runs then get 1.5 s to be
    // adopted by another worker before they fail: ≈ 6.5 s, inside the spec's 10 s with room for load.
    leaseMs: 4000,
    instanceId: options.instanceId,
    logger: log, // the coordination names its component and instance
    onLostRuns: options.onLostRuns,
    onLost: () => {
      log.error(
        { instanceId: options.instanceId },
        "this instance was declared lost by the cluster (its lease expired): its runs were ended elsewhere",
      );
      options.onLost?.();
    },
    events: {
      onError: (error) => log.warn({ err: error }, "event log reader failed; retrying"),
    },
  });
}
