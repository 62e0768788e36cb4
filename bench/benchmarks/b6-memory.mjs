// B6: resident memory of an idle gateway with 100k sessions indexed, after start and a GC;
// baseline: the same gateway on an empty data dir.
import fs from "node:fs";
import { ensureSessionsDataset, scratchDir } from "../lib/dataset.mjs";
import { spawnGateway } from "../lib/processes.mjs";
import { figure, repeated } from "../lib/report.mjs";
import { median, sleep } from "../lib/stats.mjs";
import { Peer } from "../lib/ws-peer.mjs";

export const definition = {
  id: "B6",
  title: "gateway RSS with 100k idle sessions indexed",
  target: "<= 300 MB VmRSS after start + GC settle; baseline an empty gateway",
};

const MB = 1000 * 1000;
const TARGET_MB = 300;

/** Starts a gateway, connects once, lets it settle, collects garbage; VmRSS and heap in bytes. */
async function settledMemory(dataDir) {
  const gateway = await spawnGateway({ dataDir, exposeGc: true });
  try {
    const peer = await Peer.connect(gateway.url, { token: gateway.token });
    await peer.call("sessions.list", { limit: 50 });
    await sleep(1000);
    await gateway.gc();
    await sleep(500);
    const { heapUsed } = await gateway.stats();
    const rss = gateway.rss();
    peer.close();
    return { rss, heapUsed };
  } finally {
    await gateway.close();
  }
}

export async function run(params) {
  const dataset = await ensureSessionsDataset(params.largestSessionCount);
  const empty = scratchDir("b6-empty");
  try {
    const heaps = { loaded: [], empty: [] };
    const loaded = await repeated(params.b6Starts, async () => {
      const memory = await settledMemory(dataset.dataDir);
      heaps.loaded.push(memory.heapUsed / MB);
      return memory.rss / MB;
    });
    const baseline = await repeated(params.b6Starts, async () => {
      const memory = await settledMemory(empty);
      heaps.empty.push(memory.heapUsed / MB);
      return memory.rss / MB;
    });
    const perSession = ((loaded.value - baseline.value) * MB) / params.largestSessionCount;
    return {
      figures: [
        figure({
          label: `VmRSS, ${params.largestSessionCount.toLocaleString("en-US")} sessions`,
          value: loaded.value,
          reps: loaded.reps,
          unit: "MB",
          baseline: baseline.value,
          baselineLabel: "empty gateway",
          target: { op: "<=", value: TARGET_MB },
        }),
        figure({
          label: "  JS heap used",
          value: median(heaps.loaded),
          unit: "MB",
          baseline: median(heaps.empty),
          baselineLabel: "empty gateway",
        }),
        figure({ label: "  RSS above empty, per session", value: perSession, unit: "bytes" }),
      ],
      pass: loaded.value <= TARGET_MB,
      sizes: { sessions: params.largestSessionCount, starts: params.b6Starts },
      notes: ["MB = 10^6 bytes; node runs with --expose-gc so the settle can force a full collection"],
    };
  } finally {
    fs.rmSync(empty, { recursive: true, force: true });
  }
}
