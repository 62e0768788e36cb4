import { connect, serve } from "@switchboard/client";
import { adminQuery, TcpProxy, testPgUrl } from "@switchboard/store-pg/testing";
import { describe, expect, it } from "vitest";
import type { ChildGateway } from "../testing/child-gateway";
import { CLUSTER_WORKER_TOKEN, useClusterProcesses } from "../testing/cluster-processes";
import { TestWorker } from "../testing/test-gateway";
import { type EventFrame, TestPeer } from "../testing/test-peer";

/**
 * Scale-out (spec scale-out.md): 2–3 real gateway processes on one PostgreSQL schema act as one
 * gateway — shared secrets, one event order with resume on another instance, sessions and audit
 * across instances, one active run per lane cluster-wide, idempotency keys, waits answered on any
 * instance, and kill -9 of an instance (its runs end within 10 s, waits elsewhere answer, nothing
 * acknowledged is lost). Each test has a schema of its own, dropped afterwards.
 */

const cluster = await useClusterProcesses("cluster.int.test", "sbgwclu");
const WORKER_TOKEN = CLUSTER_WORKER_TOKEN;
/** The schema of the test's cluster (one per test). */
let currentSchema = "";

/** A TCP proxy in front of the test database, to cut an instance off from it and back. */
async function startPgProxy(): Promise<TcpProxy> {
  cluster.requirePostgres();
  const target = new URL(testPgUrl());
  const proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
  await proxy.start();
  return proxy;
}

/** Instances on one fresh schema (see `ClusterProcesses.start`). */
async function startCluster(
  count: number,
  url = testPgUrl(),
  options: { flowWaitSliceMs?: number } = {},
): Promise<ChildGateway[]> {
  const { schema, instances } = await cluster.start(count, { url, ...options });
  currentSchema = schema;
  return instances;
}

interface Connected {
  peer: TestPeer;
  server: { instanceId: string; epoch?: string };
}

async function operator(gateway: ChildGateway): Promise<Connected> {
  const peer = await TestPeer.open(gateway.url);
  const response = await peer.request("connect", {
    protocol: 1,
    client: { name: "cluster-test", version: "0" },
    auth: { token: gateway.token },
    role: "operator",
  });
  if (!response.ok) throw new Error(`connect failed: ${response.error?.message}`);
  return { peer, server: (response.result as { server: Connected["server"] }).server };
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

describe.skipIf(cluster.skip)("gateway instances on one database", () => {
  it("share secrets, sessions, one event order (resumed on another instance) and the audit chains", async () => {
    const [a, b] = await startCluster(2);
    // The operator token comes from the database: the same on every instance.
    expect(b!.token).toBe(a!.token);
    const opA = await operator(a!);
    const opB = await operator(b!);
    expect(opA.server.instanceId).not.toBe(opB.server.instanceId);
    expect(opA.server.epoch).toBeDefined();
    expect(opA.server.epoch).toBe(opB.server.epoch);

    const { seq: start } = await opB.peer.call<{ seq: number }>("events.subscribe", {});
    // Creating one key on both instances at once gives one session.
    const [onA, onB] = await Promise.all([
      opA.peer.call<{ sessionId: string }>("sessions.create", { key: "agent:main:cron:same" }),
      opB.peer.call<{ sessionId: string }>("sessions.create", { key: "agent:main:cron:same" }),
    ]);
    expect(onA.sessionId).toBeDefined();
    expect(onB.sessionId).toBe(onA.sessionId);
    for (let i = 0; i < 5; i++) {
      await Promise.all([
        opA.peer.call("sessions.create", { key: `agent:main:cron:a${i}` }),
        opB.peer.call("sessions.create", { key: `agent:main:cron:b${i}` }),
      ]);
    }
    // B's subscriber gets A's events too, in one increasing order.
    const keyOf = (event: EventFrame) => (event.payload as { key?: string }).key;
    for (const key of ["agent:main:cron:a4", "agent:main:cron:b4"]) {
      await opB.peer.waitForEvent((event) => event.event === "session.updated" && keyOf(event) === key);
    }
    const seen = opB.peer.events.map((event) => event.seq);
    expect(seen.every((seq, i) => i === 0 || seq > seen[i - 1]!)).toBe(true);

    // Resuming on the other instance from B's first cursor gives the same events: none lost,
    // none repeated, same order.
    const last = seen.at(-1)!;
    const resumed = await operator(a!);
    await resumed.peer.call("events.subscribe", { after: start });
    await resumed.peer.waitForEvent((event) => event.seq === last);
    const replayed = resumed.peer.events.filter((event) => event.seq <= last);
    expect(replayed.map((event) => [event.seq, event.event])).toEqual(
      opB.peer.events.filter((event) => event.seq <= last).map((event) => [event.seq, event.event]),
    );

    // The audit covers both instances' records and notices an edited one.
    const sessionsAudited = async (op: Connected) =>
      (await op.peer.call<{ entries: Array<{ kind: string }> }>("audit.tail", { limit: 100 })).entries.length;
    expect(await sessionsAudited(opA)).toBeGreaterThanOrEqual(11);
    // `after` is a cluster-wide position: paging through A and B alternately gives every
    // record of both instances once, in one order.
    type Page = { entries: Array<{ chainId: string; index: number; position: number }> };
    const everything = await opA.peer.call<Page>("audit.tail", { limit: 1000, after: -1 });
    const paged: Page["entries"] = [];
    for (let after = -1, turn = 0; ; turn++) {
      const page = await [opA, opB][turn % 2]!.peer.call<Page>("audit.tail", { limit: 4, after });
      if (page.entries.length === 0) break;
      paged.push(...page.entries);
      after = page.entries.at(-1)!.position;
    }
    expect(paged.map((entry) => `${entry.chainId}#${entry.index}`)).toEqual(
      everything.entries.map((entry) => `${entry.chainId}#${entry.index}`),
    );
    expect(new Set(paged.map((entry) => entry.chainId)).size).toBe(2);
    const verdict = await opA.peer.call<{ ok: boolean; entries: number }>("audit.verify", {});
    expect(verdict).toMatchObject({ ok: true });
    expect(verdict.entries).toBeGreaterThanOrEqual(11);
    await opB.peer.call("audit.verify", {}).then((result) => expect(result).toMatchObject({ ok: true }));
    const schema = currentSchema;
    await adminQuery(
      `UPDATE "${schema}".audit_chain_records SET record = jsonb_set(record::jsonb, '{kind}', '"edited"')::json
       WHERE (chain_id, idx) = (SELECT chain_id, idx FROM "${schema}".audit_chain_records ORDER BY at, idx LIMIT 1 OFFSET 3)`,
    );
    expect(await opB.peer.call("audit.verify", {})).toMatchObject({ ok: false });
  }, 20_000);

  it("keeps one active run per session lane across instances; waits and idempotency keys work anywhere", async () => {
    const [a, b] = await startCluster(2);
    let running = 0;
    let overlap = 0;
    const slow = async (context: { run: { input: { message: string } } }) => {
      running += 1;
      overlap = Math.max(overlap, running);
      await sleep(150);
      running -= 1;
      return `done: ${context.run.input.message}`;
    };
    const workers = [
      await TestWorker.start(a!.url, WORKER_TOKEN, ["main"], slow),
      await TestWorker.start(b!.url, WORKER_TOKEN, ["main"], slow),
    ];
    const opA = await operator(a!);
    const opB = await operator(b!);
    // Four runs on one session, accepted by both instances at once: they never run together.
    const sends = await Promise.all(
      [opA, opB, opA, opB].map((op, i) =>
        op.peer.call<{ runId: string }>("chat.send", { sessionKey: "main", message: `m${i}` }),
      ),
    );
    // Each wait is answered by the instance that did not accept the run.
    const results = await Promise.all(
      sends.map(({ runId }, i) =>
        (i % 2 === 0 ? opB : opA).peer.call<{
          status: string;
          reply?: string;
          startedAt?: number;
          endedAt?: number;
        }>("agent.wait", {
          runId,
          timeoutMs: 10_000,
        }),
      ),
    );
    expect(results.map((result) => result.status)).toEqual(["ok", "ok", "ok", "ok"]);
    // Answered from the run's end as stored, whether it came with the event or from a read.
    for (const result of results) {
      expect(result.startedAt).toEqual(expect.any(Number));
      expect(result.endedAt).toBeGreaterThanOrEqual(result.startedAt!);
    }
    expect(results.map((result) => result.reply)).toEqual(["done: m0", "done: m1", "done: m2", "done: m3"]);
    expect(overlap).toBe(1);
    // Each ran once, on whichever instance held the lane when it came free (its queue is the
    // cluster's: a lane's runs tend to stay with the instance that ran the one before).
    expect(workers[0]!.runs.length + workers[1]!.runs.length).toBe(4);

    // The same idempotency key on both instances at once: one run.
    const [first, second] = await Promise.all(
      [opA, opB].map((op) =>
        op.peer.call<{ runId: string }>("chat.send", {
          sessionKey: "agent:main:cron:idem",
          message: "once",
          idempotencyKey: "cluster-idem-1",
        }),
      ),
    );
    expect(second!.runId).toBe(first!.runId);
    expect(await opB.peer.call("agent.wait", { runId: first!.runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
    });
    for (const worker of workers) worker.close();
  }, 20_000);

  it("runs a message accepted on one instance on a worker of another, also one that connects later", async () => {
    const [a, b, c] = await startCluster(3);
    const opA = await operator(a!);
    const opC = await operator(c!);
    const connectedOn = async (op: Connected) =>
      (
        await op.peer.call<{ agents: Array<{ id: string; connected: boolean }> }>("agents.list", {})
      ).agents.find((agent) => agent.id === "main")?.connected;
    expect(await connectedOn(opA)).toBe(false);
    // A run nobody serves, with a timeout: it ends `timeout` although it left its instance.
    const unserved = await opA.peer.call<{ runId: string }>("agent", {
      sessionKey: "agent:helper:cron:unserved",
      message: "nobody",
      timeoutSeconds: 1,
    });
    // No worker anywhere yet: the run waits in the cluster's queue.
    const early = await opA.peer.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "early",
    });
    await sleep(100);
    const worker = await TestWorker.start(
      b!.url,
      WORKER_TOKEN,
      ["main"],
      (context) => `b: ${context.run.input.message}`,
    );
    // A worker on B counts as connected on A and C too (presence read every second).
    const seenBy = Date.now() + 5000;
    while (!((await connectedOn(opA)) && (await connectedOn(opC))) && Date.now() < seenBy) await sleep(100);
    expect(await connectedOn(opA)).toBe(true);
    expect(await connectedOn(opC)).toBe(true);
    expect(await opC.peer.call("agent.wait", { runId: early.runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
      reply: "b: early",
    });
    // With the worker connected: sends on A and C are executed on B, in order per session.
    const sent = [];
    for (let i = 0; i < 6; i++) {
      const op = i % 2 === 0 ? opA : opC;
      sent.push(await op.peer.call<{ runId: string }>("chat.send", { sessionKey: "main", message: `n${i}` }));
    }
    const results = await Promise.all(
      sent.map(({ runId }) => opA.peer.call<{ reply?: string }>("agent.wait", { runId, timeoutMs: 10_000 })),
    );
    expect(results.map((result) => result.reply)).toEqual([0, 1, 2, 3, 4, 5].map((i) => `b: n${i}`));
    expect(worker.runs.map((run) => run.input.message)).toEqual([
      "early",
      "n0",
      "n1",
      "n2",
      "n3",
      "n4",
      "n5",
    ]);
    // The worker's history holds what every instance wrote into the session: the inputs were
    // written on A and C, the replies on B.
    const history5 = worker.runs.at(-1)!.history as Array<{
      role: string;
      content: Array<{ text?: string }>;
    }>;
    const lastHistory = history5.map(
      (message) => `${message.role}: ${message.content.map((part) => part.text ?? "").join("")}`,
    );
    expect(lastHistory.filter((line) => line.startsWith("user: "))).toEqual(
      ["early", "n0", "n1", "n2", "n3", "n4"].map((text) => `user: ${text}`),
    );
    expect(lastHistory.at(-1)).toBe("assistant: b: n4");
    const history = await opC.peer.call<{ messages: Array<{ role: string }> }>("sessions.history", {
      sessionKey: "main",
      limit: 50,
    });
    expect(history.messages.filter((message) => message.role === "assistant")).toHaveLength(7);
    expect(await opC.peer.call("agent.wait", { runId: unserved.runId, timeoutMs: 10_000 })).toMatchObject({
      status: "timeout",
      error: "run timed out after 1s",
    });
    worker.close();
  }, 20_000);

  it("runs a session's messages in the order they were accepted, whether or not their instance has the worker", async () => {
    const [a, b] = await startCluster(2);
    // The worker is on B and slow: while it runs one message the next ones wait, those accepted
    // on A in the cluster's queue and those accepted on B on B itself.
    const worker = await TestWorker.start(b!.url, WORKER_TOKEN, ["main"], async (context) => {
      await sleep(120);
      return `done: ${context.run.input.message}`;
    });
    const opA = await operator(a!);
    const opB = await operator(b!);
    const sent: Array<{ runId: string }> = [];
    for (let i = 0; i < 8; i++) {
      const op = i % 2 === 0 ? opA : opB;
      sent.push(await op.peer.call<{ runId: string }>("chat.send", { sessionKey: "main", message: `m${i}` }));
    }
    for (const { runId } of sent)
      expect(await opA.peer.call("agent.wait", { runId, timeoutMs: 15_000 })).toMatchObject({
        status: "ok",
      });
    expect(worker.runs.map((run) => run.input.message)).toEqual(Array.from({ length: 8 }, (_, i) => `m${i}`));
    worker.close();
  }, 30_000);

  it("hands a run its instance's busy workers cannot take yet to a free worker on another instance", async () => {
    const [a, b] = await startCluster(2);
    const ended: string[] = [];
    const reply = (where: string, ms: number) => async (context: { run: { input: { message: string } } }) => {
      await sleep(ms);
      ended.push(`${where}: ${context.run.input.message}`);
      return `${where}: ${context.run.input.message}`;
    };
    // One run at a time each: A's worker is slow, B's quick.
    const onA = await TestWorker.start(a!.url, WORKER_TOKEN, ["main"], reply("a", 1500), {
      concurrency: 1,
    });
    const onB = await TestWorker.start(b!.url, WORKER_TOKEN, ["main"], reply("b", 10), { concurrency: 1 });
    const opA = await operator(a!);
    const first = await opA.peer.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "first",
    });
    await sleep(100);
    // Another session, accepted on A while A's worker is busy: B's free worker runs it now.
    const second = await opA.peer.call<{ runId: string }>("agent", {
      sessionKey: "agent:main:cron:second",
      message: "second",
    });
    expect(await opA.peer.call("agent.wait", { runId: second.runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
      reply: "b: second",
    });
    expect(await opA.peer.call("agent.wait", { runId: first.runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
      reply: "a: first",
    });
    expect(ended).toEqual(["b: second", "a: first"]);
    onA.close();
    onB.close();
  }, 20_000);

  it("takes the reply turns of a send whose target runs longer than one wait on another instance", async () => {
    // A flow waits for a run in slices (60 s; 1 s here) and waits again while it goes on. A run
    // held on another instance answered "not yet" in other words than a local one, so the flow
    // took it for an end: no reply turns, no announce, for any target thinking over a minute.
    const [a, b] = await startCluster(2, testPgUrl(), { flowWaitSliceMs: 1000 });
    const asker = await TestWorker.start(a!.url, WORKER_TOKEN, ["main"], () => "REPLY_SKIP");
    const slow = await TestWorker.start(b!.url, WORKER_TOKEN, ["relay"], async () => {
      await sleep(2500);
      return "pong after a long think";
    });
    const opA = await operator(a!);
    const requester = "agent:main:cron:patient";
    const target = "agent:relay:cron:slow";
    await opA.peer.call("sessions.create", { key: requester });
    await opA.peer.call("sessions.create", { key: target });
    // A reads which agents have workers elsewhere every second.
    await sleep(1500);
    const sent = await opA.peer.call<{ status: string }>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: target, message: "ping", timeoutSeconds: 0 },
      as: requester,
    });
    expect(sent.status).toBe("accepted");
    // The target's reply comes back to the requester as reply turn 1 (agent-to-agent.md).
    const deadline = Date.now() + 10_000;
    while (asker.runs.length === 0 && Date.now() < deadline) await sleep(50);
    expect(asker.runs.map((run) => run.input.message)).toEqual(["pong after a long think"]);
    asker.close();
    slow.close();
  }, 30_000);

  it("reassigns the run of a worker that disconnects mid-run to a worker of another instance", async () => {
    const [a, b] = await startCluster(2);
    // A's worker takes the run and goes away without answering; B's worker is the only one left.
    const leaving = await TestWorker.start(a!.url, WORKER_TOKEN, ["main"], () => ({ ignore: true }));
    const staying = await TestWorker.start(
      b!.url,
      WORKER_TOKEN,
      ["main"],
      (context) => `b: ${context.run.input.message}`,
    );
    const opA = await operator(a!);
    // A reads which agents have workers elsewhere every second.
    await sleep(1500);
    const run = await opA.peer.call<{ runId: string }>("agent", {
      sessionKey: "agent:main:cron:moved",
      message: "hello",
      timeoutSeconds: 20,
    });
    // Waiting on A, where the run started.
    const waiting = opA.peer.call("agent.wait", { runId: run.runId, timeoutMs: 15_000 });
    const deadline = Date.now() + 5000;
    while (leaving.runs.length === 0 && Date.now() < deadline) await sleep(20);
    expect(leaving.runs).toHaveLength(1);
    leaving.close();
    // The waiting send on A hears the run's end from B; the session's lane is free again after it.
    expect(await waiting).toMatchObject({ status: "ok", reply: "b: hello" });
    expect(staying.runs.map((run) => run.input.message)).toEqual(["hello"]);
    const next = await opA.peer.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:moved",
      message: "after",
    });
    expect(await opA.peer.call("agent.wait", { runId: next.runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
      reply: "b: after",
    });
    staying.close();
  }, 30_000);

  it("moves SDK clients and workers of a killed instance to another URL; the event stream resumes without loss", async () => {
    const [a, b] = await startCluster(2);
    const urls = [a!.url, b!.url];
    const reconnect = { initialDelayMs: 20, maxDelayMs: 100 };
    const worker = await serve(
      { url: urls, token: WORKER_TOKEN, reconnect, requestTimeoutMs: 5_000 },
      ["main"],
      async (run) => ({ reply: `served: ${run.input.message}` }),
    );
    const subscriber = await connect({ url: urls, token: a!.token, role: "operator", reconnect });
    const seen: Array<{ seq: number; key?: string }> = [];
    void (async () => {
      for await (const event of subscriber.events({ highWaterMark: 100_000 })) {
        if (event.event !== "session.updated") continue;
        seen.push({ seq: event.seq, key: (event.payload as { key?: string }).key });
      }
    })().catch(() => undefined);
    await subscriber.subscribe();
    try {
      // Writes keep coming through B while A (where both SDK peers are) is killed.
      const opB = await operator(b!);
      const created: string[] = [];
      let writing = true;
      const writer = (async () => {
        for (let i = 0; writing; i++) {
          const key = `agent:main:cron:stream-${i}`;
          await opB.peer.call("sessions.create", { key });
          created.push(key);
        }
      })();
      await sleep(300);
      a!.process.kill("SIGKILL");
      await sleep(1000);
      writing = false;
      await writer;
      const deadline = Date.now() + 10_000;
      const wanted = new Set(created);
      while (seen.filter((event) => event.key && wanted.has(event.key)).length < wanted.size) {
        if (Date.now() > deadline) throw new Error("the resumed stream misses events");
        await sleep(50);
      }
      const keys = seen.map((event) => event.key);
      expect(new Set(keys).size).toBe(keys.length);
      expect(seen.every((event, i) => i === 0 || event.seq > seen[i - 1]!.seq)).toBe(true);
      // The worker moved to B too: a new message is served.
      const { runId } = await opB.peer.call<{ runId: string }>("chat.send", {
        sessionKey: "main",
        message: "hi",
      });
      expect(await opB.peer.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({
        status: "ok",
        reply: "served: hi",
      });
    } finally {
      await subscriber.close();
      await worker.stop();
    }
  }, 30_000);

  it("counts a session's send budget across instances, also for sends decided at the same moment", async () => {
    const [a, b] = await startCluster(2);
    const ops = [await operator(a!), await operator(b!)];
    await ops[0]!.peer.call("sessions.create", { key: "agent:main:cron:caller" });
    await ops[0]!.peer.call("sessions.create", { key: "agent:main:cron:callee" });
    const send = (i: number) =>
      ops[i % 2]!.peer.call<{ status: string; error?: string }>("tools.invoke", {
        tool: "sessions_send",
        args: { sessionKey: "agent:main:cron:callee", message: `m${i}`, timeoutSeconds: 0 },
        as: "agent:main:cron:caller",
      });
    // budgetPerMinute is 4 (test/cluster-gateway.mjs): twelve sends at once, half on each
    // instance, and then two more one after the other.
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => send(i)));
    results.push(await send(12), await send(13));
    const passed = results.filter((result) => result.status !== "forbidden");
    const refused = results.filter((result) => result.status === "forbidden");
    expect(passed).toHaveLength(4);
    // A lost race is refused by the same rule as a plain over-budget call, and audited like it.
    for (const result of refused) expect(result.error).toMatch(/^budget exhausted: agent:main:cron:caller/);
    const { entries } = await ops[1]!.peer.call<{
      entries: Array<{ kind: string; data?: { ruleId?: string } }>;
    }>("audit.tail", { limit: 200 });
    const blocked = entries.filter((entry) => entry.kind === "policy.blocked");
    expect(blocked).toHaveLength(10);
    expect(blocked.every((entry) => entry.data?.ruleId === "a2a.budget")).toBe(true);
  }, 20_000);

  it("refuses a wait cycle whose sends pass through different instances", async () => {
    const [a, b] = await startCluster(2);
    const first = "agent:main:cron:ring";
    const second = "agent:helper:cron:ring";
    // main's worker (on A) asks helper and waits; helper's worker (on B) asks main back and waits.
    let answerBack: Record<string, unknown> | undefined;
    await TestWorker.start(a!.url, WORKER_TOKEN, ["main"], async (context) => {
      if (context.run.sessionKey !== first || context.run.input.message !== "start") return "ack";
      const result = await context.invokeTool("sessions_send", {
        sessionKey: second,
        message: "your turn",
        timeoutSeconds: 15,
      });
      return `helper said: ${String(result.reply ?? result.status)}`;
    });
    await TestWorker.start(b!.url, WORKER_TOKEN, ["helper"], async (context) => {
      if (context.run.sessionKey !== second) return "ack";
      answerBack = await context.invokeTool("sessions_send", {
        sessionKey: first,
        message: "and yours",
        timeoutSeconds: 15,
      });
      return `back: ${String(answerBack.status)}`;
    });
    const opA = await operator(a!);
    await opA.peer.call("sessions.create", { key: first });
    await opA.peer.call("sessions.create", { key: second });
    const { runId } = await opA.peer.call<{ runId: string }>("chat.send", {
      sessionKey: first,
      message: "start",
    });
    const result = await opA.peer.call<{ status: string; reply?: string }>("agent.wait", {
      runId,
      timeoutMs: 15_000,
    });
    // Refused at once (a cycle), not left to time out.
    expect(answerBack).toMatchObject({ status: "forbidden" });
    expect(String(answerBack!.error)).toContain("cycle");
    expect(result).toMatchObject({ status: "ok", reply: "helper said: back: forbidden" });
  }, 30_000);

  it("counts a requester's children across instances for maxChildren, also for spawns decided at the same moment", async () => {
    const [a, b] = await startCluster(2);
    const ops = [await operator(a!), await operator(b!)];
    await ops[0]!.peer.call("sessions.create", { key: "agent:main:cron:parent" });
    // maxChildren is 3 and the budget 4 (test/cluster-gateway.mjs); no worker, so every child
    // stays queued (active). Four spawns at once, two on each instance: one must be refused.
    const results = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        ops[i % 2]!.peer.call<{ status: string; error?: string }>("tools.invoke", {
          tool: "sessions_spawn",
          args: { task: `child ${i}` },
          as: "agent:main:cron:parent",
        }),
      ),
    );
    const refused = results.filter((result) => result.status === "forbidden");
    expect(refused).toHaveLength(1);
    expect(refused[0]!.error).toMatch(
      /^spawn not allowed: agent:main:cron:parent already has 3 active children/,
    );
    const children = await ops[1]!.peer.call<{ sessions: unknown[] }>("sessions.list", {
      spawnedBy: "agent:main:cron:parent",
    });
    expect(children.sessions).toHaveLength(3);
    // Each instance lists the cluster's runs, not only the ones it holds.
    for (const op of ops) {
      const { runs } = await op.peer.call<{ runs: Array<{ status: string; origin: string }> }>(
        "runs.list",
        {},
      );
      expect(runs.filter((run) => run.status === "queued" && run.origin === "spawn")).toHaveLength(3);
    }
  }, 20_000);

  it("answers UNAVAILABLE while PostgreSQL is unreachable, loses nothing acknowledged and recovers", async () => {
    const proxy = await startPgProxy();
    try {
      const [a, b] = await startCluster(2, proxy.urlFor(testPgUrl()));
      const ops = [await operator(a!), await operator(b!)];
      const acknowledged: string[] = [];
      const failures = new Map<string, number>();
      let stop = false;
      let n = 0;
      const load = ops.map(async (op, side) => {
        while (!stop) {
          const key = `agent:main:cron:load-${side}-${n++}`;
          const response = await op.peer.request("sessions.create", { key });
          if (response.ok) acknowledged.push(key);
          else {
            const code = response.error?.code ?? "?";
            failures.set(code, (failures.get(code) ?? 0) + 1);
            await sleep(20);
          }
        }
      });
      await sleep(300);
      const before = acknowledged.length;
      await proxy.stop();
      await sleep(1500);
      // Cut off: requests fail, and only with UNAVAILABLE.
      expect([...failures.keys()]).toEqual(["UNAVAILABLE"]);
      const during = acknowledged.length;
      await proxy.start();
      // Back: both instances serve again by themselves.
      const until = Date.now() + 10_000;
      while (acknowledged.length < during + 20 && Date.now() < until) await sleep(50);
      stop = true;
      await Promise.all(load);
      expect(before).toBeGreaterThan(0);
      expect(acknowledged.length).toBeGreaterThanOrEqual(during + 20);
      expect([...failures.keys()]).toEqual(["UNAVAILABLE"]);
      // Every acknowledged create is there, seen from either instance.
      const listed = await ops[1]!.peer.call<{ sessions: Array<{ key: string }> }>("sessions.list", {
        limit: 1000,
      });
      const keys = new Set(listed.sessions.map((row) => row.key));
      for (const key of acknowledged) expect(keys.has(key)).toBe(true);
      // Events flow across instances again.
      await ops[1]!.peer.call("events.subscribe", {});
      await ops[0]!.peer.call("sessions.create", { key: "agent:main:cron:after-outage" });
      await ops[1]!.peer.waitForEvent(
        (event) =>
          event.event === "session.updated" &&
          (event.payload as { key?: string }).key === "agent:main:cron:after-outage",
      );
    } finally {
      await proxy.stop();
    }
  }, 30_000);

  /** A reaching the database directly and B through `proxy`, on one schema. */
  async function pairBehindProxy(proxy: TcpProxy): Promise<[ChildGateway, ChildGateway]> {
    const { schema, instances } = await cluster.start(2, { urls: [testPgUrl(), proxy.urlFor(testPgUrl())] });
    currentSchema = schema;
    return [instances[0]!, instances[1]!];
  }

  it("resumes a client past an instance's reader that is behind: nothing at or below `after` again", async () => {
    const proxy = await startPgProxy();
    try {
      const [a, b] = await pairBehindProxy(proxy);
      const opA = await operator(a);
      const opB = await operator(b);
      await opA.peer.call("events.subscribe", {});
      // B loses its database for a moment (well inside its lease); A goes on publishing.
      await proxy.stop();
      for (let i = 0; i < 3; i++) await opA.peer.call("sessions.create", { key: `agent:main:cron:lag${i}` });
      await opA.peer.waitForEvent(
        (event) => event.event === "session.updated" && event.payload.key === "agent:main:cron:lag2",
      );
      const cursor = opA.peer.events.at(-1)!.seq;
      // The client resumes on B from its cursor as soon as B's database is back; B's reader has not
      // read A's events yet. Before, B answered with its own old position and later sent the
      // client every event between it and the cursor again.
      await proxy.start();
      let resumed: { seq: number } | undefined;
      for (let tries = 0; !resumed; tries++) {
        const response = await opB.peer.request("events.subscribe", { after: cursor });
        if (response.ok) resumed = response.result as { seq: number };
        else if (tries > 50) throw new Error(`subscribe failed: ${response.error?.message}`);
        else await sleep(50);
      }
      expect(resumed.seq).toBeGreaterThanOrEqual(cursor);
      await opA.peer.call("sessions.create", { key: "agent:main:cron:after" });
      await opB.peer.waitForEvent(
        (event) => event.event === "session.updated" && event.payload.key === "agent:main:cron:after",
        5000,
      );
      expect(opB.peer.events.filter((event) => event.seq <= cursor).map((event) => event.seq)).toEqual([]);
    } finally {
      await proxy.stop();
    }
  }, 20_000);

  it("fails an SDK client over to an instance whose reader is behind: each event once, in order", async () => {
    const proxy = await startPgProxy();
    const [a, b] = await pairBehindProxy(proxy);
    const client = await connect({
      url: [a.url, b.url],
      token: a.token,
      role: "operator",
      reconnect: { initialDelayMs: 20, maxDelayMs: 100 },
    });
    const seen: Array<{ seq: number; key?: string }> = [];
    void (async () => {
      for await (const event of client.events({ highWaterMark: 100_000 })) {
        if (event.event !== "session.updated") continue;
        seen.push({ seq: event.seq, key: (event.payload as { key?: string }).key });
      }
    })().catch(() => undefined);
    const saw = async (key: string) => {
      const deadline = Date.now() + 8000;
      while (!seen.some((event) => event.key === key) && Date.now() < deadline) await sleep(10);
      expect(seen.some((event) => event.key === key)).toBe(true);
    };
    try {
      await client.subscribe();
      const opA = await operator(a);
      // B's database connection drops for a moment while A publishes.
      await proxy.stop();
      for (let i = 0; i < 3; i++) await opA.peer.call("sessions.create", { key: `agent:main:cron:sdk${i}` });
      await saw("agent:main:cron:sdk2");
      // A dies just as B's database comes back: the SDK fails over to B and resumes there.
      await proxy.start();
      a.process.kill("SIGKILL");
      await sleep(300);
      const opB = await operator(b);
      await opB.peer.call("sessions.create", { key: "agent:main:cron:sdk-after" });
      await saw("agent:main:cron:sdk-after");
      const keys = seen.map((event) => event.key);
      expect(keys.filter((key, i) => keys.indexOf(key) !== i)).toEqual([]);
      expect(seen.every((event, i) => i === 0 || event.seq > seen[i - 1]!.seq)).toBe(true);
    } finally {
      await client.close();
      await proxy.stop();
    }
  }, 20_000);

  it("drops the late result of an instance that was cut off from the database and declared lost", async () => {
    const proxy = await startPgProxy();
    try {
      // A reaches the database through the proxy, B directly.
      const { instances } = await cluster.start(2, { urls: [proxy.urlFor(testPgUrl()), testPgUrl()] });
      const [a, b] = instances as [ChildGateway, ChildGateway];
      let finish: (reply: string) => void = () => undefined;
      const late = new Promise<string>((resolve) => {
        finish = resolve;
      });
      const worker = await TestWorker.start(a.url, WORKER_TOKEN, ["main"], () => late);
      const opA = await operator(a);
      const opB = await operator(b);
      const sessionKey = "agent:main:cron:fenced";
      await opA.peer.call("sessions.create", { key: sessionKey });
      const { runId } = await opA.peer.call<{ runId: string }>("chat.send", {
        sessionKey,
        message: "work",
      });
      while (worker.runs.length === 0) await sleep(20);
      // A is cut off past its lease: B's sweep frees the run; no other worker takes it, so it ends error.
      await proxy.stop();
      const ended = await opB.peer.call<{ status: string; error?: string }>("agent.wait", {
        runId,
        timeoutMs: 15_000,
      });
      expect(ended.status).toBe("error");
      expect(ended.error).toContain(opA.server.instanceId);
      // A is back; its worker delivers the result now. A must not write it over the error.
      await proxy.start();
      await sleep(1500);
      finish("late result");
      await sleep(1000);
      expect(await opB.peer.call("agent.wait", { runId, timeoutMs: 1000 })).toMatchObject({
        status: "error",
      });
      const history = await opB.peer.call<{ messages: Array<{ content?: unknown }> }>("sessions.history", {
        sessionKey,
      });
      expect(JSON.stringify(history.messages)).not.toContain("late result");
    } finally {
      await proxy.stop();
    }
  }, 30_000);

  it("reassigns the runs of an instance killed with SIGKILL once, or ends them, within 10 s; waits elsewhere answer; nothing acknowledged is lost", async () => {
    const [a, b] = await startCluster(2);
    // A worker on A that never finishes: its runs are held by A when A dies.
    const stuck = await TestWorker.start(
      a!.url,
      WORKER_TOKEN,
      ["main", "helper", "relay"],
      () => new Promise<never>(() => undefined),
    );
    // Agents main and relay also have a worker on B; agent helper has none elsewhere.
    const other = await TestWorker.start(b!.url, WORKER_TOKEN, ["main"], (context) =>
      // The requester's reply turn of the send below: it ends the ping-pong.
      context.run.input.message === "pong" ? "REPLY_SKIP" : `reassigned: ${context.run.input.message}`,
    );
    await TestWorker.start(b!.url, WORKER_TOKEN, ["relay"], () => "pong");
    const opA = await operator(a!);
    const opB = await operator(b!);
    const acknowledged: string[] = [];
    for (let i = 0; i < 10; i++) {
      const key = `agent:main:cron:kept${i}`;
      await opA.peer.call("sessions.create", { key });
      acknowledged.push(key);
    }
    const mainRuns: string[] = [];
    const helperRuns: string[] = [];
    for (let i = 0; i < 5; i++) {
      const sent = await opA.peer.call<{ runId: string }>("chat.send", {
        sessionKey: `agent:main:cron:kept${i}`,
        message: `held ${i}`,
      });
      mainRuns.push(sent.runId);
    }
    for (let i = 0; i < 3; i++) {
      const sent = await opA.peer.call<{ runId: string }>("chat.send", {
        sessionKey: `agent:helper:cron:lost${i}`,
        message: `lost ${i}`,
      });
      helperRuns.push(sent.runId);
    }
    // A spawn whose child runs on A (no helper worker elsewhere): its announce is still pending
    // when A dies, and must be made once, by another instance.
    const parent = "agent:helper:cron:parent";
    await opA.peer.call("sessions.create", { key: parent });
    const spawned = await opA.peer.call<{ status: string; runId: string; childSessionKey: string }>(
      "tools.invoke",
      { tool: "sessions_spawn", args: { task: "lost child" }, as: parent },
    );
    expect(spawned.status).toBe("accepted");
    helperRuns.push(spawned.runId);
    // A send accepted on A whose follow-up (the reply turn into the asker) A cannot finish.
    const asker = "agent:main:cron:asker";
    await opA.peer.call("sessions.create", { key: asker });
    await opA.peer.call("sessions.create", { key: "agent:relay:cron:target" });
    const sent = await opA.peer.call<{ status: string }>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: "agent:relay:cron:target", message: "ping", timeoutSeconds: 0 },
      as: asker,
    });
    expect(sent.status).toBe("accepted");
    await sleep(200);
    expect(stuck.runs.length).toBe(10);
    expect(other.runs.length).toBe(0);
    const wait = (runId: string) =>
      opB.peer.call<{ status: string; reply?: string; error?: string }>("agent.wait", {
        runId,
        timeoutMs: 20_000,
      });
    const waits = [...mainRuns, ...helperRuns].map(wait);
    const killedAt = Date.now();
    a!.process.kill("SIGKILL");
    const results = await Promise.all(waits);
    const elapsed = Date.now() - killedAt;
    expect(elapsed).toBeLessThan(10_000);
    // Reassigned once to the worker on B.
    expect(results.slice(0, 5)).toEqual(
      [0, 1, 2, 3, 4].map((i) => expect.objectContaining({ status: "ok", reply: `reassigned: held ${i}` })),
    );
    // No other worker of helper: ended, naming the lost instance.
    for (const result of results.slice(5)) {
      expect(result.status).toBe("error");
      expect(result.error).toContain(opA.server.instanceId);
    }
    // Everything A acknowledged is there, read through B.
    const listed = await opB.peer.call<{ sessions: Array<{ key: string }> }>("sessions.list", {
      limit: 100,
    });
    const keys = new Set(listed.sessions.map((row) => row.key));
    for (const key of acknowledged) expect(keys.has(key)).toBe(true);
    // The lost child's announce: made once, by B (A took its run down with it).
    type Audited = { entries: Array<{ kind: string; data: { childKey?: string } }> };
    const announces = async () =>
      (await opB.peer.call<Audited>("audit.tail", { limit: 1000 })).entries.filter(
        (entry) => entry.kind === "announce" && entry.data.childKey === spawned.childSessionKey,
      ).length;
    const until = Date.now() + 10_000;
    while ((await announces()) === 0 && Date.now() < until) await sleep(100);
    await sleep(2500); // a further takeover round of the leader
    expect(await announces()).toBe(1);
    // One announce message in the requester's transcript.
    const history = await opB.peer.call<{ messages: unknown[] }>("sessions.history", {
      sessionKey: parent,
      limit: 200,
    });
    const reports = history.messages.filter((message) =>
      JSON.stringify(message).includes(`Sub-agent ${spawned.childSessionKey} failed`),
    );
    expect(reports).toHaveLength(1);
    // The send's follow-up, taken over by B: the reply reached the asker once.
    const pongs = async () =>
      (
        await opB.peer.call<{ messages: unknown[] }>("sessions.history", { sessionKey: asker, limit: 200 })
      ).messages.filter((message) => JSON.stringify(message).includes('"pong"')).length;
    while ((await pongs()) === 0 && Date.now() < until) await sleep(100);
    expect(await pongs()).toBe(1);
    expect(await opB.peer.call("audit.verify", {})).toMatchObject({ ok: true });
    // The lanes are free again: the worker on B runs a new message on the same session.
    const { runId } = await opB.peer.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:kept0",
      message: "again",
    });
    expect(await opB.peer.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({
      status: "ok",
      reply: "reassigned: again",
    });
  }, 30_000);
});
