// Helpers of the cluster benchmarks (B9, B10): a PostgreSQL server to run on (BENCH_PG_URL, else
// SWITCHBOARD_TEST_PG_URL, else the local default), a schema of their own dropped afterwards, and
// gateway instances on it (bench/lib/gateway-child.mjs with a postgres store).
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { ROOT, setting } from "./modules.mjs";
import { spawnGateway } from "./processes.mjs";

export const pgUrl = () =>
  setting("BENCH_PG_URL") || setting("SWITCHBOARD_TEST_PG_URL") || "postgres://postgres@127.0.0.1:5432/test";

async function testing() {
  const dist = `${ROOT}packages/store-pg/dist/testing.js`;
  if (!existsSync(dist)) throw new Error(`@switchboard/store-pg is not built (${dist} is missing)`);
  return import(pathToFileURL(dist).href);
}

/** Undefined when the server answers; else why not (the benchmark is then skipped). */
export async function pgUnavailable() {
  const { pgUnavailableReason } = await testing();
  process.env.SWITCHBOARD_TEST_PG_URL ||= pgUrl();
  return pgUnavailableReason();
}

/**
 * A cluster on a fresh schema: `start()` adds an instance (a gateway child process with its own
 * data dir, which a postgres store leaves empty); `close()` stops them all and drops the schema.
 */
export async function benchCluster(name, config) {
  const { dropTestSchema } = await testing();
  const schema = `switchboard_bench_${name}_${process.pid}_${Date.now().toString(36)}`;
  const instances = [];
  const dirs = [];
  return {
    schema,
    async start() {
      const dataDir = mkdtempSync(join(tmpdir(), `switchboard-${name}-`));
      dirs.push(dataDir);
      const gateway = await spawnGateway({
        dataDir,
        config: { ...config, store: { kind: "postgres", url: pgUrl(), schema, pool: { max: 8 } } },
      });
      instances.push(gateway);
      return gateway;
    },
    async close() {
      for (const gateway of instances) {
        if (gateway.child.exitCode === null && gateway.child.signalCode === null)
          await gateway.close().catch(() => gateway.child.kill("SIGKILL"));
      }
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
      await dropTestSchema(schema, pgUrl());
    },
  };
}

/**
 * CPU time (ms) of every process of the local PostgreSQL server (processes named `postgres`, from
 * /proc), or undefined when the server is not on this machine or /proc cannot tell.
 */
export function postgresCpuMs() {
  const host = new URL(pgUrl()).hostname;
  if (host !== "127.0.0.1" && host !== "localhost" && host !== "") return undefined;
  let total = 0;
  let found = 0;
  let pids;
  try {
    pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name));
  } catch {
    return undefined;
  }
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      if (name !== "postgres") continue;
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      // utime and stime (fields 14 and 15 of stat(5); the slice starts at field 3), 100 Hz ticks.
      total += (Number(fields[11]) + Number(fields[12])) * 10;
      found += 1;
    } catch {
      // The process ended meanwhile.
    }
  }
  return found > 0 ? total : undefined;
}
