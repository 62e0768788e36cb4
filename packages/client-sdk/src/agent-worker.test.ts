import { SwitchboardError } from "@switchboard/core";
import { describe, expect, it, vi } from "vitest";
import { type AgentWorker, type AssignedRun, type RunHandler, serve } from "./agent-worker";
import { FAKE_TOKENS } from "./testing/fake-gateway";
import { deferred, FAST_RECONNECT, until, useFakeGateway } from "./testing/fixtures";

const SESSION = "agent:alpha:main";

describe("AgentWorker", () => {
  const fixture = useFakeGateway();

  async function startWorker(
    handler: RunHandler,
    options: Parameters<typeof serve>[3] = {},
  ): Promise<AgentWorker> {
    const worker = await serve(
      { url: fixture.gateway.url, token: FAKE_TOKENS.agent, reconnect: FAST_RECONNECT },
      ["alpha"],
      handler,
      options,
    );
    fixture.track(worker.client);
    return worker;
  }

  it("turns an assigned run into a handler call and completes it with the reply", async () => {
    const seen: AssignedRun[] = [];
    await startWorker(async (run) => {
      seen.push(run);
      return { reply: `pong to ${run.input.message}`, usage: { inputTokens: 3, outputTokens: 2 } };
    });
    const client = await fixture.connect("client", { sessionKey: SESSION });

    const accepted = await client.chat.send({ sessionKey: SESSION, message: "ping" });
    const result = await client.agent.wait({ runId: accepted.runId });

    expect(result).toMatchObject({ runId: accepted.runId, status: "ok", reply: "pong to ping" });
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ runId: accepted.runId, sessionKey: SESSION, agentId: "alpha" });
    expect(fixture.gateway.requestsFor("run.complete")[0]?.params).toEqual({
      runId: accepted.runId,
      reply: "pong to ping",
      usage: { inputTokens: 3, outputTokens: 2 },
    });
  });

  it("fails the run with the handler's error message when it throws", async () => {
    await startWorker(() => {
      throw new Error("model unreachable");
    });
    const client = await fixture.connect("client", { sessionKey: SESSION });
    const accepted = await client.chat.send({ sessionKey: SESSION, message: "hi" });
    await expect(client.agent.wait({ runId: accepted.runId })).resolves.toMatchObject({
      status: "error",
      error: "model unreachable",
    });
    expect(fixture.gateway.requestsFor("run.complete")).toHaveLength(0);
  });

  it("fails the run when the handler returns something that is not a reply", async () => {
    await startWorker(() => ({ text: "wrong shape" }) as never);
    const run = fixture.gateway.startRun(SESSION, "hi");
    const request = await fixture.gateway.waitForRequest("run.fail");
    expect(request.params).toMatchObject({ runId: run.runId });
    expect(request.params?.error).toMatch(/invalid result: reply/);
  });

  it("binds invokeTool to the run and streams progress", async () => {
    await startWorker(async (_run, context) => {
      await context.progress("text-delta", { text: "thinking" });
      const result = await context.invokeTool("sessions_list", { limit: 5 });
      return { reply: `tool said ${String(result.status)} as ${String(result.caller)}` };
    });
    const observer = await fixture.connect("operator");
    const progress: string[] = [];
    observer.on("run.progress", (event) => progress.push(event.payload.text ?? ""));
    await observer.subscribe();

    const run = fixture.gateway.startRun(SESSION, "use a tool");
    const result = await observer.agent.wait({ runId: run.runId });

    expect(result).toMatchObject({ status: "ok", reply: `tool said ok as ${SESSION}` });
    expect(fixture.gateway.toolCalls).toEqual([
      expect.objectContaining({ tool: "sessions_list", args: { limit: 5 }, runId: run.runId }),
    ]);
    expect(progress).toEqual(["thinking"]);
  });

  it("aborts the handler's signal at the run's deadline", async () => {
    const reasons: unknown[] = [];
    await startWorker(
      (_run, context) =>
        new Promise((_resolve, reject) => {
          context.signal.addEventListener("abort", () => {
            reasons.push(context.signal.reason);
            reject(context.signal.reason);
          });
        }),
    );
    const run = fixture.gateway.startRun(SESSION, "slow", 0.05);
    await until(() => reasons.length > 0);
    expect(reasons[0]).toBeInstanceOf(SwitchboardError);
    expect(reasons[0]).toMatchObject({ code: "TIMEOUT" });
    expect((reasons[0] as Error).message).toContain(run.runId);
  });

  // Before session 23 the deadline timer re-armed while `Date.now()` was short of the deadline: a
  // wall clock set back an hour let the run go on an hour past it.
  it("aborts at the run's deadline when the wall clock is set back meanwhile", async () => {
    let started = false;
    let aborted = false;
    await startWorker(
      (_run, context) =>
        new Promise((_resolve, reject) => {
          started = true;
          context.signal.addEventListener("abort", () => {
            aborted = true;
            reject(context.signal.reason);
          });
        }),
    );
    fixture.gateway.startRun(SESSION, "slow", 0.3);
    await until(() => started);
    const realNow = Date.now.bind(Date);
    const stepped = vi.spyOn(Date, "now").mockImplementation(() => realNow() - 3_600_000);
    try {
      const giveUp = performance.now() + 3_000;
      await until(() => aborted || performance.now() > giveUp);
      expect(aborted).toBe(true);
    } finally {
      stepped.mockRestore();
    }
  });

  it("runs at most `concurrency` handlers at once and queues the rest in order", async () => {
    const gates = new Map<string, { resolve: () => void }>();
    const started: string[] = [];
    const worker = await startWorker(
      async (run) => {
        started.push(run.input.message);
        const gate = deferred();
        gates.set(run.input.message, gate);
        await gate.promise;
        return { reply: run.input.message };
      },
      { concurrency: 1 },
    );
    const first = fixture.gateway.startRun(SESSION, "first");
    const second = fixture.gateway.startRun(SESSION, "second");
    await until(() => started.length === 1);
    // The worker announced its concurrency: the gateway keeps the second run queued, not the worker.
    expect(second.status).toBe("queued");
    expect(worker.queuedRuns).toBe(0);
    expect(started).toEqual(["first"]);

    gates.get("first")?.resolve();
    await until(() => started.length === 2);
    expect(first.status).toBe("ok");
    gates.get("second")?.resolve();
    await until(() => second.status === "ok");
  });

  it("stop() lets a running handler finish, then closes the connection", async () => {
    const gate = deferred();
    const worker = await startWorker(async () => {
      await gate.promise;
      return { reply: "finished during shutdown" };
    });
    const run = fixture.gateway.startRun(SESSION, "work");
    await until(() => worker.activeRuns === 1);

    const stopped = worker.stop();
    gate.resolve();
    await stopped;
    expect(run).toMatchObject({ status: "ok", reply: "finished during shutdown" });
    expect(worker.client.state).toBe("closed");
  });

  it("stop() fails runs whose handler ignores the signal past the grace periods", async () => {
    const worker = await startWorker(() => new Promise(() => {}), { stopGraceMs: 10, abortGraceMs: 10 });
    const run = fixture.gateway.startRun(SESSION, "stuck");
    await until(() => worker.activeRuns === 1);
    await worker.stop();
    expect(run).toMatchObject({ status: "error", error: "the agent worker stopped" });
    expect(worker.client.state).toBe("closed");
  });

  it("drops its runs when the connection is lost (the gateway takes them back) and serves new ones after", async () => {
    const reasons: unknown[] = [];
    const worker = await startWorker((run, context) => {
      if (run.input.message !== "long") return { reply: "quick" };
      return new Promise((_resolve, reject) => {
        context.signal.addEventListener("abort", () => {
          reasons.push(context.signal.reason);
          reject(context.signal.reason);
        });
      });
    });
    const long = fixture.gateway.startRun(SESSION, "long");
    await until(() => worker.activeRuns === 1);

    fixture.gateway.dropConnections();
    await until(() => reasons.length === 1);
    expect(reasons[0]).toMatchObject({ code: "UNAVAILABLE" });
    expect(long).toMatchObject({ status: "error", error: "the agent worker disconnected" });

    await worker.client.ready();
    const next = fixture.gateway.startRun(SESSION, "after reconnect");
    await until(() => next.status === "ok");
    expect(next.reply).toBe("quick");
    expect(fixture.gateway.requestsFor("run.fail")).toHaveLength(0);
  });

  it("refuses a client that is not an agent connection for those ids", async () => {
    const operator = await fixture.connect("operator");
    await expect(serve(operator, ["alpha"], () => ({ reply: "" }))).rejects.toThrow(
      /role agent, not operator/,
    );
    const agent = await fixture.connect("agent", { agents: ["alpha"] });
    await expect(serve(agent, ["beta"], () => ({ reply: "" }))).rejects.toThrow(/does not serve beta/);
  });
});
