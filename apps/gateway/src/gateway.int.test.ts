import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  CLIENT_TOKEN,
  startTestGateway,
  type TestGateway,
  TestWorker,
  testStoreKind,
  twoAgentConfig,
  WORKER_TOKEN,
} from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

const STORE = testStoreKind();
const baseConfig = twoAgentConfig;

describe("gateway: handshake, roles and runs", () => {
  let gw: TestGateway;
  beforeEach(async () => {
    gw = await startTestGateway(baseConfig, { store: STORE, handshakeTimeoutMs: 300 });
  });
  afterEach(async () => {
    await gw.close();
  });

  it("serves /healthz on the same port", async () => {
    const response = await fetch(`http://127.0.0.1:${gw.gateway.port}/healthz`);
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ ok: true });
    const probe = await fetch(`http://127.0.0.1:${gw.gateway.port}/healthz`, { method: "HEAD" });
    expect(probe.status).toBe(200);
    expect(await probe.text()).toBe("");
  });

  it("answers connect with the server, role, methods and limits", async () => {
    const peer = await TestPeer.open(gw.url);
    const response = await peer.request("connect", {
      protocol: 1,
      client: { name: "t", version: "1" },
      auth: { token: gw.token },
      role: "operator",
    });
    expect(response.ok).toBe(true);
    expect(response.result).toMatchObject({
      protocol: 1,
      server: { name: "switchboard" },
      role: "operator",
      limits: { maxPayload: 1048576, maxBufferedBytes: 8388608, heartbeatMs: 15000 },
    });
    expect(response.result?.methods).toContain("sessions.list");
    peer.close();
  });

  it("refuses a bad token with UNAUTHORIZED and closes 4003", async () => {
    const peer = await TestPeer.open(gw.url);
    const response = await peer.request("connect", {
      protocol: 1,
      client: { name: "t", version: "1" },
      auth: { token: "wrong-token-wrong-token" },
      role: "operator",
    });
    expect(response.error?.code).toBe("UNAUTHORIZED");
    expect((await peer.waitClosed()).code).toBe(4003);
  });

  it("closes 4001 when no connect arrives in time, and refuses frames before connect", async () => {
    const silent = await TestPeer.open(gw.url);
    expect((await silent.waitClosed()).code).toBe(4001);
    const eager = await TestPeer.open(gw.url);
    const response = await eager.request("sessions.list", {});
    expect(response.ok).toBe(false);
    expect((await eager.waitClosed()).code).toBe(4001);
  });

  it("refuses methods outside a role", async () => {
    const client = await TestPeer.connect(gw.url, {
      token: CLIENT_TOKEN,
      role: "client",
      sessionKey: "agent:main:webchat:dm:alice",
    });
    const listed = await client.request("sessions.list", {});
    expect(listed.error?.code).toBe("FORBIDDEN");
    const worker = await TestPeer.connect(gw.url, { token: WORKER_TOKEN, role: "agent", agents: ["main"] });
    const chat = await worker.request("chat.send", { sessionKey: "main", message: "hi" });
    expect(chat.error?.code).toBe("FORBIDDEN");
    const otherRole = await TestPeer.open(gw.url);
    const asOperator = await otherRole.request("connect", {
      protocol: 1,
      client: { name: "t", version: "1" },
      auth: { token: WORKER_TOKEN },
      role: "operator",
    });
    expect(asOperator.error?.code).toBe("UNAUTHORIZED");
    client.close();
    worker.close();
  });

  it("runs chat input on a worker and answers agent.wait, also after the run ended and after a restart", async () => {
    const worker = await TestWorker.start(
      gw.url,
      WORKER_TOKEN,
      ["main"],
      ({ run }) => `pong: ${run.input.message}`,
    );
    const op = await gw.operator();
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "ping" });
    const waited = await op.call("agent.wait", { runId, timeoutMs: 5000 });
    expect(waited).toMatchObject({ runId, status: "ok", reply: "pong: ping" });
    const again = await op.call("agent.wait", { runId });
    expect(again).toMatchObject({ status: "ok", reply: "pong: ping" });

    const history = await op.call<{ messages: Array<{ role: string; content: Array<{ text?: string }> }> }>(
      "sessions.history",
      {
        sessionKey: "main",
      },
    );
    expect(history.messages.map((m) => [m.role, m.content[0]?.text])).toEqual([
      ["user", "ping"],
      ["assistant", "pong: ping"],
    ]);
    worker.close();
    await gw.restart();
    const op2 = await gw.operator();
    expect(await op2.call("agent.wait", { runId })).toMatchObject({ status: "ok", reply: "pong: ping" });
  });

  it("fails a run the worker fails, times out a run nobody serves, and reassigns on disconnect", async () => {
    const op = await gw.operator();
    const failing = await TestWorker.start(gw.url, WORKER_TOKEN, ["main"], () => ({
      fail: "model exploded",
    }));
    const { runId: failed } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "x",
    });
    expect(await op.call("agent.wait", { runId: failed })).toMatchObject({
      status: "error",
      error: "model exploded",
    });
    failing.close();

    const { runId: lonely } = await op.call<{ runId: string }>("agent", {
      sessionKey: "agent:research:main",
      message: "anyone?",
      timeoutSeconds: 0.3,
    });
    expect(await op.call("agent.wait", { runId: lonely, timeoutMs: 3000 })).toMatchObject({
      status: "timeout",
    });

    // A worker that takes the run and dies: the run moves to the other worker.
    const dying = await TestWorker.start(gw.url, WORKER_TOKEN, ["research"], () => ({ ignore: true }));
    const { runId: moved } = await op.call<{ runId: string }>("agent", {
      sessionKey: "agent:research:main",
      message: "hello",
    });
    await dying.peer.waitForEvent((event) => event.event === "run.assigned");
    const healthy = await TestWorker.start(
      gw.url,
      WORKER_TOKEN,
      ["research"],
      () => "from the healthy worker",
    );
    dying.close();
    expect(await op.call("agent.wait", { runId: moved, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "from the healthy worker",
    });
    healthy.close();

    // With no other worker, a disconnect ends the run as error.
    const alone = await TestWorker.start(gw.url, WORKER_TOKEN, ["research"], () => ({ ignore: true }));
    const { runId: orphan } = await op.call<{ runId: string }>("agent", {
      sessionKey: "agent:research:main",
      message: "again",
    });
    await alone.peer.waitForEvent((event) => event.event === "run.assigned");
    alone.close();
    expect(await op.call("agent.wait", { runId: orphan, timeoutMs: 5000 })).toMatchObject({
      status: "error",
      error: "worker disconnected",
    });
  });

  it("returns the same run for the same idempotency key", async () => {
    const op = await gw.operator();
    const first = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "once",
      idempotencyKey: "k-1",
    });
    const second = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "once",
      idempotencyKey: "k-1",
    });
    expect(second.runId).toBe(first.runId);
    const history = await op.call<{ messages: unknown[] }>("sessions.history", { sessionKey: "main" });
    expect(history.messages).toHaveLength(1);
    // Another message under the same key is refused (session 23: it answered the first run, and the
    // message was dropped unseen); so is the same message through `agent`.
    const other = await op.request("chat.send", {
      sessionKey: "main",
      message: "twice",
      idempotencyKey: "k-1",
    });
    expect(other.error).toMatchObject({
      code: "CONFLICT",
      message: "idempotencyKey: already used for another message",
    });
    const viaAgent = await op.request("agent", {
      sessionKey: "main",
      message: "once",
      idempotencyKey: "k-1",
    });
    expect(viaAgent.error).toMatchObject({
      code: "CONFLICT",
      message: "idempotencyKey: already used for a chat input",
    });
    // The same message on another lane, or with another time limit, is another input too.
    const run = { sessionKey: "main", message: "laned", idempotencyKey: "k-2" };
    await op.call("agent", { ...run, timeoutSeconds: 60 });
    expect(await op.call("agent", { ...run, timeoutSeconds: 60 })).toMatchObject({ status: "accepted" });
    expect((await op.request("agent", { ...run, lane: "nested", timeoutSeconds: 60 })).error).toMatchObject({
      code: "CONFLICT",
      message: "idempotencyKey: already used for an input on lane main",
    });
    expect((await op.request("agent", { ...run, timeoutSeconds: 5 })).error).toMatchObject({
      code: "CONFLICT",
      message: "idempotencyKey: already used for an input with timeoutSeconds 60",
    });
  });

  it("replays events after a cursor", async () => {
    const op = await gw.operator();
    const { seq } = await op.call<{ seq: number }>("events.subscribe", {});
    await op.call("sessions.create", { key: "agent:main:cron:nightly" });
    await op.waitForEvent((event) => event.event === "session.updated");
    const late = await gw.operator();
    await late.call("events.subscribe", { after: seq });
    const replayed = await late.waitForEvent((event) => event.event === "session.updated");
    expect(replayed.payload).toMatchObject({ key: "agent:main:cron:nightly", reason: "created" });
    expect(replayed.seq).toBeGreaterThan(seq);
  });

  it("lets a client see only its own sessions", async () => {
    const op = await gw.operator();
    await op.call("sessions.create", { key: "agent:main:webchat:dm:bob", channel: "webchat" });
    const client = await TestPeer.connect(gw.url, {
      token: CLIENT_TOKEN,
      role: "client",
      sessionKey: "agent:main:webchat:dm:alice",
    });
    const mine = await client.request("chat.send", {
      sessionKey: "agent:main:webchat:dm:alice",
      message: "hi",
    });
    expect(mine.ok).toBe(true);
    const theirs = await client.request("sessions.history", { sessionKey: "agent:main:webchat:dm:bob" });
    expect(theirs.error?.code).toBe("FORBIDDEN");
    const wrongKey = await TestPeer.open(gw.url);
    const refused = await wrongKey.request("connect", {
      protocol: 1,
      client: { name: "t", version: "1" },
      auth: { token: CLIENT_TOKEN },
      role: "client",
      sessionKey: "agent:main:main",
    });
    expect(refused.error?.code).toBe("UNAUTHORIZED");
    client.close();
  });
});
