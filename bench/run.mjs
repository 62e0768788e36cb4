#!/usr/bin/env node
// Switchboard benchmarks B1-B7 (see bench/README.md and docs' quality bars).
//   node bench/run.mjs [B1 B4 ...] [--scale=small|default|full]
// Needs the workspace built (`pnpm bench` builds first). Writes bench/results/latest.json.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import * as b1 from "./benchmarks/b1-history.mjs";
import * as b2 from "./benchmarks/b2-list.mjs";
import * as b2b from "./benchmarks/b2b-indexed-list.mjs";
import * as b3 from "./benchmarks/b3-cold-start.mjs";
import * as b4 from "./benchmarks/b4-appends.mjs";
import * as b5 from "./benchmarks/b5-send.mjs";
import * as b6 from "./benchmarks/b6-memory.mjs";
import * as b7 from "./benchmarks/b7-stalls.mjs";
import * as b8 from "./benchmarks/b8-pg.mjs";
import * as b9 from "./benchmarks/b9-cluster-send.mjs";
import * as b10 from "./benchmarks/b10-failover.mjs";
import * as b11 from "./benchmarks/b11-ui.mjs";
import { DATA_ROOT } from "./lib/dataset.mjs";
import { BENCH_DIR, setting } from "./lib/modules.mjs";
import { printResult } from "./lib/report.mjs";
import { resolveScale, SCALES } from "./lib/scale.mjs";
import { now } from "./lib/stats.mjs";

const BENCHMARKS = [b1, b2, b2b, b3, b4, b5, b6, b7, b8, b9, b10, b11];

function usage() {
  return [
    "usage: node bench/run.mjs [B1 B2 B2b ... B11] [--scale=small|default|full]",
    "  no ids: run all; scale also from BENCH_SCALE (default: default)",
    "  single sizes can be overridden by env, e.g. BENCH_REPS=5 BENCH_B7_SECONDS=120 (see bench/README.md)",
    "  BENCH_STRICT=1: exit with status 1 when a target is missed",
  ].join("\n");
}

function parseArgs(argv) {
  const ids = [];
  let scale = setting("BENCH_SCALE") || "default";
  for (let index = 0; index < argv.length; index++) {
    const arg = argv[index];
    if (arg === "--help" || arg === "-h") {
      console.log(usage());
      process.exit(0);
    } else if (arg.startsWith("--scale=")) scale = arg.slice("--scale=".length);
    else if (arg === "--scale") scale = argv[++index];
    else if (/^b(?:[1-9]|2b|10|11)$/i.test(arg)) ids.push(arg.toUpperCase());
    else {
      console.error(`unknown argument "${arg}"\n${usage()}`);
      process.exit(2);
    }
  }
  if (!SCALES[scale]) {
    console.error(`unknown scale "${scale}"\n${usage()}`);
    process.exit(2);
  }
  return { ids: [...new Set(ids)], scale };
}

async function main() {
  const { ids, scale } = parseArgs(process.argv.slice(2));
  const params = resolveScale(scale);
  const selected = ids.length === 0 ? BENCHMARKS : BENCHMARKS.filter((b) => ids.includes(b.definition.id));
  const started = new Date();
  const machine = {
    node: process.version,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model,
    memoryBytes: os.totalmem(),
    loadAverage: os.loadavg().map((value) => Math.round(value * 100) / 100),
  };
  console.log(
    `Switchboard benchmarks — scale ${scale}, node ${machine.node}, ${machine.cpus} cpus, load ${machine.loadAverage.join(" ")}`,
  );
  console.log(`data sets: ${DATA_ROOT} (generated once, then reused)`);
  console.log("figures are medians of the per-repetition medians; baselines are measured in this same run");

  const results = {};
  for (const benchmark of selected) {
    const { id } = benchmark.definition;
    process.stderr.write(`\n[${id}] running…\n`);
    const t0 = now();
    let result;
    try {
      result = await benchmark.run(params);
    } catch (error) {
      result = { figures: [], pass: false, error: String(error?.stack ?? error) };
    }
    result.seconds = Math.round((now() - t0) / 100) / 10;
    results[id] = { title: benchmark.definition.title, target: benchmark.definition.target, ...result };
    printResult(benchmark.definition, result);
    if (result.error) console.log(`    ERROR: ${result.error}`);
    console.log(`    (${result.seconds} s)`);
  }

  const summary = Object.entries(results).map(
    ([id, result]) =>
      `${id} ${result.error ? "ERROR" : result.skipped ? "SKIP" : result.pass ? "PASS" : "MISS"}`,
  );
  console.log(`\nsummary: ${summary.join(", ")}`);
  const output = {
    date: started.toISOString(),
    seconds: Math.round((Date.now() - started.getTime()) / 100) / 10,
    scale,
    params,
    machine,
    benchmarks: results,
  };
  const file = path.join(BENCH_DIR, "results", "latest.json");
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify(output, null, 2)}\n`);
  console.log(`results: ${path.relative(process.cwd(), file) || file}`);

  const failed = Object.values(results).some((result) => result.error);
  // A skipped benchmark (B8 without PostgreSQL) says so in the summary and misses nothing.
  const missed = Object.values(results).some((result) => !result.pass && !result.skipped);
  process.exit(failed || (missed && setting("BENCH_STRICT") === "1") ? 1 : 0);
}

await main();
