import type { ConfigInput, RunRecord } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import { perTestGateway } from "./testing/per-test-gateway";
import { a2aConfig, nestedSpawns, type TestGateway, type TestWorker } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

const MAIN = "agent:main:main";

function config(overrides: Partial<ConfigInput> = {}): ConfigInput {
  return a2aConfig({ session: { agentToAgent: { maxPingPongTurns: 0 } }, ...overrides });
}

type Result = Record<string, unknown> & { status: string };

const edge = perTestGateway();
const { workers, startWorker } = edge;
let gw: TestGateway | undefined;

/** Closes a worker and waits until the gateway no longer counts it. */
async function stopWorker(worker: TestWorker) {
  worker.close();
  workers.splice(workers.indexOf(worker), 1);
  await until(() => gw!.gateway.scheduler.connectedAgents().length === 0, "the worker gone");
}

function tool(op: TestPeer, as: string, name: string, args: Record<string, unknown>): Promise<Result> {
  return op.call<Result>("tools.invoke", { tool: name, args, as });
}

const isAnnounce = (run: TestWorker["runs"][number]) => run.input.provenance.kind === "subagent";

async function spawnRecord(runId: string): Promise<RunRecord> {
  const record = await gw!.gateway.store.runs.get(runId);
  if (!record?.spawn) throw new Error(`no spawn run ${runId}`);
  return record;
}

async function announceRuns(): Promise<RunRecord[]> {
  const runs = await gw!.gateway.store.runs.list({ sessionKey: MAIN });
  return runs.filter((run) => run.origin === "spawn-announce").sort((a, b) => a.createdAt - b.createdAt);
}

describe("spawn announces that do not reach the requester at first (file store)", () => {
  it("an announce interrupted by a graceful restart reaches the requester after the restart", async () => {
    gw = await edge.start(config(), { store: "file" });
    const op = await gw.operator();
    await op.call("sessions.create", { key: MAIN });
    // The requester's turn on the announce is still thinking when the gateway stops.
    const first = await startWorker(async (context) =>
      isAnnounce(context.run) ? { ignore: true } : behaviour()(context),
    );
    const spawned = await tool(op, MAIN, "sessions_spawn", { task: "find the answer", agentId: "research" });
    expect(spawned.status).toBe("accepted");
    await until(() => first.runs.some(isAnnounce), "the announce run assigned");
    await gw.gateway.flows.idle();
    // Not delivered yet: the requester has not taken the findings in.
    expect((await spawnRecord(spawned.runId as string)).spawn!.announce.status).toBe("pending");

    await gw.restart();
    const worker = await startWorker(behaviour({ announceStep: () => "noted the findings" }));
    await until(() => worker.runs.some(isAnnounce), "the announce retried after the restart", 4_000);
    const retried = worker.runs.find(isAnnounce)!;
    expect(retried.sessionKey).toBe(MAIN);
    expect(retried.input.message).toContain("completed successfully");
    expect(retried.input.message).toContain("echo: find the answer");
    await until(
      async () => (await spawnRecord(spawned.runId as string)).spawn!.announce.status === "delivered",
      "the announce delivered",
    );
    const runs = await announceRuns();
    expect(runs.map((run) => run.status)).toEqual(["error", "ok"]);
    expect((await spawnRecord(spawned.runId as string)).spawn!.announce).toMatchObject({
      status: "delivered",
      attempts: 2,
      runId: runs[1]!.runId,
    });
    // Once delivered, another start does not announce it again.
    await gw.restart();
    const third = await startWorker();
    await new Promise((resolve) => setTimeout(resolve, 300));
    await gw.gateway.flows.idle();
    expect(third.runs.filter(isAnnounce)).toHaveLength(0);
    expect(await announceRuns()).toHaveLength(2);
  });

  it("restarts while the announce runs do not use up its attempts: after more of them than three it is still delivered", async () => {
    gw = await edge.start(config(), { store: "file" });
    const op = await gw.operator();
    await op.call("sessions.create", { key: MAIN });
    const silentOnAnnounce = async (context: Parameters<ReturnType<typeof behaviour>>[0]) =>
      isAnnounce(context.run) ? ({ ignore: true } as const) : behaviour()(context);
    let worker = await startWorker(silentOnAnnounce);
    const spawned = await tool(op, MAIN, "sessions_spawn", { task: "find the answer", agentId: "research" });
    await until(() => worker.runs.some(isAnnounce), "the first announce run assigned");
    // Each start retries the announce, and each time the gateway stops before the requester answers.
    for (let restart = 1; restart <= 3; restart++) {
      await gw.restart();
      worker = await startWorker(silentOnAnnounce);
      await until(() => worker.runs.some(isAnnounce), `the announce retried after restart ${restart}`, 4_000);
    }
    await gw.restart();
    await startWorker(behaviour({ announceStep: () => "noted the findings" }));
    await until(
      async () => (await spawnRecord(spawned.runId as string)).spawn!.announce.status === "delivered",
      "the announce delivered after the fourth restart",
      6_000,
    );
    expect((await spawnRecord(spawned.runId as string)).spawn!.announce).toMatchObject({
      status: "delivered",
      attempts: 5,
      lostTries: 4,
    });
    expect((await announceRuns()).map((run) => run.lost ?? run.status)).toEqual([
      "shutdown",
      "shutdown",
      "shutdown",
      "shutdown",
      "ok",
    ]);
  });

  it("an announce whose run fails is retried, and given up after three attempts, recorded", async () => {
    gw = await edge.start(config(), { store: "file" });
    const op = await gw.operator();
    await op.call("sessions.create", { key: MAIN });
    let failures = 1;
    const worker = await startWorker(async (context) => {
      if (isAnnounce(context.run) && failures > 0) {
        failures -= 1;
        return { fail: "model overloaded" };
      }
      return behaviour({ announceStep: () => "noted" })(context);
    });
    const spawned = await tool(op, MAIN, "sessions_spawn", { task: "find more", agentId: "research" });
    await until(
      async () => (await spawnRecord(spawned.runId as string)).spawn!.announce.status === "delivered",
      "the failed announce retried and delivered",
    );
    expect(worker.runs.filter(isAnnounce)).toHaveLength(2);
    expect((await announceRuns()).map((run) => run.status)).toEqual(["error", "ok"]);

    // A requester whose turns always fail: bounded, and the give-up is recorded, never silent.
    failures = 100;
    const doomed = await tool(op, MAIN, "sessions_spawn", { task: "find nothing", agentId: "research" });
    await until(
      async () => (await spawnRecord(doomed.runId as string)).spawn!.announce.status === "failed",
      "the announce given up",
    );
    await gw.gateway.flows.idle();
    const announce = (await spawnRecord(doomed.runId as string)).spawn!.announce;
    expect(announce).toMatchObject({ attempts: 3 });
    expect(announce.lastError).toContain("model overloaded");
    const audit = await op.call<{ entries: Array<{ kind: string; data: Record<string, unknown> }> }>(
      "audit.tail",
      { limit: 100 },
    );
    expect(
      audit.entries.some(
        (entry) => entry.kind === "announce" && entry.data.runId === doomed.runId && entry.data.failed,
      ),
    ).toBe(true);
  });
});

describe("sub-agent archiver and runs still to come on the child (file store)", () => {
  /** A finished child of MAIN, its announce taken in, with a worker for every agent connected. */
  async function finishedChild(op: TestPeer): Promise<string> {
    await op.call("sessions.create", { key: MAIN });
    await startWorker();
    const spawned = await tool(op, MAIN, "sessions_spawn", { task: "look around", agentId: "research" });
    expect(await op.call("agent.wait", { runId: spawned.runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
    });
    await until(
      async () => (await announceRuns()).some((run) => run.status === "ok"),
      "the announce turn ended",
    );
    await gw!.gateway.flows.idle();
    return spawned.childSessionKey as string;
  }

  /**
   * A worker comes and answers the send queued on the child: its exchange is in the child's live
   * transcript, and with nothing more to come the next sweep archives the child.
   */
  async function answeredThenArchived(op: TestPeer, childKey: string, runId: string): Promise<void> {
    await startWorker();
    expect(await op.call("agent.wait", { runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "echo: one more thing",
    });
    await gw!.gateway.flows.idle();
    const child = (await gw!.gateway.store.sessions.get(childKey))!;
    expect(child.archivedAt).toBeUndefined();
    const transcript = await gw!.gateway.store.transcripts.read(child.sessionId, { limit: 100 });
    expect(JSON.stringify(transcript.entries)).toContain("echo: one more thing");
    expect(await gw!.gateway.flows.archiveSweep(Date.now() + 1)).toBe(1);
  }

  /** The next run made on `childKey` (of `origin`, when given) waits for an archiver sweep first. */
  function sweepBeforeRunOn(childKey: string, origin?: string): { swept: number | undefined } {
    const scheduler = gw!.gateway.scheduler;
    const enqueue = scheduler.enqueue.bind(scheduler);
    const sweep: { swept: number | undefined } = { swept: undefined };
    scheduler.enqueue = async (spec) => {
      if (spec.sessionKey === childKey && (!origin || spec.origin === origin) && sweep.swept === undefined)
        sweep.swept = await gw!.gateway.flows.archiveSweep(Date.now() + 1);
      return enqueue(spec);
    };
    return sweep;
  }

  it("does not archive a finished child while a send waits queued on it, and archives it at a later sweep", async () => {
    gw = await edge.start(config(), { store: "file" });
    const op = await gw.operator();
    const childKey = await finishedChild(op);
    // No worker for the child's agent: a follow-up send into the child waits queued.
    await stopWorker(workers[0]!);
    const sent = await tool(op, MAIN, "sessions_send", {
      sessionKey: childKey,
      message: "one more thing",
      timeoutSeconds: 0,
    });
    expect(sent).toMatchObject({ status: "accepted", delivery: { status: "queued" } });

    // The child's window has passed, but archiving it now would end the queued run unrun.
    expect(await gw.gateway.flows.archiveSweep(Date.now() + 1)).toBe(0);
    expect((await gw.gateway.store.sessions.get(childKey))?.archivedAt).toBeUndefined();

    // Before, the run went on against the archived child: its reply was recorded nowhere.
    await answeredThenArchived(op, childKey, sent.runId as string);
    expect((await gw.gateway.store.sessions.get(childKey))?.archivedAt).toBeGreaterThan(0);
  });

  it("a send that looked the child up before a sweep archived it is refused, not run against the archived child", async () => {
    gw = await edge.start(config(), { store: "file" });
    const op = await gw.operator();
    const childKey = await finishedChild(op);
    // The sweep comes in after the send found the child live (its policy checks, admission) and
    // before the send's run is made.
    const sweep = sweepBeforeRunOn(childKey);
    const sent = await tool(op, MAIN, "sessions_send", {
      sessionKey: childKey,
      message: "one more thing",
      timeoutSeconds: 5,
    });
    expect(sweep.swept).toBe(1);
    // Before, the run was made and answered, its message and reply recorded nowhere.
    expect(sent.status).not.toBe("ok");
    expect(JSON.stringify(sent)).toContain("archived");
    const runs = await gw.gateway.store.runs.list({ sessionKey: childKey });
    expect(runs.filter((run) => run.origin === "send")).toHaveLength(0);
  });

  it("a sweep that comes while a send's run into the child is being made leaves the child live", async () => {
    gw = await edge.start(config(), { store: "file" });
    const op = await gw.operator();
    const childKey = await finishedChild(op);
    // No worker: the send's run is put in its lane only after its record and input are written.
    await stopWorker(workers[0]!);
    // The sweep comes in while the run record is being written: in no lane nor the store yet.
    const runs = gw.gateway.store.runs;
    const put = runs.put.bind(runs);
    let swept: number | undefined;
    runs.put = async (record, options) => {
      if (record.sessionKey === childKey && record.origin === "send" && swept === undefined)
        swept = await gw!.gateway.flows.archiveSweep(Date.now() + 1);
      return put(record, options);
    };
    const sent = await tool(op, MAIN, "sessions_send", {
      sessionKey: childKey,
      message: "one more thing",
      timeoutSeconds: 0,
    });
    expect(sent).toMatchObject({ status: "accepted", delivery: { status: "queued" } });
    expect(swept).toBe(0);
    await answeredThenArchived(op, childKey, sent.runId as string);
  });

  it("a send's reply turn into a child archived between turns ends the follow-up instead of leaving it pending", async () => {
    gw = await edge.start(a2aConfig({ session: { agentToAgent: { maxPingPongTurns: 2 } } }), {
      store: "file",
    });
    const op = await gw.operator();
    await op.call("sessions.create", { key: MAIN });
    await startWorker(behaviour({ replyStep: () => "and one more point" }));
    const spawned = await tool(op, MAIN, "sessions_spawn", { task: "look around", agentId: "research" });
    const childKey = spawned.childSessionKey as string;
    expect(await op.call("agent.wait", { runId: spawned.runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
    });
    await until(
      async () =>
        (await gw!.gateway.store.runs.get(spawned.runId as string))?.spawn?.announce.status !== "pending",
      "the announce settled",
    );
    await gw.gateway.flows.idle();

    // The sweep comes between turn 1 (on the requester) and turn 2 (on the child): nothing is queued,
    // running or being created on the child then.
    const sweep = sweepBeforeRunOn(childKey, "reply");
    const sent = await tool(op, MAIN, "sessions_send", {
      sessionKey: childKey,
      message: "one more thing",
      timeoutSeconds: 5,
    });
    expect(sent).toMatchObject({ status: "ok" });
    await gw.gateway.flows.idle();
    expect(sweep.swept).toBe(1);
    // The turn into the archived child is not made: the follow-up ends there, as for a deleted
    // session, rather than staying pending and failing again at every start.
    expect((await gw.gateway.store.runs.get(sent.runId as string))?.followUp).toBe("done");
  });

  it("does not archive a finished child while a sub-agent it spawned is still to report to it", async () => {
    gw = await edge.start(config(nestedSpawns), { store: "file" });
    const op = await gw.operator();
    await op.call("sessions.create", { key: MAIN });
    const worker = await startWorker();
    // The child spawns a grandchild that thinks for a while, and ends its own run at once.
    const task = `call sessions_spawn ${JSON.stringify({ task: "sleep 1500", agentId: "research" })}`;
    const spawned = await tool(op, MAIN, "sessions_spawn", { task, agentId: "research" });
    expect(spawned.status).toBe("accepted");
    const childKey = spawned.childSessionKey as string;
    expect(await op.call("agent.wait", { runId: spawned.runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
    });
    await until(
      () => worker.runs.some((run) => run.input.message === "sleep 1500"),
      "the grandchild running",
    );

    // The child's window has passed, but its grandchild's findings are still to come to it.
    expect(await gw.gateway.flows.archiveSweep(Date.now() + 1)).toBe(0);
    expect((await gw.gateway.store.sessions.get(childKey))?.archivedAt).toBeUndefined();

    // Once the grandchild has reported to the child (and the child to its requester), it goes.
    await until(
      async () =>
        (await gw!.gateway.store.runs.list({ origins: ["spawn"], pendingAnnounce: true })).length === 0,
      "every announce delivered",
      10_000,
    );
    await gw.gateway.flows.idle();
    expect(await gw.gateway.flows.archiveSweep(Date.now() + 1)).toBeGreaterThanOrEqual(1);
    expect((await gw.gateway.store.sessions.get(childKey))?.archivedAt).toBeGreaterThan(0);
  });
});
