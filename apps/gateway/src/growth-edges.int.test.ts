import type { ConfigInput } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker, type WorkerHandler } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

/**
 * State that must return to its baseline once the thing it tracks has ended, however it ended
 * (a connection gone mid-call, a session deleted, a worker gone for good). Each test drives the
 * unusual ending N times and reads the structure's size through the gateway's internals.
 */

const WORKER = "worker-token-0123456789";
const N = 200;

function config(overrides: Partial<ConfigInput> = {}): ConfigInput {
  return {
    // No `agents` list on the worker token: it may serve any agent id.
    auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
    agents: { list: [{ id: "main", default: true }, { id: "research" }] },
    tools: { agentToAgent: { enabled: true, allow: ["*"] } },
    // A budget that never refuses, so N calls from one session all pass; no reply turns.
    session: { agentToAgent: { budgetPerMinute: 1_000_000, maxPingPongTurns: 0 } },
    ...overrides,
  };
}

let gw: TestGateway | undefined;
const workers: TestWorker[] = [];
const peers: TestPeer[] = [];

afterEach(async () => {
  for (const peer of peers.splice(0)) peer.close();
  for (const worker of workers.splice(0)) worker.close();
  await gw?.close();
  gw = undefined;
});

async function startWorker(handler: WorkerHandler = behaviour(), agents = ["main", "research"]) {
  const worker = await TestWorker.start(gw!.url, WORKER, agents, handler);
  workers.push(worker);
  return worker;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Opens a peer, lets `during` start a call on it, then drops the connection mid-call. */
async function dropMidCall(role: "operator", during: (peer: TestPeer) => Promise<void>): Promise<void> {
  const peer = await TestPeer.connect(gw!.url, { token: gw!.token, role });
  await during(peer);
  peer.close();
  await peer.waitClosed();
}

// Internals (cast to any: these are private fields of the in-process ports behind named interfaces).
// biome-ignore lint/suspicious/noExplicitAny: reading private state of the gateway under test
const scheduler = () => gw!.gateway.scheduler as any;
// biome-ignore lint/suspicious/noExplicitAny: reading private state of the gateway under test
const flows = () => gw!.gateway.flows as any;

/** Callbacks registered in `InProcessRunWaiters` (all runs). */
function runWaiterCount(): number {
  let count = 0;
  for (const set of scheduler().waiters.byRun.values()) count += set.size;
  return count;
}

/** Edges (with multiplicity) in the in-process wait graph. */
function waitEdgeCount(): number {
  let count = 0;
  for (const targets of flows().waits.waitsFor.values()) for (const n of targets.values()) count += n;
  return count;
}

/** The gateway's live WebSocket connections. */
function connections(): Set<{
  identity?: { role: string };
  subscribed: boolean;
  subscriptionFilters: Map<string, unknown>;
}> {
  // biome-ignore lint/suspicious/noExplicitAny: the transport is private to the gateway
  return (gw!.gateway as any).transport.connections;
}

describe("state that must not grow without bound in a long-running gateway (file store)", () => {
  it("an agent.wait whose connection closed mid-wait leaves no run waiter behind", async () => {
    gw = await startTestGateway(config(), { store: "file" });
    const op = await gw.operator();
    peers.push(op);
    // No worker: the run stays queued (active), so every wait registers a waiter.
    const { runId } = await op.call<{ runId: string }>("agent", {
      sessionKey: "agent:main:main",
      message: "hello",
    });
    const baseline = runWaiterCount();
    for (let i = 0; i < N; i++) {
      await dropMidCall("operator", async (peer) => {
        void peer.request("agent.wait", { runId, timeoutMs: 600_000 });
        await until(() => runWaiterCount() > baseline, "the wait to register");
      });
    }
    await until(() => connections().size === 1, "the dropped connections to be gone");
    await sleep(200);
    // Each dropped caller is gone; nobody can receive these answers any more.
    expect(runWaiterCount()).toBe(baseline);
  }, 60_000);

  it("a waiting sessions_send (no toolCallId) whose connection closed leaves no wait-graph edge or waiter", async () => {
    gw = await startTestGateway(config(), { store: "file" });
    const op = await gw.operator();
    peers.push(op);
    await op.call("sessions.create", { key: "agent:main:main" });
    await op.call("sessions.create", { key: "agent:research:main" });
    // No worker: the send's run is queued, the caller waits up to 600 s for its reply.
    const edges0 = waitEdgeCount();
    const waiters0 = runWaiterCount();
    for (let i = 0; i < N; i++) {
      await dropMidCall("operator", async (peer) => {
        void peer.request("tools.invoke", {
          tool: "sessions_send",
          args: { sessionKey: "agent:research:main", message: `ping ${i}`, timeoutSeconds: 600 },
          as: "agent:main:main",
        });
        // Two waits per send: the caller's, and the follow-up's in the background (which stays).
        await until(() => runWaiterCount() >= waiters0 + i + 2, "the send to wait");
      });
    }
    await until(() => connections().size === 1, "the dropped connections to be gone");
    await sleep(200);
    // What a user sees: the dead callers' waits still count, so a waiting send the other way is
    // refused as a wait cycle (main waits on research, research would wait on main).
    const back = await op.call<{ status: string; error?: string }>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: "agent:main:main", message: "back", timeoutSeconds: 1 },
      as: "agent:research:main",
    });
    expect({
      edges: waitEdgeCount(),
      // The follow-ups' own waits (one per send, the send back's too) are the sends' business; the
      // callers' are gone.
      callerWaiters: runWaiterCount() - N - 1,
      backStatus: back.status,
      ...(back.status === "forbidden" ? { backError: back.error } : {}),
    }).toEqual({ edges: edges0, callerWaiters: waiters0, backStatus: "timeout" });
  }, 120_000);

  it("guard: a waiting sessions_send with a toolCallId is released when its connection closes", async () => {
    gw = await startTestGateway(config(), { store: "file" });
    const op = await gw.operator();
    peers.push(op);
    await op.call("sessions.create", { key: "agent:main:main" });
    await op.call("sessions.create", { key: "agent:research:main" });
    const edges0 = waitEdgeCount();
    for (let i = 0; i < 20; i++) {
      await dropMidCall("operator", async (peer) => {
        void peer.request("tools.invoke", {
          tool: "sessions_send",
          args: { sessionKey: "agent:research:main", message: `ping ${i}`, timeoutSeconds: 600 },
          as: "agent:main:main",
          toolCallId: `call-${i}`,
        });
        await until(() => waitEdgeCount() > edges0, "the send to wait");
      });
      await until(() => waitEdgeCount() === edges0, "the dropped caller's wait to end");
    }
  }, 60_000);

  it("a sessions_send's run held by a worker that never answers ends at the agent's timeout (no endless run, lane or follow-up)", async () => {
    gw = await startTestGateway(
      config({
        agents: {
          defaults: { timeoutSeconds: 1 },
          list: [{ id: "main", default: true }, { id: "research" }],
        },
      }),
      { store: "file" },
    );
    const op = await gw.operator();
    peers.push(op);
    await op.call("sessions.create", { key: "agent:main:main" });
    await op.call("sessions.create", { key: "agent:research:main" });
    // A connected worker that never answers "silent" (a hung agent process).
    await startWorker(behaviour(), ["research"]);
    const active0 = gw.gateway.scheduler.activeRecords().length;
    const background0 = flows().background.size;
    for (let i = 0; i < N; i++) {
      const sent = await op.call<{ status: string }>("tools.invoke", {
        tool: "sessions_send",
        args: { sessionKey: "agent:research:main", message: "silent", timeoutSeconds: 0 },
        as: "agent:main:main",
      });
      expect(sent.status).toBe("accepted");
    }
    // Control: a chat run on the same agent and worker times out after agents.defaults.timeoutSeconds.
    const { runId: control } = await op.call<{ runId: string }>("agent", {
      sessionKey: "agent:research:other",
      message: "silent",
    });
    expect(await op.call("agent.wait", { runId: control, timeoutMs: 5_000 })).toMatchObject({
      status: "timeout",
    });
    await sleep(1_500);
    // Every send run was accepted more than agents.defaults.timeoutSeconds ago.
    expect({
      activeRuns: gw.gateway.scheduler.activeRecords().length,
      backgroundFlows: flows().background.size,
    }).toEqual({ activeRuns: active0, backgroundFlows: background0 });
  }, 60_000);

  it("bounds a connection's event subscriptions: all events covers the sessions', past 1 000 sessions one is refused", async () => {
    gw = await startTestGateway(config(), { store: "file" });
    const op = await gw.operator();
    peers.push(op);
    await op.call("events.subscribe", { sessionKey: "agent:main:main" });
    const mine = [...connections()].find((c) => c.identity?.role === "operator" && c.subscribed)!;
    for (let i = 0; i < 999; i++)
      await op.call("events.subscribe", { sessionKey: `agent:main:webchat:dm:user-${i}` });
    expect(mine.subscriptionFilters.size).toBe(1_000);
    // Renewing one it follows is fine; a new one is refused, naming the field and the limit.
    await op.call("events.subscribe", { sessionKey: "agent:main:webchat:dm:user-7" });
    const refused = await op.request("events.subscribe", { sessionKey: "agent:main:webchat:dm:one-more" });
    expect(refused.error).toMatchObject({ code: "RATE_LIMITED" });
    expect(refused.error?.message).toContain("sessionKey");
    expect(refused.error?.message).toContain("1000");
    // All events covers every session's: one filter, and following sessions adds none.
    await op.call("events.subscribe", {});
    expect(mine.subscriptionFilters.size).toBe(1);
    for (let i = 0; i < N; i++)
      await op.call("events.subscribe", { sessionKey: `agent:main:webchat:dm:x-${i}` });
    expect(mine.subscriptionFilters.size).toBe(1);
  }, 60_000);

  it("a worker serving an agent id that never comes back leaves no entry in the worker registry", async () => {
    gw = await startTestGateway(config(), { store: "file" });
    const registry = scheduler().workers;
    const baseline = registry.workers.size;
    for (let i = 0; i < N; i++) {
      // E.g. one short-lived worker per job, each serving an agent id of its own.
      const worker = await TestWorker.start(gw.url, WORKER, [`job-${i}`], behaviour());
      worker.close();
      await worker.peer.waitClosed();
      await until(() => gw!.gateway.scheduler.workerCount(`job-${i}`) === 0, "the worker to be removed");
    }
    expect(gw.gateway.scheduler.connectedAgents()).toEqual([]);
    expect(registry.workers.size).toBe(baseline);
  }, 60_000);
});
