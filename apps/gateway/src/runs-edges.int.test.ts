import type { SessionEntry } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import { perTestGateway } from "./testing/per-test-gateway";
import { a2aConfig, type TestGateway, TestWorker, WORKER_TOKEN as WORKER } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

const config = a2aConfig;

type Result = Record<string, unknown> & { status: string };

const edge = perTestGateway();
const { workers, startWorker } = edge;
let gw: TestGateway | undefined;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe("runs and agent-to-agent flows off the usual paths (file store)", () => {
  it("a fire-and-forget send still queued at a graceful restart gets its reply-back turn once it runs", async () => {
    gw = await edge.start(config({ session: { agentToAgent: { maxPingPongTurns: 1 } } }), {
      store: "file",
    });
    const op: TestPeer = await gw.operator();
    await op.call("sessions.create", { key: "agent:research:main" });
    await op.call("sessions.create", { key: "agent:main:main" });
    // No worker connected: the send's primary run waits queued on the target.
    const sent = await op.call<Result>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: "agent:research:main", message: "what is up?", timeoutSeconds: 0 },
      as: "agent:main:main",
    });
    expect(sent).toMatchObject({ status: "accepted", delivery: { status: "queued" } });
    // Graceful restart: queued runs stay queued and resume after the next start (docs/decisions.md).
    await gw.restart();
    const op2 = await gw.operator();
    const worker = await startWorker(behaviour({ replyStep: () => "REPLY_SKIP" }));
    expect(await op2.call("agent.wait", { runId: sent.runId, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "echo: what is up?",
    });
    await sleep(500);
    await gw.gateway.flows.idle();
    // After the primary run ends with a reply, turn 1 goes to the requester (agent-to-agent.md).
    const replySteps = worker.runs.filter((r) => r.input.context.includes("Agent-to-agent reply step:"));
    expect(replySteps.map((r) => r.sessionKey)).toEqual(["agent:main:main"]);
  });

  it("a send's follow-up already past its primary at a restart goes on with its next turn, without repeating one", async () => {
    gw = await edge.start(config({ session: { agentToAgent: { maxPingPongTurns: 2 } } }), {
      store: "file",
    });
    const op: TestPeer = await gw.operator();
    await op.call("sessions.create", { key: "agent:research:main" });
    await op.call("sessions.create", { key: "agent:main:main" });
    // Only the target's agent has a worker: the primary is answered, turn 1 (into the requester) waits.
    const first = await startWorker(behaviour(), ["research"]);
    const sent = await op.call<Result>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: "agent:research:main", message: "what is up?", timeoutSeconds: 10 },
      as: "agent:main:main",
    });
    expect(sent).toMatchObject({ status: "ok", reply: "echo: what is up?" });
    const store = gw.gateway.store;
    await until(
      async () =>
        (await store.runs.list({ sessionKey: "agent:main:main" })).some((run) => run.origin === "reply"),
      "turn 1 queued on the requester",
    );
    first.close();
    await gw.restart();
    const worker = await startWorker(behaviour({ replyStep: () => "and then?" }));
    const replySteps = () =>
      worker.runs.filter((r) => r.input.context.includes("Agent-to-agent reply step:"));
    await until(() => replySteps().length >= 2, "turn 2 into the target", 4_000);
    await gw.gateway.flows.idle();
    // Turn 1 ran once (found again by its key, not started twice), then turn 2 went to the target.
    expect(replySteps().map((r) => r.sessionKey)).toEqual(["agent:main:main", "agent:research:main"]);
    const replyRuns = (await gw.gateway.store.runs.list({})).filter((run) => run.origin === "reply");
    expect(replyRuns).toHaveLength(2);
    // Finished: the next start does not take it up again.
    expect((await gw.gateway.store.runs.get(sent.runId as string))?.followUp).toBe("done");
  });

  it("a worker failing a follow-up step with the gateway's own words for a restart does not get the step made again", async () => {
    gw = await edge.start(config({ session: { agentToAgent: { maxPingPongTurns: 2 } } }), {
      store: "file",
    });
    const op: TestPeer = await gw.operator();
    await op.call("sessions.create", { key: "agent:research:main" });
    await op.call("sessions.create", { key: "agent:main:main" });
    // One process marks the follow-up pending: its steps are keyed, and one lost with the process is
    // made again under `…:again`.
    const replyStep = (run: { input: { context: string } }) =>
      run.input.context.includes("Agent-to-agent reply step:");
    const worker = await startWorker(async (context) =>
      replyStep(context.run) ? { fail: "gateway restarted" } : behaviour()(context),
    );
    const sent = await op.call<Result>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: "agent:research:main", message: "what is up?", timeoutSeconds: 10 },
      as: "agent:main:main",
    });
    expect(sent).toMatchObject({ status: "ok", reply: "echo: what is up?" });
    await until(
      async () => (await gw!.gateway.store.runs.get(sent.runId as string))?.followUp === "done",
      "the follow-up finished",
    );
    await gw.gateway.flows.idle();
    // The worker's failure ends the loop like any failed turn: one reply run, not a second `:again`.
    const replyRuns = (await gw.gateway.store.runs.list({})).filter((run) => run.origin === "reply");
    expect(replyRuns.map((run) => [run.status, run.lost])).toEqual([["error", undefined]]);
    expect(worker.runs.filter(replyStep)).toHaveLength(1);
  });

  it("a tool call still waiting when its run ends stops with the run instead of waiting out its own timeout", async () => {
    // Before session 21 a run that timed out (or was reset) left its worker's sessions_send waiting
    // up to ten minutes for a reply nobody would take in.
    gw = await edge.start(config({ session: { agentToAgent: { maxPingPongTurns: 0 } } }), { store: "file" });
    const op = await gw.operator();
    await op.call("sessions.create", { key: "agent:research:main" });
    let answered: { result: Result; afterMs: number } | undefined;
    // Only `main` is served: the send's target run waits queued, and the send waits on it.
    await startWorker(
      async ({ invokeTool }) => {
        const started = Date.now();
        const result = (await invokeTool("sessions_send", {
          sessionKey: "agent:research:main",
          message: "anyone there?",
          timeoutSeconds: 600,
        }).catch((error: Error & { code?: string }) => ({ status: "refused", code: error.code }))) as Result;
        answered = { result, afterMs: Date.now() - started };
        return "done";
      },
      ["main"],
    );
    const { runId } = await op.call<{ runId: string }>("agent", {
      sessionKey: "agent:main:main",
      message: "ask research",
      timeoutSeconds: 1,
    });
    expect(await op.call("agent.wait", { runId, timeoutMs: 5_000 })).toMatchObject({ status: "timeout" });
    await until(() => answered, "the send's answer", 5_000);
    expect(answered!.afterMs).toBeLessThan(5_000);
    expect(answered!.result.status).not.toBe("ok");
    // The send itself goes on: its run is answered once research has a worker.
    await startWorker(behaviour(), ["research"]);
  });

  it("keeps FIFO order in a lane when a worker slot frees while an earlier run of the lane is being accepted", async () => {
    gw = await edge.start(
      {
        auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" as const, agents: ["main"] }] },
        agents: { list: [{ id: "main", default: true }] },
      },
      { store: "file" },
    );
    const op = await gw.operator();
    const worker = await TestPeer.open(gw.url);
    const connected = await worker.request("connect", {
      protocol: 1,
      client: { name: "holding", version: "0" },
      auth: { token: WORKER },
      role: "agent",
      agents: ["main"],
      concurrency: 1,
    });
    expect(connected.ok).toBe(true);
    const assigned = () =>
      worker.events.filter((e) => e.event === "run.assigned").map((e) => String(e.payload.runId));
    const outOfOrder: string[] = [];
    for (let round = 0; round < 40; round++) {
      // The worker's only slot is busy with a run of another session.
      const { runId: busy } = await op.call<{ runId: string }>("chat.send", {
        sessionKey: `agent:main:cron:busy-${round}`,
        message: "busy",
      });
      await worker.waitForEvent((e) => e.event === "run.assigned" && e.payload.runId === busy);
      const lane = `agent:main:cron:lane-${round}`;
      const first = op.request("chat.send", { sessionKey: lane, message: "first" });
      await sleep(round % 3);
      const freed = worker.request("run.complete", { runId: busy, reply: "done" });
      const second = op.request("chat.send", { sessionKey: lane, message: "second" });
      const [a, , b] = await Promise.all([first, freed, second]);
      const firstId = (a.result as { runId: string }).runId;
      const secondId = (b.result as { runId: string }).runId;
      const order = async () => assigned().filter((id) => id === firstId || id === secondId);
      await worker.waitForEvent(
        (e) => e.event === "run.assigned" && (e.payload.runId === firstId || e.payload.runId === secondId),
      );
      const head = (await order())[0]!;
      if (head !== firstId) outOfOrder.push(`round ${round}: "second" started before "first"`);
      await worker.call("run.complete", { runId: head, reply: "ok" });
      const other = head === firstId ? secondId : firstId;
      await worker.waitForEvent((e) => e.event === "run.assigned" && e.payload.runId === other);
      await worker.call("run.complete", { runId: other, reply: "ok" });
    }
    worker.close();
    expect(outOfOrder).toEqual([]);
  });

  it("a run that times out while its dispatch reads the session stays ended: never assigned, its record and every wait say timeout", async () => {
    gw = await edge.start(
      {
        auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" as const, agents: ["main"] }] },
        agents: { list: [{ id: "main", default: true }] },
      },
      { store: "file" },
    );
    const op = await gw.operator();
    const sessionKey = "agent:main:cron:slow-check";
    await op.call("sessions.create", { key: sessionKey });
    // No worker yet: the run waits queued, its one-second deadline running.
    const { runId } = await op.call<{ runId: string }>("agent", {
      sessionKey,
      message: "hello",
      timeoutSeconds: 1,
    });
    const waited = op.call<Result>("agent.wait", { runId, timeoutMs: 10_000 });
    // The session read of the dispatch the worker's arrival starts takes past the deadline (a slow
    // database): the timeout fires in between.
    const sessions = gw.gateway.store.sessions;
    const read = sessions.get.bind(sessions);
    let stalled: Promise<void> | undefined;
    sessions.get = async (key: string): Promise<SessionEntry | undefined> => {
      if (key === sessionKey && !stalled) {
        stalled = sleep(1_500);
        await stalled;
      }
      return read(key);
    };
    const worker = await TestWorker.start(gw.url, WORKER, ["main"], behaviour());
    workers.push(worker);

    const answer = await waited;
    expect(answer).toMatchObject({ status: "timeout", error: "run timed out after 1s" });
    expect(stalled).toBeDefined();
    await stalled;
    await sleep(300);
    // The dispatch that went on after the read did not bring the run back.
    expect.soft(worker.runs.map((run) => run.runId)).not.toContain(runId);
    expect.soft((await gw.gateway.store.runs.get(runId))?.status).toBe("timeout");
    const later = await op.call<Result>("agent.wait", { runId, timeoutMs: 200 });
    expect.soft(later).toMatchObject({ status: "timeout", error: "run timed out after 1s" });
    // The lane and the worker's slot are free: the session's next run goes through.
    const next = await op.call<{ runId: string }>("agent", { sessionKey, message: "next" });
    expect(await op.call<Result>("agent.wait", { runId: next.runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "echo: next",
    });
  });

  it("a run that times out while its assignment reads the history is handed to no worker", async () => {
    gw = await edge.start(config(), { store: "file" });
    const op = await gw.operator();
    const sessionKey = "agent:main:cron:slow-history";
    await op.call("sessions.create", { key: sessionKey });
    const { runId } = await op.call<{ runId: string }>("agent", {
      sessionKey,
      message: "hello",
      timeoutSeconds: 1,
    });
    // The history read `run.assigned` is built from takes past the run's deadline (a slow store).
    const sessions = gw.gateway.sessions;
    const read = sessions.recentMessages.bind(sessions);
    let stalled: Promise<void> | undefined;
    sessions.recentMessages = async (...args: Parameters<typeof read>) => {
      if (args[0].key === sessionKey && !stalled) {
        stalled = sleep(1_500);
        await stalled;
      }
      return read(...args);
    };
    const worker = await startWorker();
    expect(await op.call<Result>("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({
      status: "timeout",
    });
    await until(() => stalled !== undefined, "the history read");
    await stalled;
    await sleep(300);
    expect(worker.runs.map((run) => run.runId)).not.toContain(runId);
  });
});
