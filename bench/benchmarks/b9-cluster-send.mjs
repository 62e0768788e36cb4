// B9: `sessions_send` with wait at concurrency 64 on the PostgreSQL store, spread over two gateway
// instances — the worker on one, the callers on the other, so every send crosses instances (the
// run waits in the cluster's queue, the worker's instance adopts it, the end reaches the caller's
// instance through the event log). Compared with one instance on the same store in the same run.
// Skipped with a notice without PostgreSQL.
import { benchCluster, pgUnavailable } from "../lib/cluster.mjs";
import { figure, repeated } from "../lib/report.mjs";
import { now, quantile, sleep } from "../lib/stats.mjs";
import { Peer, startInstantWorker } from "../lib/ws-peer.mjs";

export const definition = {
  id: "B9",
  title: "sessions_send with wait, concurrency 64, over 2 instances (worker on one, callers on the other)",
  target: ">= 0.8x the single-instance figure of the same run (postgres store)",
};

const CONCURRENCY = 64;
const CONNECTIONS = 8;
const TARGET_RATIO = 0.8;
const CONFIG = {
  agents: { list: [{ id: "main", default: true }] },
  session: { agentToAgent: { maxPingPongTurns: 0, budgetPerMinute: 1_000_000 } },
};

const sendFrame = (index, n) => ({
  tool: "sessions_send",
  args: { sessionKey: `agent:main:bench:to-${index}`, message: `ping ${n}`, timeoutSeconds: 30 },
  as: `agent:main:bench:from-${index}`,
});

async function load(peers, seconds) {
  const latencies = [];
  let errors = 0;
  let firstError;
  const started = now();
  const deadline = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, index) => {
      const peer = peers[index % peers.length];
      for (let n = 0; now() < deadline; n++) {
        const t0 = now();
        const frame = await peer.request("tools.invoke", sendFrame(index, n));
        latencies.push(now() - t0);
        const outcome = !frame.ok
          ? `${frame.error?.code}: ${frame.error?.message}`
          : frame.result.status === "ok"
            ? true
            : `status ${frame.result.status}: ${frame.result.error ?? ""}`;
        if (outcome !== true) {
          errors += 1;
          firstError ??= outcome;
        }
      }
    }),
  );
  const elapsed = (now() - started) / 1000;
  return { rate: latencies.length / elapsed, p50: quantile(latencies, 0.5), errors, firstError };
}

/** Sends from callers on `callerUrl` to a worker on `workerUrl` (the same URL: one instance). */
async function measure(params, workerGateway, callerGateway) {
  const worker = await startInstantWorker(workerGateway.url, workerGateway.token, ["main"]);
  const peers = [];
  try {
    for (let i = 0; i < CONNECTIONS; i++)
      peers.push(await Peer.connect(callerGateway.url, { token: callerGateway.token }));
    for (let index = 0; index < CONCURRENCY; index++) {
      await peers[0].call("sessions.create", { key: `agent:main:bench:from-${index}` });
      await peers[0].call("sessions.create", { key: `agent:main:bench:to-${index}` });
    }
    const probe = await peers[0].call("tools.invoke", sendFrame(0, 0));
    if (probe.status !== "ok") throw new Error(`sessions_send did not succeed: ${JSON.stringify(probe)}`);
    await load(peers, 0.5);
    const runs = [];
    const rate = await repeated(params.reps, async () => {
      const result = await load(peers, params.b5Seconds);
      runs.push(result);
      return result.rate;
    });
    const p50 = await repeated(runs.length, (rep) => runs[rep].p50);
    await sleep(300);
    return {
      rate,
      p50,
      errors: runs.reduce((sum, run) => sum + run.errors, 0),
      firstError: runs.find((run) => run.firstError)?.firstError,
    };
  } finally {
    for (const peer of peers) peer.close();
    worker.close();
  }
}

export async function run(params) {
  const unavailable = await pgUnavailable();
  if (unavailable !== undefined) {
    console.log(`    B9 skipped: no PostgreSQL (${unavailable}); set BENCH_PG_URL`);
    return { figures: [], skipped: true, pass: true, notes: [`skipped: no PostgreSQL (${unavailable})`] };
  }
  let single;
  const alone = await benchCluster("b9one", CONFIG);
  try {
    const gateway = await alone.start();
    single = await measure(params, gateway, gateway);
  } finally {
    await alone.close();
  }
  let spread;
  const pair = await benchCluster("b9two", CONFIG);
  try {
    const workerSide = await pair.start();
    const callerSide = await pair.start();
    spread = await measure(params, workerSide, callerSide);
  } finally {
    await pair.close();
  }
  const ratio = spread.rate.value / single.rate.value;
  return {
    figures: [
      figure({
        label: "2 instances (worker on one, callers on the other): sends/s",
        value: spread.rate.value,
        reps: spread.rate.reps,
        unit: "/s",
        baseline: single.rate.value,
        baselineLabel: "one instance, same store",
        targetText: `>= ${TARGET_RATIO}x baseline`,
        pass: ratio >= TARGET_RATIO,
        ...(spread.errors ? { note: `${spread.errors} failed sends, first: ${spread.firstError}` } : {}),
      }),
      figure({
        label: "  2 instances: p50 latency",
        value: spread.p50.value,
        unit: "ms",
        baseline: single.p50.value,
        baselineLabel: "one instance",
      }),
    ],
    pass: ratio >= TARGET_RATIO && spread.errors === 0 && single.errors === 0,
    sizes: { concurrency: CONCURRENCY, connections: CONNECTIONS, secondsPerRep: params.b5Seconds },
    notes: [
      "both figures on the postgres store (each instance a gateway child process); the runner holds the callers and the worker",
      single.errors ? `single instance: ${single.errors} failed sends, first: ${single.firstError}` : "",
    ].filter(Boolean),
  };
}
