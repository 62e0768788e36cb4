import { adminQuery, TcpProxy, testPgUrl } from "@switchboard/store-pg/testing";
import { afterEach, describe, expect, it } from "vitest";
import { CLUSTER_WORKER_TOKEN, useClusterProcesses } from "../testing/cluster-processes";
import { deferred } from "../testing/deferred";
import { TestWorker } from "../testing/test-gateway";
import type { TestPeer } from "../testing/test-peer";
import { until } from "../testing/until";

/**
 * Gateway instances on one PostgreSQL schema (the built gateway in child processes, as in
 * cluster.int.test.ts): the bounds a run keeps when it goes through the cluster's queue — the
 * instance's run limits, its deadline whatever the instances' clocks say, and a wait's own time
 * while the database stalls.
 */

const cluster = await useClusterProcesses("cluster-run-bounds.int.test", "sbgwbound");
const workers: TestWorker[] = [];
afterEach(() => {
  for (const worker of workers.splice(0)) worker.close();
});

type Refusal = { ok: boolean; error?: { code: string; message: string; retryable?: boolean } };

/** `agent` into the session, answered (accepted or refused) rather than thrown. */
function send(op: TestPeer, sessionKey: string, message: string): Promise<Refusal> {
  return op.request("agent", { sessionKey, message, timeoutSeconds: 3600 }) as Promise<Refusal>;
}

async function openRuns(schema: string, sessionKey?: string): Promise<number> {
  const found = await adminQuery<{ n: number }>(
    `SELECT count(*)::int AS n FROM "${schema}".runs WHERE status IN ('queued', 'running')${sessionKey ? " AND session_key = $1" : ""}`,
    sessionKey ? [sessionKey] : [],
  );
  return found.rows[0]!.n;
}

describe.skipIf(cluster.skip)("cluster: runs keep their bounds through the cluster's queue", () => {
  // Before, a run handed to the cluster's queue left the instance's count (`active`) and counted
  // nowhere: with no worker on the instance, 1 100 sends into one session were all accepted
  // (gateway.limits.maxRunsPerSession is 1 000), and as many rows piled up in `run_queue`.
  it("runs handed to the cluster's queue count against the instance's run limits until they end", async () => {
    const {
      schema,
      instances: [a],
    } = await cluster.start(1, { limits: { maxRunsPerSession: 5, maxRuns: 8 } });
    const op = await cluster.operator(a!);
    const flood = "agent:main:cron:flood";
    const other = "agent:main:cron:other";
    await op.call("sessions.create", { key: flood });
    await op.call("sessions.create", { key: other });
    // No worker anywhere: every run waits in the cluster's queue.
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => send(op, flood, `m${i}`)));
    expect(answers.filter((answer) => answer.ok)).toHaveLength(5);
    const refused = answers.filter((answer) => !answer.ok);
    expect(refused).toHaveLength(3);
    for (const answer of refused) {
      expect(answer.error).toMatchObject({ code: "RATE_LIMITED", retryable: true });
      expect(answer.error!.message).toContain("gateway.limits.maxRunsPerSession");
    }
    // Refused before anything was written.
    expect(await openRuns(schema, flood)).toBe(5);
    const queued = await adminQuery<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".run_queue`);
    expect(queued.rows[0]!.n).toBe(5);

    // All sessions together: the instance's maxRuns.
    for (let i = 0; i < 3; i++) expect(await send(op, other, `o${i}`)).toMatchObject({ ok: true });
    const past = await send(op, other, "o3");
    expect(past.error).toMatchObject({ code: "RATE_LIMITED", retryable: true });
    expect(past.error!.message).toContain("gateway.limits.maxRuns ");
    expect(await openRuns(schema)).toBe(8);

    // A worker takes them and they end: their ends are heard, and the instance admits runs again.
    workers.push(await TestWorker.start(a!.url, CLUSTER_WORKER_TOKEN, ["main"], async () => "done"));
    await until(async () => (await openRuns(schema)) === 0, "every queued run to end", 20_000);
    await until(async () => (await send(op, flood, "again")).ok, "a send to be accepted again", 5_000);
  }, 60_000);

  // Before, the leader compared the accepting instance's `createdAt` with its own `Date.now()`: a
  // leader 120 s ahead ended a run given 60 s `timeout` within a second, and an instance 120 s ahead
  // adopting a run timed it out at once. Deadlines are now kept on the database's clock.
  it("a run's deadline is kept on the database's clock, whatever the leader's or the adopter's clock says", async () => {
    // Instance A's wall clock runs 120 s ahead (clock skew between hosts); B's is right.
    const previous = process.env.NODE_OPTIONS;
    const skew = "const now = Date.now; Date.now = () => now() + 120000;";
    process.env.NODE_OPTIONS = `${previous ?? ""} --import=data:text/javascript,${encodeURIComponent(skew)}`;
    let started: Awaited<ReturnType<typeof cluster.start>>;
    try {
      started = await cluster.start(1);
    } finally {
      if (previous === undefined) delete process.env.NODE_OPTIONS;
      else process.env.NODE_OPTIONS = previous;
    }
    const { schema } = started;
    const [a] = started.instances;
    // A, alone, takes the timers' lease (the one-second sweep of queued runs past their deadline).
    await until(
      async () =>
        (await adminQuery(`SELECT holder FROM "${schema}".leases WHERE name = 'timers'`)).rows.length === 1,
      "the skewed instance to lead",
      10_000,
    );
    // B, with the right clock, joins.
    const b = await cluster.join(schema);
    const opB = await cluster.operator(b);
    const sessionKey = "agent:main:cron:skew";
    await opB.call("sessions.create", { key: sessionKey });
    // No worker anywhere: the run waits in the cluster's queue, with 60 s to find one.
    const { runId } = await opB.call<{ runId: string }>("agent", {
      sessionKey,
      message: "hello",
      timeoutSeconds: 60,
    });
    const waited = await opB.call<{ status: string; error?: string }>("agent.wait", {
      runId,
      timeoutMs: 3000,
    });
    expect(waited).toMatchObject({ status: "timeout", error: "run has not ended yet" });
    const queuedRow = await adminQuery<{ left: number }>(
      `SELECT extract(epoch FROM deadline_at - now())::float8 AS left FROM "${schema}".run_queue WHERE run_id = $1`,
      [runId],
    );
    expect(queuedRow.rows[0]!.left).toBeGreaterThan(50);
    expect(queuedRow.rows[0]!.left).toBeLessThanOrEqual(60);

    // A worker on A (the clock ahead) adopts it: it runs on with the time it has left.
    const gate = deferred();
    const worker = await TestWorker.start(a!.url, CLUSTER_WORKER_TOKEN, ["main"], async () => {
      await gate.promise;
      return "done";
    });
    workers.push(worker);
    await until(() => worker.runs.length === 1, "A to adopt the run", 10_000);
    const running = await opB.call<{ status: string; error?: string }>("agent.wait", {
      runId,
      timeoutMs: 2000,
    });
    expect(running).toMatchObject({ status: "timeout", error: "run has not ended yet" });
    const claim = await adminQuery<{ left: number }>(
      `SELECT extract(epoch FROM deadline_at - now())::float8 AS left FROM "${schema}".run_claims WHERE run_id = $1`,
      [runId],
    );
    expect(claim.rows[0]!.left).toBeGreaterThan(45);
    gate.resolve();
    expect(await opB.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
      reply: "done",
    });
  }, 90_000);

  // Before, the wait's first read of the run was awaited outside its own timer: through a database
  // connection that went silent, `agent.wait {timeoutMs: 3000}` answered after the pool's read
  // timeout (35 s).
  it("agent.wait answers within its time while the instance's database connections stall", async () => {
    const target = new URL(testPgUrl());
    const proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
    try {
      const {
        instances: [a, b],
      } = await cluster.start(2, { urls: [proxy.urlFor(testPgUrl()), testPgUrl()] });
      const gate = deferred();
      const worker = await TestWorker.start(b!.url, CLUSTER_WORKER_TOKEN, ["main"], async () => {
        await gate.promise;
        return "done";
      });
      workers.push(worker);
      const opA = await cluster.operator(a!);
      const opB = await cluster.operator(b!);
      const sessionKey = "agent:main:cron:stall";
      await opB.call("sessions.create", { key: sessionKey });
      const { runId } = await opB.call<{ runId: string }>("agent", { sessionKey, message: "work" });
      await until(() => worker.runs.length === 1, "B's worker to take the run", 10_000);
      // A's path to the database goes silent: no answer and no error (no reset).
      proxy.stall();
      const began = Date.now();
      const answer = (await opA.request("agent.wait", { runId, timeoutMs: 3000 })) as Refusal;
      const took = Date.now() - began;
      gate.resolve();
      expect(took).toBeLessThan(6_000);
      expect(answer).toMatchObject({ ok: false, error: { code: "UNAVAILABLE", retryable: true } });
    } finally {
      await proxy.stop();
    }
  }, 90_000);
});
