import {
  type ClientOptions,
  connect,
  isAbortError,
  type SwitchboardClient,
  serve,
} from "@switchboard/client";
import { SwitchboardError } from "@switchboard/core";
import { beforeEach, describe, expect, it } from "vitest";
import { controlledSockets } from "./testing/controlled-sockets";
import { deferred } from "./testing/deferred";
import { perTestSdkGateway } from "./testing/sdk-gateway";
import { testStoreKind } from "./testing/test-gateway";
import { until, untilState } from "./testing/until";

const STORE = testStoreKind();
const WORKER_TOKEN = "sdk-worker-token-0123456789";
const CLIENT_TOKEN = "sdk-client-token-0123456789";

const config = {
  auth: {
    tokens: [
      { name: "worker", token: WORKER_TOKEN, role: "agent" as const, agents: ["main"] },
      {
        name: "webchat",
        token: CLIENT_TOKEN,
        role: "client" as const,
        sessions: ["agent:main:webchat:dm:*"],
      },
    ],
  },
  agents: { list: [{ id: "main", default: true }] },
};

const sdk = perTestSdkGateway();

beforeEach(async () => {
  await sdk.start(config, { store: STORE });
});

const open = (options: Partial<ClientOptions> = {}): Promise<SwitchboardClient> => sdk.open(options);

describe("@switchboard/client against the real gateway", () => {
  it("completes the handshake and makes typed calls; errors keep their protocol codes", async () => {
    const client = await open();
    expect(client.state).toBe("open");
    expect(client.connection).toMatchObject({
      protocol: 1,
      role: "operator",
      server: { name: "switchboard", instanceId: sdk.gw.gateway.instanceId },
    });
    expect(client.connection?.methods).toContain("sessions.list");

    const created = await client.sessions.create({ key: "agent:main:cron:nightly" });
    expect(created.key).toBe("agent:main:cron:nightly");
    expect(await client.sessions.resolve({ key: "agent:main:cron:nightly" })).toEqual({
      key: created.key,
      sessionId: created.sessionId,
    });
    const listed = await client.sessions.list({});
    expect(listed.sessions.map((session) => session.key)).toContain("agent:main:cron:nightly");

    // Refused before sending (schema), refused by the gateway (unknown run), refused by role.
    await expect(client.sessions.create({ key: 42 } as never)).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message: expect.stringContaining("key"),
    });
    await expect(client.agent.wait({ runId: "no-such-run" })).rejects.toMatchObject({ code: "NOT_FOUND" });
    const webchat = await open({
      token: CLIENT_TOKEN,
      role: "client",
      sessionKey: "agent:main:webchat:dm:alice",
    });
    await expect(webchat.sessions.list({})).rejects.toMatchObject({ code: "FORBIDDEN" });
    await expect(webchat.sessions.history({ sessionKey: "agent:main:cron:nightly" })).rejects.toMatchObject({
      code: "FORBIDDEN",
    });
    await expect(
      webchat.chat.send({ sessionKey: "agent:main:webchat:dm:alice", message: "hi" }),
    ).resolves.toMatchObject({ status: "accepted" });

    await expect(
      connect({ url: sdk.gw.url, token: "not-a-valid-token-at-all", role: "operator" }),
    ).rejects.toMatchObject({ code: "UNAUTHORIZED" });
  });

  it("resolves an agent.wait that was in flight when the connection dropped, for a run that ended meanwhile", async () => {
    const release = deferred();
    const worker = await serve({ url: sdk.gw.url, token: WORKER_TOKEN }, ["main"], async (run) => {
      await release.promise;
      return { reply: `late reply to ${run.input.message}` };
    });
    const control = controlledSockets();
    const client = await open({ WebSocket: control.WebSocket });
    const observer = await open();

    const { runId } = await client.chat.send({ sessionKey: "main", message: "hello" });
    const waiting = client.agent.wait({ runId, timeoutMs: 10_000 });
    await until(
      () => control.frames(0).some((frame) => frame.method === "agent.wait"),
      "agent.wait to be sent",
    );

    control.blocked = true;
    control.drop(0);
    await untilState(client, "reconnecting");
    release.resolve();
    expect(await observer.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({ status: "ok" });

    control.blocked = false;
    await expect(waiting).resolves.toMatchObject({ runId, status: "ok", reply: "late reply to hello" });
    expect(control.sockets).toHaveLength(2);
    expect(control.frames(1).filter((frame) => frame.method === "agent.wait")).toHaveLength(1);
    await worker.stop();
  });

  // Before session 23 a run taken back at a disconnect and handed to the same worker once it was
  // back was ignored as "a repeated assignment" while its first handler was still winding down:
  // it then hung until its timeout.
  it("takes a run handed back to it after a reconnect anew, while its first handler is still winding down", async () => {
    const op = await open();
    const busy = deferred();
    const stubborn = deferred();
    const other = await serve(
      { url: sdk.gw.url, token: WORKER_TOKEN },
      ["main"],
      async () => {
        await busy.promise;
        return { reply: "busy done" };
      },
      { concurrency: 1 },
    );
    const occupied = await op.chat.send({ sessionKey: "agent:main:cron:occupied", message: "busy" });
    await until(
      async () => (await op.sessions.status({ sessionKey: "agent:main:cron:occupied" })).activeRun,
      "the other worker busy",
    );
    const control = controlledSockets();
    let attempts = 0;
    const worker = await serve(
      { url: sdk.gw.url, token: WORKER_TOKEN, WebSocket: control.WebSocket },
      ["main"],
      async () => {
        attempts += 1;
        // The first attempt ignores its abort for a while, as a handler deep in a model call may.
        if (attempts === 1) await stubborn.promise;
        return { reply: `attempt ${attempts}` };
      },
      { concurrency: 2 },
    );
    try {
      const { runId } = await op.chat.send({ sessionKey: "agent:main:cron:target", message: "go" });
      await until(() => attempts === 1, "the first attempt");
      control.drop(0);
      expect(await op.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({
        status: "ok",
        reply: "attempt 2",
      });
    } finally {
      stubborn.resolve();
      busy.resolve();
    }
    expect(await op.agent.wait({ runId: occupied.runId, timeoutMs: 5_000 })).toMatchObject({ status: "ok" });
    await worker.stop();
    await other.stop();
  });

  // Before session 23 a `sessionKeys` subscription was remembered as "every session": after a
  // reconnect the client got the events of sessions it never asked for (a client token's app,
  // following alice, got bob's).
  it("renews a sessionKeys subscription after a reconnect as those sessions only", async () => {
    const [A, B, C] = ["agent:main:cron:alpha", "agent:main:cron:beta", "agent:main:cron:gamma"];
    const writer = await open();
    for (const key of [A, B, C]) await writer.sessions.create({ key });
    const control = controlledSockets();
    const client = await open({ WebSocket: control.WebSocket });
    const seen: string[] = [];
    client.on("session.updated", (event) => void seen.push(event.payload.key));
    await client.subscribe({ sessionKeys: [A, B] });
    control.drop(0);
    await until(() => control.sockets.length === 2 && client.state === "open", "the reconnect");
    await writer.sessions.patch({ key: C, displayName: "not followed" });
    await writer.sessions.patch({ key: A, displayName: "followed" });
    await until(() => seen.includes(A), "A's event");
    expect(seen).not.toContain(C);
    const renewal = control.frames(1).find((frame) => frame.method === "events.subscribe");
    expect(renewal?.params).toMatchObject({ sessionKeys: [A, B] });
  });

  // Before session 23 one refused key made the whole renewal fail: the client went open with no
  // subscription at all, and said nothing.
  it("renews the subscriptions it can when one is refused after a reconnect, and reports possible missed events", async () => {
    const [A, B] = ["agent:main:cron:kept", "agent:main:cron:reset"];
    const writer = await open();
    await writer.sessions.create({ key: A });
    const { sessionId } = await writer.sessions.create({ key: B });
    const control = controlledSockets();
    const client = await open({ WebSocket: control.WebSocket });
    const seen: string[] = [];
    const missed: unknown[] = [];
    client.on("session.updated", (event) => void seen.push(`${event.payload.key}:${event.payload.reason}`));
    client.onEventsMissed((range) => void missed.push(range));
    await client.subscribe({ sessionKey: A });
    await client.subscribe({ sessionKey: sessionId });
    // B's transcript is replaced: the sessionId followed names no session any more.
    await writer.sessions.reset({ key: B });
    control.blocked = true;
    control.drop(0);
    await untilState(client, "reconnecting");
    control.blocked = false;
    await untilState(client, "open");
    await writer.sessions.patch({ key: A, displayName: "still followed" });
    await until(() => seen.some((entry) => entry.startsWith(`${A}:`)), "A's event after the refused renewal");
    expect(missed.length).toBeGreaterThan(0);
  });

  it("resumes events after a reconnect without losing or repeating any", async () => {
    const control = controlledSockets();
    const resuming = await open({ WebSocket: control.WebSocket });
    const steady = await open();
    const seen = {
      resuming: [] as Array<{ seq: number; event: string; key?: string }>,
      steady: [] as Array<{ seq: number; event: string; key?: string }>,
    };
    resuming.on(
      "session.updated",
      (event) => void seen.resuming.push({ seq: event.seq, event: event.event, key: event.payload.key }),
    );
    resuming.on("audit.appended", (event) => void seen.resuming.push({ seq: event.seq, event: event.event }));
    steady.on(
      "session.updated",
      (event) => void seen.steady.push({ seq: event.seq, event: event.event, key: event.payload.key }),
    );
    steady.on("audit.appended", (event) => void seen.steady.push({ seq: event.seq, event: event.event }));
    await resuming.subscribe({});
    const { seq: start } = await steady.subscribe({});

    const keys = Array.from({ length: 15 }, (_, index) => `agent:main:cron:job-${index}`);
    const createAll = async (batch: string[]) => {
      for (const key of batch) await steady.sessions.create({ key });
    };
    const sawCreated = (list: typeof seen.resuming, key: string) => list.some((event) => event.key === key);

    await createAll(keys.slice(0, 5));
    await until(() => sawCreated(seen.resuming, keys[4]!), "the first batch");
    control.blocked = true;
    control.drop();
    await untilState(resuming, "reconnecting");
    await createAll(keys.slice(5, 10)); // happens while the client is away
    await until(() => sawCreated(seen.steady, keys[9]!), "the second batch on the steady client");
    control.blocked = false;
    await untilState(resuming, "open");
    await createAll(keys.slice(10));
    await until(() => sawCreated(seen.resuming, keys[14]!), "the last batch");
    const end = seen.resuming.find((event) => event.key === keys[14])!.seq;

    const window = (list: typeof seen.resuming) =>
      list.filter((event) => event.seq > start && event.seq <= end);
    const seqs = window(seen.resuming).map((event) => event.seq);
    expect(new Set(seqs).size).toBe(seqs.length);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(window(seen.resuming)).toEqual(window(seen.steady));
    expect(
      window(seen.resuming)
        .filter((event) => event.event === "session.updated")
        .map((event) => event.key),
    ).toEqual(keys);
    expect(control.sockets).toHaveLength(2);
  });

  it("times out and aborts a single call without harming the connection", async () => {
    const client = await open();
    // Nobody serves `main` here, so the run stays queued and agent.wait has nothing to answer yet.
    const { runId } = await client.chat.send({ sessionKey: "main", message: "anyone?" });

    await expect(client.agent.wait({ runId, timeoutMs: 400 }, { timeoutMs: 50 })).rejects.toMatchObject({
      code: "TIMEOUT",
      retryable: true,
    });

    const controller = new AbortController();
    const aborted = client.agent.wait({ runId, timeoutMs: 10_000 }, { signal: controller.signal });
    controller.abort();
    const error = await aborted.then(
      () => undefined,
      (reason: unknown) => reason,
    );
    expect(isAbortError(error)).toBe(true);
    await expect(
      client.agent.wait({ runId }, { signal: AbortSignal.abort(new SwitchboardError("TIMEOUT", "gave up")) }),
    ).rejects.toThrow("gave up");

    // The late answer to the timed-out call arrives meanwhile and is ignored; the client keeps working.
    expect(await client.agent.wait({ runId, timeoutMs: 500 })).toMatchObject({ runId, status: "timeout" });
    expect(client.state).toBe("open");
    expect((await client.sessions.status({ sessionKey: "main" })).sessionKey).toBeDefined();
  });

  it("runs an AgentWorker end to end: progress, tools.invoke for the run, reply with usage, failures", async () => {
    const op = await open();
    const progress: Array<{ runId: string; kind: string; text?: string }> = [];
    const ended: Array<{ runId: string; usage?: unknown }> = [];
    op.on("run.progress", (event) => void progress.push(event.payload));
    op.on("run.ended", (event) => void ended.push(event.payload));
    await op.subscribe({ sessionKey: "agent:main:main" });

    const worker = await serve({ url: sdk.gw.url, token: WORKER_TOKEN }, ["main"], async (run, ctx) => {
      await ctx.progress("text-delta", { text: "thinking" });
      const status = await ctx.invokeTool("session_status", {});
      if (run.input.message === "fail") throw new Error("handler gave up");
      return {
        reply: `${run.input.message} from ${String(status.sessionKey)}`,
        usage: { inputTokens: 3, outputTokens: 4 },
      };
    });

    const { runId } = await op.chat.send({ sessionKey: "main", message: "hello" });
    expect(await op.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "hello from main",
    });
    expect(progress).toContainEqual(expect.objectContaining({ runId, kind: "text-delta", text: "thinking" }));
    expect(await until(() => ended.find((event) => event.runId === runId), "run.ended")).toMatchObject({
      usage: { inputTokens: 3, outputTokens: 4 },
    });
    const history = await op.sessions.history({ sessionKey: "main", includeTools: true });
    expect(history.messages.map((message) => message.role)).toEqual([
      "user",
      "toolCall",
      "toolResult",
      "assistant",
    ]);

    const { runId: failing } = await op.chat.send({ sessionKey: "main", message: "fail" });
    expect(await op.agent.wait({ runId: failing, timeoutMs: 5_000 })).toMatchObject({
      status: "error",
      error: "handler gave up",
    });

    // A worker may act only for runs it holds.
    await expect(
      worker.client.tools.invoke({ tool: "session_status", args: {}, runId }),
    ).rejects.toMatchObject({ code: "FORBIDDEN" });

    await worker.stop();
    expect(worker.client.state).toBe("closed");
    expect((await op.agents.list()).agents.find((agent) => agent.id === "main")).toMatchObject({
      connected: false,
    });
  });

  it("streams a delta larger than one run.progress may carry in pieces, its text intact", async () => {
    // Before session 21 the SDK sent it whole: the gateway refused the progress call (text over
    // 512 KiB, or a frame over maxPayload) and the worker only logged a warning. Multibyte text, a
    // surrogate pair at every cut, and one delta past the 1 MiB frame limit on its own.
    const text = `${"é".repeat(200_000)}${"😀".repeat(100_000)}${"x".repeat(300_000)}`;
    const op = await open();
    const progress: Array<{ runId: string; text?: string }> = [];
    op.on("run.progress", (event) => void progress.push(event.payload));
    await op.subscribe({ sessionKey: "agent:main:main" });
    for (const progressIntervalMs of [50, 0]) {
      const worker = await serve(
        { url: sdk.gw.url, token: WORKER_TOKEN },
        ["main"],
        async (_run, ctx) => {
          await ctx.progress("text-delta", { text });
          return { reply: "streamed" };
        },
        { progressIntervalMs },
      );
      const { runId } = await op.chat.send({ sessionKey: "main", message: "stream" });
      expect(await op.agent.wait({ runId, timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
      const mine = () => progress.filter((event) => event.runId === runId).map((event) => event.text ?? "");
      await until(() => mine().join("").length === text.length || undefined, "every piece");
      expect(mine().join("")).toBe(text);
      expect(mine().length).toBeGreaterThan(4);
      await worker.stop();
    }
  });
});
