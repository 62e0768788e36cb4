import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import {
  a2aConfig,
  startTestGateway,
  type TestGateway,
  TestWorker,
  WORKER_TOKEN,
} from "./testing/test-gateway";
import { type ResponseFrame, TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

// `Gateway.close()` in phases: refuse new work, end running runs, answer the requests being
// handled (bounded by gateway.shutdown.drainMs), then close the sockets and the store, all within
// gateway.shutdown.timeoutMs.

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close().catch(() => undefined);
  gw = undefined;
});

/** The response, or "none" when the request was not answered within `ms` (its socket was closed). */
function answerWithin(request: Promise<ResponseFrame>, ms: number): Promise<ResponseFrame | "none"> {
  return Promise.race([request, new Promise<"none">((resolve) => setTimeout(() => resolve("none"), ms))]);
}

describe("graceful close: requests being handled are answered before their sockets close", () => {
  it("a waiting sessions_send into a running target gets the answer its caller's transcript records", async () => {
    gw = await startTestGateway(a2aConfig());
    const worker = await TestWorker.start(gw.url, WORKER_TOKEN, ["main", "research"], behaviour());
    const op = await gw.operator();
    for (const key of ["main", "agent:research:main"]) {
      const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: key, message: "hello" });
      await op.call("agent.wait", { runId, timeoutMs: 5000 });
    }
    const before = worker.runs.length;
    const waiting = op.request("tools.invoke", {
      tool: "sessions_send",
      as: "main",
      args: { sessionKey: "agent:research:main", message: "silent", timeoutSeconds: 60 },
    });
    await until(() => worker.runs.length > before, "the target's run to be assigned");
    const closed = await gw.gateway.close();
    const answered = await answerWithin(waiting, 2000);
    expect(answered).not.toBe("none");
    const result = (answered as ResponseFrame).result as { status: string; error?: string };
    expect(result).toMatchObject({ status: "error", error: "gateway shutting down" });
    expect(closed).toEqual({ undone: [], requestsCut: 0 });
    worker.close();

    // The transcript holds the same answer the caller got.
    await gw.restart();
    const op2 = await gw.operator();
    const history = await op2.call<{ messages: Array<{ role: string; content?: unknown }> }>(
      "sessions.history",
      { sessionKey: "main", includeTools: true, limit: 50 },
    );
    expect(JSON.stringify(history.messages.at(-1))).toContain("gateway shutting down");
  }, 30_000);

  it("agent.wait on a queued run is answered at close; the run stays queued and runs after the restart", async () => {
    gw = await startTestGateway(a2aConfig());
    const op = await gw.operator();
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "queued",
    });
    const waiting = op.request("agent.wait", { runId, timeoutMs: 60_000 });
    await new Promise((resolve) => setTimeout(resolve, 100));
    await gw.gateway.close();
    const answered = await answerWithin(waiting, 2000);
    expect(answered).not.toBe("none");
    // The wait ended, the run did not: not an error of the run.
    expect((answered as ResponseFrame).result).toMatchObject({ runId, status: "timeout" });

    await gw.restart();
    const worker = await TestWorker.start(gw.url, WORKER_TOKEN, ["main"], behaviour());
    const op2 = await gw.operator();
    expect(await op2.call("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "echo: queued",
    });
    worker.close();
  }, 30_000);

  it("every chat.send in flight is answered, and every run the close left was acknowledged", async () => {
    gw = await startTestGateway(a2aConfig({ gateway: { shutdown: { drainMs: 20_000 } } }));
    const op = await gw.operator();
    const runs = gw.gateway.store.runs as unknown as { put: (...args: unknown[]) => Promise<void> };
    const original = runs.put.bind(runs);
    let puts = 0;
    runs.put = (...args) => {
      puts++;
      return original(...args);
    };
    const count = 100;
    const keys = Array.from({ length: count }, (_, i) => `agent:main:cron:inflight-${i}`);
    const pending = keys.map((key, i) => op.request("chat.send", { sessionKey: key, message: `msg ${i}` }));
    await until(() => puts >= count / 4, "a quarter of the runs written", 30_000);
    const closed = await gw.gateway.close();
    const answers = await Promise.all(pending.map((request) => answerWithin(request, 2000)));
    // Each was accepted, or refused as retryable before anything was written.
    for (const answer of answers) {
      expect(answer).not.toBe("none");
      const frame = answer as ResponseFrame;
      if (!frame.ok) expect(frame.error).toMatchObject({ code: "UNAVAILABLE", retryable: true });
    }
    const accepted = answers.filter((answer) => (answer as ResponseFrame).ok).length;
    expect(accepted).toBeGreaterThan(0);
    expect(closed.requestsCut).toBe(0);

    await gw.restart();
    const worker = await TestWorker.start(
      gw.url,
      WORKER_TOKEN,
      ["main"],
      ({ run }) => `done ${run.input.message}`,
    );
    const op2 = await gw.operator();
    for (let i = 0; i < count; i++) {
      const listed = await op2.call<{ runs: Array<{ runId: string }> }>("runs.list", {
        sessionKey: keys[i],
        statuses: ["queued", "running", "ok", "error", "timeout"],
      });
      const frame = answers[i] as ResponseFrame;
      if (!frame.ok) {
        expect(listed.runs).toEqual([]);
        continue;
      }
      // Accepted: stored, and it runs after the restart (its input was recorded before the close).
      expect(listed.runs.map((run) => run.runId)).toEqual([frame.result!.runId]);
      expect(
        await op2.call("agent.wait", { runId: frame.result!.runId as string, timeoutMs: 5000 }),
      ).toMatchObject({ status: "ok", reply: `done msg ${i}` });
    }
    worker.close();
  }, 120_000);

  it("a spawn in flight at close finishes: the caller hears, and the child has its run", async () => {
    gw = await startTestGateway(a2aConfig());
    const op = await gw.operator();
    // main's session exists (a spawn needs its requester).
    const worker0 = await TestWorker.start(gw.url, WORKER_TOKEN, ["main", "research"], () => "ok");
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "hello" });
    await op.call("agent.wait", { runId, timeoutMs: 5000 });
    worker0.close();
    // The spawn's run write is held a moment, so the close lands while the spawn is half done.
    const runs = gw.gateway.store.runs as unknown as {
      put: (record: { origin?: string }, ...rest: unknown[]) => Promise<void>;
    };
    const original = runs.put.bind(runs);
    let entered = false;
    runs.put = async (record, ...rest) => {
      if (record.origin === "spawn" && !entered) {
        entered = true;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      return original(record, ...rest);
    };
    const call = op.request("tools.invoke", {
      tool: "sessions_spawn",
      as: "main",
      args: { task: "look it up", agentId: "research" },
    });
    await until(() => entered, "the spawn's run write");
    await gw.gateway.close();
    const heard = await answerWithin(call, 2000);
    expect(heard).not.toBe("none");
    expect((heard as ResponseFrame).result).toMatchObject({ status: "accepted" });
    const spawnRunId = (heard as ResponseFrame).result!.runId as string;

    await gw.restart();
    const op2 = await gw.operator();
    const listed = await op2.call<{ sessions: Array<{ key: string }> }>("sessions.list", {
      spawnedBy: "agent:main:main",
    });
    expect(listed.sessions).toHaveLength(1);
    const childRuns = await op2.call<{ runs: Array<{ runId: string; status: string }> }>("runs.list", {
      sessionKey: listed.sessions[0]!.key,
      statuses: ["queued", "running", "ok", "error", "timeout"],
    });
    // Queued at the close: it stays queued for a worker of the next start.
    expect(childRuns.runs).toMatchObject([{ runId: spawnRunId, status: "queued" }]);
  }, 30_000);
});

describe("graceful close: new work during a stop", () => {
  it("new requests are refused UNAVAILABLE (retryable) while a worker still ends the runs it holds", async () => {
    gw = await startTestGateway(a2aConfig());
    const worker = await TestPeer.connect(gw.url, { token: WORKER_TOKEN, role: "agent", agents: ["main"] });
    const op = await gw.operator();
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "first" });
    await worker.waitForEvent((event) => event.event === "run.assigned");
    const { runId: second } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "second",
    });

    await gw.gateway.beginClose();
    const refused = await op.request("chat.send", { sessionKey: "main", message: "too late" });
    expect(refused).toMatchObject({
      ok: false,
      error: { code: "UNAVAILABLE", message: "gateway shutting down", retryable: true },
    });
    // The worker's end of its run still goes through; the queued run is not handed out any more.
    expect(await worker.request("run.complete", { runId, reply: "done" })).toMatchObject({ ok: true });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(worker.events.filter((event) => event.event === "run.assigned")).toHaveLength(1);
    const health = await fetch(`${gw.url.replace(/^ws/, "http")}/healthz`).catch(() => undefined);
    // The listener is closed already: a probe either cannot connect or hears the stop.
    if (health) expect(health.status).toBe(503);

    await gw.gateway.close();
    worker.close();
    await gw.restart();
    const op2 = await gw.operator();
    expect(await op2.call("agent.wait", { runId, timeoutMs: 1000 })).toMatchObject({
      status: "ok",
      reply: "done",
    });
    const [stored] = (
      await op2.call<{ runs: Array<{ runId: string; status: string }> }>("runs.list", {
        sessionKey: "main",
        statuses: ["queued"],
      })
    ).runs;
    expect(stored).toMatchObject({ runId: second, status: "queued" });
  }, 30_000);

  it("a store that never closes does not hold the stop past gateway.shutdown.timeoutMs", async () => {
    gw = await startTestGateway(a2aConfig({ gateway: { shutdown: { drainMs: 100, timeoutMs: 500 } } }));
    const store = gw.gateway.store as unknown as { close: () => Promise<void> };
    const realClose = store.close.bind(store);
    store.close = () => new Promise(() => undefined);
    const started = performance.now();
    const closed = await gw.gateway.close();
    expect(performance.now() - started).toBeLessThan(3000);
    expect(closed.undone).toEqual(["close the store (timed out)"]);
    await realClose();
  });
});

const TARGET = "agent:research:main";

async function queuedSendAtClose(toolCallId: string | undefined) {
  gw = await startTestGateway(a2aConfig({ gateway: { shutdown: { drainMs: 3000 } } }));
  const worker = await TestWorker.start(gw.url, WORKER_TOKEN, ["main", "research"], behaviour());
  const op = await gw.operator();
  for (const key of ["main", TARGET]) {
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: key, message: "hello" });
    await op.call("agent.wait", { runId, timeoutMs: 5000 });
  }
  const before = worker.runs.length;
  // The target's lane is held by a run that never answers...
  const running = op.request("tools.invoke", {
    tool: "sessions_send",
    as: "main",
    args: { sessionKey: TARGET, message: "silent", timeoutSeconds: 60 },
  });
  await until(() => worker.runs.length > before, "the first send's run to be assigned");
  // ...so this send's run stays queued behind it (and stays queued through the stop).
  const queued = op.request("tools.invoke", {
    tool: "sessions_send",
    as: "main",
    ...(toolCallId ? { toolCallId } : {}),
    args: { sessionKey: TARGET, message: "queued behind", timeoutSeconds: 60 },
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const started = performance.now();
  const closed = await gw.gateway.close();
  const closeMs = Math.round(performance.now() - started);
  const answers = [await answerWithin(running, 2000), await answerWithin(queued, 2000)];
  worker.close();
  return { closed, closeMs, answers };
}

describe("a graceful stop answers a tools.invoke waiting on a queued run", () => {
  it("without a toolCallId", async () => {
    const { closed, answers } = await queuedSendAtClose(undefined);
    expect(answers[1]).not.toBe("none");
    expect(closed.requestsCut).toBe(0);
  }, 60_000);

  it("with a toolCallId (a tracked, cancellable call): not cut after drainMs", async () => {
    const { closed, closeMs, answers } = await queuedSendAtClose("tc-1");
    expect(closed.requestsCut).toBe(0);
    expect(closeMs).toBeLessThan(2500);
    expect(answers[1]).not.toBe("none");
  }, 60_000);
});

// beginClose: "no run handed to a worker any more". A worker that went during the stop window
// (between beginClose and close, where `switchboard up` stops its worker) had its running run
// dispatched to another connected worker, which then started work the close ended a moment later.
describe("after beginClose", () => {
  it("after beginClose, a departing worker's run is not dispatched to another worker", async () => {
    gw = await startTestGateway(a2aConfig());
    const w1 = await TestWorker.start(gw.url, WORKER_TOKEN, ["main"], behaviour(), { concurrency: 1 });
    const op = await gw.operator();
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "silent",
    });
    await until(() => w1.runs.length === 1, "the run assigned to w1");
    const w2 = await TestWorker.start(gw.url, WORKER_TOKEN, ["main"], behaviour(), { concurrency: 1 });

    await gw.gateway.beginClose();
    w1.close();
    await new Promise((resolve) => setTimeout(resolve, 1000));

    expect(w2.runs.map((run) => run.runId)).not.toContain(runId);
    w2.close();
  }, 30_000);
});
