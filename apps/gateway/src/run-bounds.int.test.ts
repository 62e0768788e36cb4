import { describe, expect, it, vi } from "vitest";
import { perTestGateway } from "./testing/per-test-gateway";
import { WORKER_TOKEN, type WorkerHandler } from "./testing/test-gateway";

// Every run ends within a bound: a call that gives no limit of its own (a spawn's default
// `runTimeoutSeconds: 0`, an operator's `agent` with `timeoutSeconds: 0`) gets its agent's run
// timeout. Before session 22 such runs had none: a sub-agent whose worker never answered held the
// requester's child slots, its lane and a worker slot until a restart (and, queued, past it).

const MAIN = "agent:main:main";
type SpawnAnswer = { status: string; runId?: string; error?: string };
const edge = perTestGateway();

/** Sub-agent runs and runs asked to be "silent" are never answered. */
const silentOnSome: WorkerHandler = ({ run }) =>
  run.sessionKey.includes(":subagent:") || run.input.message === "silent"
    ? { ignore: true }
    : `echo: ${run.input.message}`;

async function start() {
  const gw = await edge.start({
    auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
    agents: {
      defaults: { timeoutSeconds: 1 },
      list: [{ id: "main", default: true, subagents: { maxChildren: 1 } }],
    },
    session: { agentToAgent: { maxPingPongTurns: 0 } },
  });
  await edge.startWorker(silentOnSome, ["main"]);
  const op = await gw.operator();
  await op.call("sessions.create", { key: MAIN });
  return op;
}

describe("runs with no limit of their own", () => {
  it("a spawned child whose worker never answers ends at its agent's run timeout and frees the child slot", async () => {
    const op = await start();
    const spawn = async () => {
      const answer = await op.call<{ result?: SpawnAnswer } & SpawnAnswer>("tools.invoke", {
        tool: "sessions_spawn",
        args: { task: "hang" },
        as: MAIN,
      });
      return answer.result ?? answer;
    };
    const first = await spawn();
    expect(first.status).toBe("accepted");
    const ended = await op.call<{ status: string }>("agent.wait", { runId: first.runId, timeoutMs: 5_000 });
    expect(ended.status).toBe("timeout");
    // Its slot (maxChildren 1) is free again.
    expect((await spawn()).status).toBe("accepted");
  });

  it("an operator's agent run with timeoutSeconds 0 ends at its agent's run timeout, and the lane goes on", async () => {
    const op = await start();
    const { runId } = await op.call<{ runId: string }>("agent", {
      sessionKey: MAIN,
      message: "silent",
      timeoutSeconds: 0,
    });
    expect(await op.call("agent.wait", { runId, timeoutMs: 5_000 })).toMatchObject({ status: "timeout" });
    const next = await op.call<{ runId: string }>("chat.send", { sessionKey: MAIN, message: "after" });
    expect(await op.call("agent.wait", { runId: next.runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "echo: after",
    });
  });

  // Before session 23 the timer re-armed while `Date.now()` was short of the deadline: a wall
  // clock set back an hour (NTP) kept a run nobody answered, its lane and its worker slot an hour on.
  it("ends a run at its timeout when the wall clock is set back meanwhile", async () => {
    const op = await start();
    const { runId } = await op.call<{ runId: string }>("agent", {
      sessionKey: MAIN,
      message: "silent",
      timeoutSeconds: 1,
    });
    const realNow = Date.now.bind(Date);
    const stepped = vi.spyOn(Date, "now").mockImplementation(() => realNow() - 3_600_000);
    try {
      // Polled on the monotonic clock: the test's own waits must not follow the stepped one.
      const until = performance.now() + 5_000;
      let status = "";
      while (performance.now() < until) {
        const { runs } = await op.call<{ runs: Array<{ runId: string; status: string }> }>("runs.list", {
          statuses: ["queued", "running", "ok", "error", "timeout"],
        });
        status = runs.find((run) => run.runId === runId)?.status ?? "missing";
        if (status === "timeout") break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(status).toBe("timeout");
    } finally {
      stepped.mockRestore();
    }
  });
});
