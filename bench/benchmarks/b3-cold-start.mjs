// B3: gateway cold start on a data dir with 100k sessions and ~1 GiB of transcripts: from
// spawning `node` to a completed WebSocket `connect`. Baseline: the same for a bare `ws` server.
import { ensureHistoryTranscript, ensureSessionsDataset, transcriptBytes } from "../lib/dataset.mjs";
import { wsPath } from "../lib/modules.mjs";
import { spawnEchoServer, spawnGateway } from "../lib/processes.mjs";
import { figure } from "../lib/report.mjs";
import { formatBytes, median, now } from "../lib/stats.mjs";
import { Peer } from "../lib/ws-peer.mjs";

export const definition = {
  id: "B3",
  title: "gateway cold start with 100k sessions and ~1 GiB of transcripts",
  target: "<= 1.5 s from process spawn to a successful WebSocket connect; baseline node + bare ws server",
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

  const baseline = median(baselineStarts);
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
    ],
    pass: median(gatewayStarts) <= TARGET_MS,
    sizes: { sessions: params.largestSessionCount, transcriptBytes: bytes, starts: params.b3Starts },
    notes: ["page cache is warm (a restart, not a boot after a reboot); each start is a fresh node process"],
  };
}
