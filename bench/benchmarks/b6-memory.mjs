// B6: resident memory of an idle gateway with 100k sessions indexed, after start and a GC;
// baseline: the same gateway on an empty data dir. Also the store alone: a child holding only
// the opened file store (after one list and a GC); baseline: the same child on an empty store.
import fs from "node:fs";
import { ensureSessionsDataset, scratchDir } from "../lib/dataset.mjs";
import { spawnGateway, spawnStore } from "../lib/processes.mjs";
import { figure, repeated } from "../lib/report.mjs";
import { median, sleep } from "../lib/stats.mjs";
import { Peer } from "../lib/ws-peer.mjs";

export const definition = {
  id: "B6",
  title: "gateway (and store alone) RSS with 100k idle sessions indexed",
  target:
    "<= 300 MB VmRSS after start + GC settle, gateway and store alone; baselines the same on an empty data dir",
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

/** Opens the store alone in a child (which lists once), lets it settle, collects garbage; VmRSS and heap in bytes. */
async function settledStoreMemory(dataDir) {
  const child = await spawnStore({ dataDir, exposeGc: true });
  try {
    await sleep(1000);
    await child.gc();
    await sleep(500);
    const { heapUsed } = await child.stats();
    return { rss: child.rss(), heapUsed };
  } finally {
    await child.close();
  }
}

export async function run(params) {
  const dataset = await ensureSessionsDataset(params.largestSessionCount);
  const empty = scratchDir("b6-empty");
  const emptyStore = scratchDir("b6-empty-store");
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

    const storeHeaps = { loaded: [], empty: [] };
    const storeLoaded = await repeated(params.b6Starts, async () => {
      const memory = await settledStoreMemory(dataset.dataDir);
      storeHeaps.loaded.push(memory.heapUsed / MB);
      return memory.rss / MB;
    });
    const storeBaseline = await repeated(params.b6Starts, async () => {
      const memory = await settledStoreMemory(emptyStore);
      storeHeaps.empty.push(memory.heapUsed / MB);
      return memory.rss / MB;
    });
    const storePerSession = ((storeLoaded.value - storeBaseline.value) * MB) / params.largestSessionCount;
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
        figure({
          label: `store alone: VmRSS, ${params.largestSessionCount.toLocaleString("en-US")} sessions`,
          value: storeLoaded.value,
          reps: storeLoaded.reps,
          unit: "MB",
          baseline: storeBaseline.value,
          baselineLabel: "empty store",
          target: { op: "<=", value: TARGET_MB },
        }),
        figure({
          label: "  JS heap used",
          value: median(storeHeaps.loaded),
          unit: "MB",
          baseline: median(storeHeaps.empty),
          baselineLabel: "empty store",
        }),
        figure({ label: "  RSS above empty, per session", value: storePerSession, unit: "bytes" }),
      ],
      pass: loaded.value <= TARGET_MB && storeLoaded.value <= TARGET_MB,
      sizes: { sessions: params.largestSessionCount, starts: params.b6Starts },
      notes: [
        "MB = 10^6 bytes; node runs with --expose-gc so the settle can force a full collection",
        "store alone: a child that imports only @switchboard/store-fs, opens the store (default options), lists once, idles 1 s, then three forced GCs",
      ],
    };
  } finally {
    fs.rmSync(empty, { recursive: true, force: true });
    fs.rmSync(emptyStore, { recursive: true, force: true });
  }
}
