// The SDK, the reference agent and the CLI off the paths their own tests walk: run deadlines past
// setTimeout's range, several event subscriptions and reconnects, a worker at its connection's
// in-flight cap, and CLI exit codes and counts.
import { type RunningAgentWorker, startAgentWorker } from "@switchboard/agent";
import { type ClientOptions, type SwitchboardClient, serve } from "@switchboard/client";
import { type ConfigInput, parseConfig } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { CLI_BUILT, cleanEnv, runCliProcess } from "./cli/cli-process";
import { controlledSockets } from "./testing/controlled-sockets";
import { FAST_RECONNECT, perTestSdkGateway } from "./testing/sdk-gateway";
import { type TestGateway, testStoreKind } from "./testing/test-gateway";
import { until, untilState } from "./testing/until";

const STORE = testStoreKind();
const WORKER_TOKEN = "edges-worker-token-0123456789";

const baseConfig: ConfigInput = {
  auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent", agents: ["main"] }] },
  agents: { list: [{ id: "main", default: true }] },
};

const sdk = perTestSdkGateway();
const stops: Array<() => Promise<void>> = [];

// Registered after the SDK's hook, so it runs before it: the workers stop before the gateway closes.
afterEach(async () => {
  await Promise.all(stops.splice(0).map((stop) => stop().catch(() => undefined)));
});

function startGateway(config: ConfigInput = baseConfig): Promise<TestGateway> {
  return sdk.start(config, { store: STORE });
}

const open = (options: Partial<ClientOptions> = {}): Promise<SwitchboardClient> => sdk.open(options);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("event subscriptions of one client", () => {
  const A = "agent:main:cron:alpha";
  const B = "agent:main:cron:beta";

  /** A gateway with sessions A and B and a client recording whose `session.updated` it receives. */
  async function twoSessions(options: Partial<ClientOptions> = {}) {
    await startGateway();
    const op = await open(options);
    await op.sessions.create({ key: A });
    await op.sessions.create({ key: B });
    const seen: string[] = [];
    op.on("session.updated", (event) => void seen.push(event.payload.key));
    return { op, seen };
  }

  it("a client subscribed to two sessions receives the events of both", async () => {
    const { op, seen } = await twoSessions();
    await op.subscribe({ sessionKey: A });
    await op.subscribe({ sessionKey: B });

    await op.sessions.patch({ key: A, label: "first" });
    await op.sessions.patch({ key: B, label: "second" });
    await until(() => seen.includes(B), "B's update");
    await sleep(100);
    expect(seen).toContain(A);
  });

  it("keeps the same subscriptions across a reconnect, whatever order they were made in", async () => {
    const control = controlledSockets();
    const { op, seen } = await twoSessions({ WebSocket: control.WebSocket });
    // Subscriptions add up: A, then B, then A renewed. (Before, the gateway kept only the last one
    // and the SDK renewed them in first-made order, so a reconnect swapped A for B.)
    await op.subscribe({ sessionKey: A });
    await op.subscribe({ sessionKey: B });
    await op.subscribe({ sessionKey: A });

    await op.sessions.patch({ key: B, label: "one" });
    await op.sessions.patch({ key: A, label: "before" });
    await until(() => seen.includes(A), "A's update before the drop");
    expect(seen).toEqual([B, A]);

    control.drop();
    await untilState(op, "reconnecting");
    await untilState(op, "open");

    await op.sessions.patch({ key: B, label: "two" });
    await op.sessions.patch({ key: A, label: "after" });
    await until(() => seen.length === 4, "both updates after the reconnect");
    await sleep(100);
    expect(seen).toEqual([B, A, B, A]);
  });
});

describe("run deadlines far in the future", () => {
  // agents.defaults.timeoutSeconds has no upper bound in the config schema: 3 000 000 s (~35 days) is legal.
  const longTimeout: ConfigInput = {
    ...baseConfig,
    agents: {
      defaults: { timeoutSeconds: 3_000_000 },
      list: [
        {
          id: "main",
          default: true,
          model: { provider: "scripted", rules: [{ when: "^slowish$", delayMs: 300, reply: "done" }] },
        },
      ],
    },
  };

  it("the SDK's AgentWorker does not abort a run whose deadline is 35 days away", async () => {
    await startGateway(longTimeout);
    const op = await open();
    let abortedWith: unknown;
    const worker = await serve(
      { url: sdk.gw.url, token: WORKER_TOKEN, reconnect: FAST_RECONNECT },
      ["main"],
      async (run, ctx) => {
        await sleep(200);
        if (ctx.signal.aborted) {
          abortedWith = ctx.signal.reason;
          throw ctx.signal.reason;
        }
        return { reply: `ok ${run.input.message}` };
      },
    );
    stops.push(() => worker.stop());
    const { runId } = await op.chat.send({ sessionKey: "main", message: "hello" });
    const result = await op.agent.wait({ runId, timeoutMs: 5_000 });
    expect(abortedWith).toBeUndefined();
    expect(result).toMatchObject({ status: "ok", reply: "ok hello" });
  });

  it("the reference agent completes a run whose deadline is 35 days away", async () => {
    await startGateway(longTimeout);
    const op = await open();
    const worker: RunningAgentWorker = await startAgentWorker({
      url: sdk.gw.url,
      token: WORKER_TOKEN,
      config: parseConfig(longTimeout),
      stopGraceMs: 1_000,
    });
    stops.push(() => worker.stop());
    const { runId } = await op.chat.send({ sessionKey: "main", message: "slowish" });
    const result = await op.agent.wait({ runId, timeoutMs: 5_000 });
    expect(result, result.error).toMatchObject({ status: "ok", reply: "done" });
  });
});

describe("an agent worker on a connection at its in-flight cap", () => {
  it("still delivers a run's completion while other runs hold tools.invoke calls", async () => {
    const config: ConfigInput = {
      gateway: { limits: { maxInFlight: 2 } },
      auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent", agents: ["main"] }] },
      agents: { list: [{ id: "main", default: true }, { id: "idle" }] },
      tools: { agentToAgent: { enabled: true, allow: ["main", "idle"] } },
    };
    await startGateway(config);
    const op = await open();
    let holding = 0;
    const warned: string[] = [];
    const note = (fields: unknown, message?: string) =>
      void warned.push(`${message ?? ""} ${JSON.stringify(fields)}`);
    const warnings = { debug() {}, info() {}, warn: note, error: note } as never;
    const worker = await serve(
      { url: sdk.gw.url, token: WORKER_TOKEN, reconnect: FAST_RECONNECT },
      ["main"],
      async (run, ctx) => {
        if (run.input.message.startsWith("hold")) {
          holding += 1;
          // Nobody serves agent `idle`: the send waits its whole timeout.
          const sent = await ctx.invokeTool("sessions_send", {
            sessionKey: "agent:idle:main",
            message: "anyone?",
            timeoutSeconds: 4,
          });
          expect(sent.status).toBe("timeout");
          return { reply: "held" };
        }
        return { reply: "quick reply" };
      },
      { concurrency: 3, logger: warnings },
    );
    stops.push(() => worker.stop());
    for (const key of ["agent:idle:main", "agent:main:cron:h1", "agent:main:cron:h2", "agent:main:cron:q"])
      await op.sessions.create({ key });
    await op.chat.send({ sessionKey: "agent:main:cron:h1", message: "hold 1" });
    await op.chat.send({ sessionKey: "agent:main:cron:h2", message: "hold 2" });
    await until(() => holding === 2, "two runs holding a tool call");
    await sleep(200);
    const { runId } = await op.chat.send({ sessionKey: "agent:main:cron:q", message: "quick" });
    const result = await op.agent.wait({ runId, timeoutMs: 2_000 });
    expect(result, warned.join("\n")).toMatchObject({ status: "ok", reply: "quick reply" });
  });
});

describe.skipIf(!CLI_BUILT)("the switchboard CLI against a running gateway", { timeout: 30_000 }, () => {
  const target = () => ["--url", sdk.gw.url, "--token", sdk.gw.token];

  it("exits 2 (usage) for a malformed argument: an empty message or an invalid session key", async () => {
    await startGateway();
    const empty = await runCliProcess(["send", "main", "", ...target()], { env: cleanEnv() });
    expect(empty.stderr).toContain("message");
    expect(empty.code, empty.stderr).toBe(2);
    const badKey = await runCliProcess(["sessions", "history", "bad key", ...target()], { env: cleanEnv() });
    expect(badKey.code, badKey.stderr).toBe(2);
  });

  it("tail --max 1 prints the event it counted before exiting", async () => {
    await startGateway();
    const op = await open();
    await op.sessions.create({ key: "agent:main:cron:tailed" });
    const tailed = await runCliProcess(["tail", "--max", "1", "--after", "0", ...target()], {
      env: cleanEnv(),
    });
    expect(tailed.code, tailed.stderr).toBe(0);
    // One event was asked for: the user must see one event line (`HH:MM:SS  #<seq>  <event> …`).
    expect(tailed.stdout).toMatch(/#\d+\s+\S+/);
  });
});
