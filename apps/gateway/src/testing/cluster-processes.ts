import type { ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  dropTestSchema,
  pgUnavailableReason,
  testPgUrl,
  testSchemaName,
} from "@switchboard/store-pg/testing";
import { afterAll, afterEach } from "vitest";
import { type ChildGateway, startChildGateway } from "./child-gateway";
import { TestPeer } from "./test-peer";

/** The worker token `test/cluster-gateway.mjs` configures (agents main, helper, relay). */
export const CLUSTER_WORKER_TOKEN = "cluster-worker-token-0123456789";

const gatewayRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const childScript = join(gatewayRoot, "test", "cluster-gateway.mjs");
const distEntry = join(gatewayRoot, "dist", "index.js");

export interface ClusterProcesses {
  /** Why PostgreSQL cannot be reached, when it cannot. */
  readonly unavailable: string | undefined;
  /** Skip the suite: no PostgreSQL (and not required), or no built gateway. */
  readonly skip: boolean;
  /** Throws when PostgreSQL is required and missing (a test that needs it says so). */
  requirePostgres(): void;
  /**
   * Instances on one fresh schema, started one after the other (the first creates the schema).
   * `flowWaitSliceMs`: how long their background flows wait for a run before waiting again. `urls`:
   * each instance's database URL (one through a proxy, say), else `url` for all. `limits`: their
   * `gateway.limits` (small ones, so a test reaches them quickly).
   */
  start(
    count: number,
    options?: {
      url?: string;
      urls?: string[];
      flowWaitSliceMs?: number;
      limits?: { maxRunsPerSession?: number; maxRuns?: number; maxRunInputBytes?: number };
    },
  ): Promise<{ schema: string; instances: ChildGateway[] }>;
  /** One more instance on a schema `start` created (started apart, e.g. in another environment). */
  join(schema: string): Promise<ChildGateway>;
  operator(gateway: ChildGateway): Promise<TestPeer>;
}

/**
 * Several real gateway processes (the built gateway, `test/cluster-gateway.mjs`) on one PostgreSQL
 * schema per test: stopped (SIGTERM) and their schema dropped after each test, killed after the file.
 * `name` labels the skip warnings; `schemaPrefix` the test schemas.
 */
export async function useClusterProcesses(name: string, schemaPrefix: string): Promise<ClusterProcesses> {
  const built = existsSync(distEntry) && readFileSync(distEntry, "utf8").includes("Gateway");
  const unavailable = await pgUnavailableReason();
  const requirePg = process.env.SWITCHBOARD_REQUIRE_PG === "1";
  if (unavailable !== undefined && !requirePg)
    console.warn(`[${name}] skipped: no PostgreSQL (${unavailable}); set SWITCHBOARD_TEST_PG_URL`);
  if (!built) console.warn(`[${name}] skipped: ${distEntry} is missing; build the gateway first`);

  const children = new Set<ChildProcess>();
  let schemas: string[] = [];
  afterAll(() => {
    for (const child of children) child.kill("SIGKILL");
  });
  afterEach(async () => {
    for (const child of children) {
      child.kill("SIGTERM");
      await new Promise((done) => child.once("exit", done));
    }
    for (const schema of schemas) await dropTestSchema(schema);
    schemas = [];
  });

  const requirePostgres = () => {
    if (unavailable !== undefined)
      throw new Error(`SWITCHBOARD_REQUIRE_PG=1 but no PostgreSQL: ${unavailable}`);
  };
  return {
    unavailable,
    skip: (unavailable !== undefined && !requirePg) || !built,
    requirePostgres,
    async start(count, options = {}) {
      requirePostgres();
      const schema = testSchemaName(schemaPrefix);
      schemas.push(schema);
      const instances: ChildGateway[] = [];
      for (let i = 0; i < count; i++) {
        const args = [options.urls?.[i] ?? options.url ?? testPgUrl(), schema, CLUSTER_WORKER_TOKEN];
        if (options.flowWaitSliceMs || options.limits) args.push(String(options.flowWaitSliceMs ?? ""));
        if (options.limits) args.push(JSON.stringify(options.limits));
        instances.push(await startChildGateway(childScript, args, children));
      }
      return { schema, instances };
    },
    join: (schema) => startChildGateway(childScript, [testPgUrl(), schema, CLUSTER_WORKER_TOKEN], children),
    operator: (gateway) => TestPeer.connect(gateway.url, { token: gateway.token, role: "operator" }),
  };
}
