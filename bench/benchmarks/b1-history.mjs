// B1: a 50-entry history read from transcripts of growing size, through the store and through
// the gateway's `sessions.history`; baseline `tail -n 50` on the same file.
import { spawnSync } from "node:child_process";
import { ensureHistoryTranscript, ensureSessionsDataset } from "../lib/dataset.mjs";
import { loadStoreFs } from "../lib/modules.mjs";
import { spawnGateway } from "../lib/processes.mjs";
import { figure, repeated } from "../lib/report.mjs";
import { formatBytes, median, now, timeEach } from "../lib/stats.mjs";
import { Peer } from "../lib/ws-peer.mjs";

export const definition = {
  id: "B1",
  title: "sessions_history limit 50 on 10 MiB / 100 MiB / 1 GiB transcripts",
  target:
    "median <= 5 ms at every size and flat (largest <= 2x smallest, or within 0.5 ms); baseline tail -n 50",
};

const LIMIT = 50;
const TARGET_MS = 5;

function tailOnce(file) {
  const started = now();
  const result = spawnSync("tail", ["-n", String(LIMIT), file], { maxBuffer: 64 * 1024 * 1024 });
  const elapsed = now() - started;
  if (result.status !== 0) throw new Error(`tail failed: ${result.stderr}`);
  return elapsed;
}

function flatness(label, medians, unitNote) {
  const smallest = medians[0];
  const largest = medians.at(-1);
  const ratio = largest / smallest;
  return figure({
    label,
    value: ratio,
    unit: "x",
    targetText: "<= 2x or +0.5 ms",
    pass: ratio <= 2 || largest - smallest <= 0.5,
    note: `${unitNote}: ${medians.map((value) => value.toFixed(3)).join(" / ")} ms`,
  });
}

export async function run(params) {
  const dataset = await ensureSessionsDataset(params.largestSessionCount);
  const histories = [];
  for (const bytes of params.historySizes) histories.push(await ensureHistoryTranscript(dataset, bytes));
  const readsPerRep = Math.max(10, Math.ceil(params.b1Reads / params.reps));
  const tailsPerRep = Math.max(3, Math.ceil(params.b1TailRuns / params.reps));
  const figures = [];

  // Baseline: `tail -n 50`, a fresh process per read (that is what it costs to use it).
  const tails = [];
  for (const history of histories) {
    tailOnce(history.path);
    tails.push(
      await repeated(params.reps, () =>
        median(Array.from({ length: tailsPerRep }, () => tailOnce(history.path))),
      ),
    );
  }

  // The store, in process.
  const { openFileStore } = await loadStoreFs();
  const store = await openFileStore({ dataDir: dataset.dataDir });
  const storeMedians = [];
  try {
    for (const [index, history] of histories.entries()) {
      const firstStarted = now();
      const first = await store.transcripts.read(history.sessionId, { limit: LIMIT });
      const firstMs = now() - firstStarted;
      if (first.entries.length !== LIMIT) throw new Error(`read returned ${first.entries.length} entries`);
      const result = await repeated(params.reps, async () =>
        median(
          await timeEach(() => store.transcripts.read(history.sessionId, { limit: LIMIT }), {
            count: readsPerRep,
            warmup: 5,
          }),
        ),
      );
      storeMedians.push(result.value);
      figures.push(
        figure({
          label: `store transcripts.read, ${formatBytes(history.bytes)}`,
          value: result.value,
          reps: result.reps,
          unit: "ms",
          baseline: tails[index].value,
          baselineLabel: "tail -n 50",
          target: { op: "<=", value: TARGET_MS },
        }),
        figure({
          label: `  first read (opens the file), ${formatBytes(history.bytes)}`,
          value: firstMs,
          unit: "ms",
        }),
      );
    }
  } finally {
    await store.close();
  }
  figures.push(flatness("store: largest / smallest median", storeMedians, "medians"));

  // Through the gateway, over a real WebSocket (sessions.history, the operator form of the tool).
  const gateway = await spawnGateway({ dataDir: dataset.dataDir });
  const gatewayMedians = [];
  try {
    const peer = await Peer.connect(gateway.url, { token: gateway.token });
    for (const [index, history] of histories.entries()) {
      const read = () => peer.call("sessions.history", { sessionKey: history.key, limit: LIMIT });
      const sample = await read();
      if (sample.messages.length !== LIMIT)
        throw new Error(`sessions.history returned ${sample.messages.length} messages`);
      const result = await repeated(params.reps, async () =>
        median(await timeEach(read, { count: readsPerRep, warmup: 5 })),
      );
      gatewayMedians.push(result.value);
      figures.push(
        figure({
          label: `gateway sessions.history (WS), ${formatBytes(history.bytes)}`,
          value: result.value,
          reps: result.reps,
          unit: "ms",
          baseline: tails[index].value,
          baselineLabel: "tail -n 50",
          target: { op: "<=", value: TARGET_MS },
        }),
      );
    }
    peer.close();
  } finally {
    await gateway.close();
  }
  figures.push(flatness("gateway: largest / smallest median", gatewayMedians, "medians"));

  return {
    figures,
    pass: figures.every((item) => item.pass !== false),
    sizes: {
      sessions: params.largestSessionCount,
      transcripts: histories.map((history) => ({ bytes: history.bytes, entries: history.entries })),
      readsPerRep,
      tailsPerRep,
    },
    notes: [
      "page cache is warm (files were just written or read); the first read of each file also opens it and finds its tail",
      "gateway figures include the WebSocket round trip; the gateway filters to messages and caps the reply at 64 KiB",
    ],
  };
}
