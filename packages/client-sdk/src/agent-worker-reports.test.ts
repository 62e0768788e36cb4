import { SwitchboardError } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { type AgentWorker, type RunHandler, serve } from "./agent-worker";
import { SwitchboardClient } from "./client";
import { FAKE_TOKENS } from "./testing/fake-gateway";
import { deferred, FAST_RECONNECT, until, useFakeGateway } from "./testing/fixtures";

const SESSION = "agent:alpha:main";

function useWorker(fixture: ReturnType<typeof useFakeGateway>) {
  return async (handler: RunHandler, options: Parameters<typeof serve>[3] = {}): Promise<AgentWorker> => {
    const worker = await serve(
      { url: fixture.gateway.url, token: FAKE_TOKENS.agent, reconnect: FAST_RECONNECT },
      ["alpha"],
      handler,
      options,
    );
    fixture.track(worker.client);
    return worker;
  };
}

describe("AgentWorker: concurrency announced to the gateway", () => {
  const fixture = useFakeGateway();
  const startWorker = useWorker(fixture);

  it("announces its concurrency in connect, so runs beyond it stay queued on the gateway", async () => {
    const release = deferred();
    const worker = await startWorker(
      async () => {
        await release.promise;
        return { reply: "done" };
      },
      { concurrency: 2 },
    );
    expect(fixture.gateway.handshakes).toBe(1);
    const runs = ["a", "b", "c", "d"].map((message) => fixture.gateway.startRun(SESSION, message));
    await until(() => worker.activeRuns === 2);
    // The gateway, not the worker, holds the other two: they would survive a gateway restart.
    expect(worker.queuedRuns).toBe(0);
    expect(runs.map((run) => run.status)).toEqual(["running", "running", "queued", "queued"]);
    release.resolve();
    await until(() => runs.every((run) => run.status === "ok"));
  });

  it("announces the worker's concurrency for a client created without one (before it connected)", async () => {
    const client = fixture.track(
      new SwitchboardClient({
        url: fixture.gateway.url,
        token: FAKE_TOKENS.agent,
        role: "agent",
        agents: ["alpha"],
        reconnect: FAST_RECONNECT,
      }),
    );
    const release = deferred();
    const worker = await serve(
      client,
      ["alpha"],
      async () => {
        await release.promise;
        return { reply: "ok" };
      },
      { concurrency: 1 },
    );
    expect(client.concurrency).toBe(1);
    const runs = ["x", "y"].map((message) => fixture.gateway.startRun(SESSION, message));
    await until(() => worker.activeRuns === 1);
    expect(runs.map((run) => run.status)).toEqual(["running", "queued"]);
    release.resolve();
    await until(() => runs.every((run) => run.status === "ok"));
  });

  it("refuses a concurrency option on a connection that is not role agent", () => {
    expect(
      () =>
        new SwitchboardClient({
          url: fixture.gateway.url,
          token: FAKE_TOKENS.operator,
          role: "operator",
          concurrency: 2,
        }),
    ).toThrow(/options\.concurrency.*only allowed for role agent/);
  });
});

describe("AgentWorker: text deltas are coalesced", () => {
  const fixture = useFakeGateway();
  const startWorker = useWorker(fixture);

  it("turns a burst of one-character deltas into a few run.progress calls, text and order intact", async () => {
    const text = "x".repeat(5_000);
    await startWorker(async (_run, context) => {
      for (const char of text) await context.progress("text-delta", { text: char });
      return { reply: "streamed" };
    });
    const run = fixture.gateway.startRun(SESSION, "stream");
    await until(() => run.status === "ok");
    const progress = fixture.gateway.requestsFor("run.progress");
    expect(progress.length).toBeLessThanOrEqual(3);
    expect(progress.map((request) => request.params?.text).join("")).toBe(text);
    // Everything buffered was sent before the completion.
    const order = fixture.gateway.requests
      .filter((request) => request.method.startsWith("run."))
      .map((request) => request.method);
    expect(order.at(-1)).toBe("run.complete");
  });

  it("sends buffered text before a tool call, other progress, and the end of the run", async () => {
    await startWorker(
      async (_run, context) => {
        await context.progress("text-delta", { text: "thinking " });
        await context.progress("text-delta", { text: "hard" });
        await context.invokeTool("session_status", {});
        await context.progress("text-delta", { text: "after tool" });
        await context.progress("tool-call", { name: "local", toolCallId: "c1" });
        await context.progress("text-delta", { text: "tail" });
        return { reply: "done" };
      },
      { progressIntervalMs: 10_000 },
    );
    const run = fixture.gateway.startRun(SESSION, "tools");
    await until(() => run.status === "ok");
    const sequence = fixture.gateway.requests
      .filter((request) => request.method !== "connect")
      .map((request) =>
        request.method === "run.progress"
          ? `${request.params?.kind}:${request.params?.text ?? request.params?.name}`
          : request.method,
      );
    expect(sequence).toEqual([
      "text-delta:thinking hard",
      "tools.invoke",
      "text-delta:after tool",
      "tool-call:local",
      "text-delta:tail",
      "run.complete",
    ]);
  });

  it("sends each delta at once with progressIntervalMs 0", async () => {
    await startWorker(
      async (_run, context) => {
        for (const text of ["a", "b", "c"]) await context.progress("text-delta", { text });
        return { reply: "done" };
      },
      { progressIntervalMs: 0 },
    );
    const run = fixture.gateway.startRun(SESSION, "each");
    await until(() => run.status === "ok");
    expect(fixture.gateway.requestsFor("run.progress").map((request) => request.params?.text)).toEqual([
      "a",
      "b",
      "c",
    ]);
  });
});

describe("AgentWorker: a reply the gateway cannot take", () => {
  const fixture = useFakeGateway({ maxPayload: 4_096 });
  const startWorker = useWorker(fixture);

  it("fails the run at once with a clear error instead of leaving it to its deadline", async () => {
    await startWorker(async () => ({ reply: "é".repeat(3_000) }));
    const client = await fixture.connect("client", { sessionKey: SESSION });
    const accepted = await client.chat.send({ sessionKey: SESSION, message: "write a novel" });
    const result = await client.agent.wait({ runId: accepted.runId, timeoutMs: 2_000 });
    expect(result).toMatchObject({ status: "error" });
    expect(result.error).toMatch(
      /the reply \(6000 bytes\) is too large to deliver: run\.complete must fit the gateway's frame limit \(limits\.maxPayload, 4096 bytes\)/,
    );
    expect(fixture.gateway.requestsFor("run.complete")).toHaveLength(0);
  });
});

describe("AgentWorker: a run's end refused for a moment", () => {
  const fixture = useFakeGateway();
  const startWorker = useWorker(fixture);

  // Before session 22 the worker sent a run.fail after a retryable refusal (also refused) and gave
  // up: the run held its session's lane, and the worker's slot, until its deadline (10 min by
  // default) after a 3 s database outage.
  it("sends it again after a retryable refusal instead of leaving the run to its deadline", async () => {
    let refusals = 0;
    fixture.gateway.handle("run.complete", (params) => {
      if (refusals < 2) {
        refusals += 1;
        throw new SwitchboardError("UNAVAILABLE", "the database is unreachable; retry", { retryable: true });
      }
      fixture.gateway.completeRun(params.runId, params.reply);
      return {};
    });
    await startWorker(async () => ({ reply: "done" }));
    const run = fixture.gateway.startRun(SESSION, "hi");
    await until(() => run.status === "ok");
    expect(fixture.gateway.requestsFor("run.complete")).toHaveLength(3);
    expect(fixture.gateway.requestsFor("run.fail")).toHaveLength(0);
  });

  it("does not retry a refusal that is not retryable", async () => {
    fixture.gateway.handle("run.complete", () => {
      throw new SwitchboardError("FORBIDDEN", "run is not held by this worker");
    });
    await startWorker(async () => ({ reply: "done" }));
    fixture.gateway.startRun(SESSION, "hi");
    await fixture.gateway.waitForRequest("run.complete");
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(fixture.gateway.requestsFor("run.complete")).toHaveLength(1);
  });
});
