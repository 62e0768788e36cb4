// B9: `sessions_send` with wait at concurrency 64 on the PostgreSQL store, spread over two gateway
// instances — the worker on one, the callers on the other, so every send crosses instances (the
// run waits in the cluster's queue, the worker's instance adopts it, the end reaches the caller's
// instance through the event log). Compared with one instance on the same store in the same run.
// Skipped with a notice without PostgreSQL.
import { benchCluster, pgUnavailable, postgresCpuMs } from "../lib/cluster.mjs";
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

/**
 * One rep of closed-loop sends; with `processes` (gateways with `cpuMs()`), the CPU they and the
 * PostgreSQL server's processes (when local) spent per send.
 */
async function load(peers, seconds, processes = []) {
  const cpuBefore = processes.map((gateway) => gateway.cpuMs());
  const pgBefore = postgresCpuMs();
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
  const pgAfter = postgresCpuMs();
  const sends = latencies.length;
  return {
    rate: sends / elapsed,
    p50: quantile(latencies, 0.5),
    gatewayCpu: processes.reduce((sum, gateway, i) => sum + gateway.cpuMs() - cpuBefore[i], 0) / sends,
    postgresCpu: pgBefore === undefined || pgAfter === undefined ? undefined : (pgAfter - pgBefore) / sends,
    errors,
    firstError,
  };
}

/**
 * Callers on `callerGateway` sending to a worker on `workerGateway` (the same gateway: one
 * instance), set up and warmed; `load` runs one rep.
 */
async function prepare(workerGateway, callerGateway) {
  const worker = await startInstantWorker(workerGateway.url, workerGateway.token, ["main"]);
  const peers = [];
  const close = () => {
    for (const peer of peers) peer.close();
    worker.close();
  };
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
  } catch (error) {
    close();
    throw error;
  }
  const processes = workerGateway === callerGateway ? [workerGateway] : [workerGateway, callerGateway];
  return { load: (seconds) => load(peers, seconds, processes), close };
}

/** Medians of one configuration's reps. */
async function summarise(runs) {
  const rate = await repeated(runs.length, (rep) => runs[rep].rate);
  const p50 = await repeated(runs.length, (rep) => runs[rep].p50);
  const gatewayCpu = await repeated(runs.length, (rep) => runs[rep].gatewayCpu);
  const postgresCpu = runs.every((run) => run.postgresCpu !== undefined)
    ? await repeated(runs.length, (rep) => runs[rep].postgresCpu)
    : undefined;
  return {
    rate,
    p50,
    gatewayCpu,
    postgresCpu,
    errors: runs.reduce((sum, run) => sum + run.errors, 0),
    firstError: runs.find((run) => run.firstError)?.firstError,
  };
}

export async function run(params) {
  const unavailable = await pgUnavailable();
  if (unavailable !== undefined) {
    console.log(`    B9 skipped: no PostgreSQL (${unavailable}); set BENCH_PG_URL`);
    return { figures: [], skipped: true, pass: true, notes: [`skipped: no PostgreSQL (${unavailable})`] };
  }
  // Both set-ups run side by side on their own schemas and their reps alternate (one instance, two
  // instances, one, …): a machine busy with something else for a while weighs on both figures
  // alike, instead of on whichever ran at that moment.
  const alone = await benchCluster("b9one", CONFIG);
  const pair = await benchCluster("b9two", CONFIG);
  const singleRuns = [];
  const spreadRuns = [];
  let one;
  let two;
  try {
    const gateway = await alone.start();
    const workerSide = await pair.start();
    const callerSide = await pair.start();
    one = await prepare(gateway, gateway);
    two = await prepare(workerSide, callerSide);
    for (let rep = 0; rep < params.reps; rep++) {
      singleRuns.push(await one.load(params.b5Seconds));
      await sleep(200);
      spreadRuns.push(await two.load(params.b5Seconds));
      await sleep(200);
    }
  } finally {
    one?.close();
    two?.close();
    await sleep(300);
    await alone.close();
    await pair.close();
  }
  const single = await summarise(singleRuns);
  const spread = await summarise(spreadRuns);
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
      // What scale-out costs in work: on 2 cores shared with PostgreSQL and the runner, the ratio
      // above follows these (see docs/decisions.md, B9).
      figure({
        label: "  2 instances: gateway CPU per send (both)",
        value: spread.gatewayCpu.value,
        unit: "ms",
        baseline: single.gatewayCpu.value,
        baselineLabel: "one instance",
      }),
      ...(spread.postgresCpu && single.postgresCpu
        ? [
            figure({
              label: "  2 instances: PostgreSQL CPU per send",
              value: spread.postgresCpu.value,
              unit: "ms",
              baseline: single.postgresCpu.value,
              baselineLabel: "one instance",
            }),
          ]
        : []),
    ],
    pass: ratio >= TARGET_RATIO && spread.errors === 0 && single.errors === 0,
    sizes: { concurrency: CONCURRENCY, connections: CONNECTIONS, secondsPerRep: params.b5Seconds },
    notes: [
      "both figures on the postgres store (each instance a gateway child process); the runner holds the callers and the worker",
      "the reps of the two set-ups alternate (both are up for the whole run)",
      single.errors ? `single instance: ${single.errors} failed sends, first: ${single.firstError}` : "",
    ].filter(Boolean),
  };
}
