// B3: gateway cold start on a data dir with 100k sessions and ~1 GiB of transcripts: from
// spawning `node` to a completed WebSocket `connect`. Baseline: the same for a bare `ws` server.
// Also the store alone: from spawning a `node` that only imports @switchboard/store-fs until the
// store is open and a `sessions.list` limit 50 answered; baseline: the same on an empty data dir.
import fs from "node:fs";
import {
  ensureHistoryTranscript,
  ensureSessionsDataset,
  scratchDir,
  transcriptBytes,
} from "../lib/dataset.mjs";
import { wsPath } from "../lib/modules.mjs";
import { spawnEchoServer, spawnGateway, spawnStore } from "../lib/processes.mjs";
import { figure } from "../lib/report.mjs";
import { formatBytes, median, now } from "../lib/stats.mjs";
import { Peer } from "../lib/ws-peer.mjs";

export const definition = {
  id: "B3",
  title: "gateway (and store alone) cold start with 100k sessions and ~1 GiB of transcripts",
  target:
    "<= 1.5 s from process spawn to a successful WebSocket connect (baseline node + bare ws server); store alone <= 1.5 s from spawn to store open + first list (baseline an empty data dir)",
};

const TARGET_MS = 1500;

export async function run(params) {
  const dataset = await ensureSessionsDataset(params.largestSessionCount);
  for (const bytes of params.historySizes) await ensureHistoryTranscript(dataset, bytes);
  const bytes = transcriptBytes(dataset.dataDir);

  const gatewayStarts = [];
  const imported = [];
  const started = [];
  for (let rep = 0; rep < params.b3Starts; rep++) {
    const gateway = await spawnGateway({ dataDir: dataset.dataDir });
    try {
      const peer = await Peer.connect(gateway.url, { token: gateway.token });
      gatewayStarts.push(now() - gateway.spawnedAt);
      imported.push(gateway.importedMs);
      started.push(gateway.readyMs - gateway.importedMs);
      peer.close();
    } finally {
      await gateway.close();
    }
  }

  const baselineStarts = [];
  for (let rep = 0; rep < params.b3Starts; rep++) {
    const server = await spawnEchoServer({ wsPath });
    try {
      const peer = await Peer.open(server.url);
      await peer.call("connect", {});
      baselineStarts.push(now() - server.spawnedAt);
      peer.close();
    } finally {
      await server.close();
    }
  }

  const storeAlone = await storeStarts(dataset.dataDir, params.b3Starts);
  const emptyDir = scratchDir("b3-empty");
  let storeBaseline;
  try {
    // One untimed open creates the empty store, so the timed ones are restarts like the loaded ones.
    await storeStarts(emptyDir, 1);
    storeBaseline = await storeStarts(emptyDir, params.b3Starts);
  } finally {
    fs.rmSync(emptyDir, { recursive: true, force: true });
  }

  const baseline = median(baselineStarts);
  const storeMs = median(storeAlone.total);
  return {
    figures: [
      figure({
        label: `spawn -> connect ok, ${params.largestSessionCount.toLocaleString("en-US")} sessions, ${formatBytes(bytes)} of transcripts`,
        value: median(gatewayStarts),
        reps: gatewayStarts,
        unit: "ms",
        baseline,
        baselineLabel: "node -e bare ws server",
        target: { op: "<=", value: TARGET_MS },
      }),
      figure({
        label: "  in the child: node boot + module imports",
        value: median(imported),
        reps: imported,
        unit: "ms",
      }),
      figure({
        label: "  in the child: Gateway.start (store open, index load)",
        value: median(started),
        reps: started,
        unit: "ms",
      }),
      figure({
        label: `store alone: spawn -> store open + list 50, ${params.largestSessionCount.toLocaleString("en-US")} sessions`,
        value: storeMs,
        reps: storeAlone.total,
        unit: "ms",
        baseline: median(storeBaseline.total),
        baselineLabel: "same child, empty data dir",
        target: { op: "<=", value: TARGET_MS },
      }),
      figure({
        label: "  in the child: node boot + store-fs import",
        value: median(storeAlone.imported),
        reps: storeAlone.imported,
        unit: "ms",
        baseline: median(storeBaseline.imported),
        baselineLabel: "empty data dir",
      }),
      figure({
        label: "  in the child: openFileStore (index load)",
        value: median(storeAlone.opened),
        reps: storeAlone.opened,
        unit: "ms",
        baseline: median(storeBaseline.opened),
        baselineLabel: "empty data dir",
      }),
      figure({
        label: "  in the child: first sessions.list limit 50",
        value: median(storeAlone.listed),
        reps: storeAlone.listed,
        unit: "ms",
        baseline: median(storeBaseline.listed),
        baselineLabel: "empty data dir",
      }),
    ],
    pass: median(gatewayStarts) <= TARGET_MS && storeMs <= TARGET_MS,
    sizes: { sessions: params.largestSessionCount, transcriptBytes: bytes, starts: params.b3Starts },
    notes: [
      "page cache is warm (a restart, not a boot after a reboot); each start is a fresh node process",
      "store alone: the child imports only @switchboard/store-fs (and its core + zod), opens the store with the default options (fsync on) and lists once; timed until its ready message arrives",
    ],
  };
}

/** Times `starts` store-only children on `dataDir`: total from spawn to ready, and the child's split. */
async function storeStarts(dataDir, starts) {
  const times = { total: [], imported: [], opened: [], listed: [] };
  for (let rep = 0; rep < starts; rep++) {
    const child = await spawnStore({ dataDir });
    try {
      times.total.push(child.readyAt - child.spawnedAt);
      times.imported.push(child.importedMs);
      times.opened.push(child.openedMs - child.importedMs);
      times.listed.push(child.listedMs - child.openedMs);
    } finally {
      await child.close();
    }
  }
  return times;
}
