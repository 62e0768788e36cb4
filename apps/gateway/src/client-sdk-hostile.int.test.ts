// Hostile tests of @switchboard/client against the real gateway: reconnects, resume by seq,
// request/response matching, timeouts, aborts and clean shutdown.
import { spawn } from "node:child_process";
import type { ClientOptions, SwitchboardClient } from "@switchboard/client";
import type { ConfigInput } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { controlledSockets } from "./testing/controlled-sockets";
import { perTestSdkGateway } from "./testing/sdk-gateway";
import type { TestGateway } from "./testing/test-gateway";
import { until, untilState } from "./testing/until";

const A = "agent:main:cron:alpha";
const B = "agent:main:cron:beta";

const baseConfig: ConfigInput = { agents: { list: [{ id: "main", default: true }] } };

const sdk = perTestSdkGateway();

function startGateway(config: ConfigInput = baseConfig): Promise<TestGateway> {
  return sdk.start(config, { store: "memory" });
}

const open = (options: Partial<ClientOptions> = {}): Promise<SwitchboardClient> => sdk.open(options);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function pendingCount(client: SwitchboardClient): number {
  return (client as unknown as { pending: Map<string, unknown> }).pending.size;
}

describe("resume across reconnects", () => {
  it("renews several session subscriptions from one cursor: an event of each session is replayed, in seq order", async () => {
    await startGateway();
    const control = controlledSockets();
    const op = await open({ WebSocket: control.WebSocket });
    const writer = await open();
    await writer.sessions.create({ key: A });
    await writer.sessions.create({ key: B });
    const seen: string[] = [];
    op.on("session.updated", (event) => void seen.push(event.payload.key));
    await op.subscribe({ sessionKey: A });
    await op.subscribe({ sessionKey: B });

    control.blocked = true;
    control.drop();
    await untilState(op, "reconnecting");
    // While away: B changes first, then A (A's event gets the higher seq).
    await writer.sessions.patch({ key: B, label: "b-while-away" });
    await writer.sessions.patch({ key: A, label: "a-while-away" });
    control.blocked = false;
    await untilState(op, "open");
    await until(() => seen.includes(A), "A's update");
    await sleep(150);
    // Was [A]: renewing A (after = cursor) replayed A's update and moved the cursor past B's, so
    // renewing B next skipped it. Both are renewed in one call now (`sessionKeys`), one replay.
    expect(seen).toEqual([B, A]);
  });
});

describe("a first subscribe lost to a drop", () => {
  it("is retried from the dropped connection's handshake: the events since the lost call are replayed", async () => {
    await startGateway();
    const writer = await open();
    await writer.sessions.create({ key: A });
    const control = controlledSockets();
    const op = await open({ WebSocket: control.WebSocket });
    const labels: string[] = [];
    op.on("session.updated", (event) => void labels.push(event.payload.key));

    // The gateway takes the subscribe, but its answer (and what follows) never reaches the client.
    control.frozen = true;
    const subscribing = op.subscribe({ sessionKey: A });
    await sleep(100);
    await writer.sessions.patch({ key: A, label: "after-the-lost-answer" });
    await sleep(50);
    control.blocked = true;
    control.frozen = false;
    control.drop();
    await untilState(op, "reconnecting");
    await writer.sessions.patch({ key: A, label: "while-away" });
    control.blocked = false;

    const answer = await subscribing;
    expect(answer.subscribed).toBe(true);
    // Retried live (before), both changes were skipped without notice.
    await until(() => labels.length === 2, "both changes of A replayed");
    const retried = control.frames(1).find((frame) => frame.method === "events.subscribe");
    expect(typeof retried?.params?.after).toBe("number");
    await writer.sessions.patch({ key: A, label: "live" });
    await until(() => labels.length === 3, "the live change after");
  });
});

describe("several sessions in one subscribe", () => {
  it("a client token naming one session it may not see among them follows none of them", async () => {
    const CLIENT_TOKEN = "hostile-client-token-0123456789";
    const MINE = "agent:main:webchat:dm:alice";
    await startGateway({
      ...baseConfig,
      auth: {
        tokens: [
          { name: "webchat", token: CLIENT_TOKEN, role: "client", sessions: ["agent:main:webchat:dm:*"] },
        ],
      },
    });
    const writer = await open();
    await writer.sessions.create({ key: MINE });
    await writer.sessions.create({ key: A });
    const webchat = await open({ token: CLIENT_TOKEN, role: "client", sessionKey: MINE });
    const seen: string[] = [];
    webchat.on("session.updated", (event) => void seen.push(event.payload.key));
    await expect(webchat.subscribe({ sessionKeys: [MINE, A] })).rejects.toMatchObject({ code: "FORBIDDEN" });
    await writer.sessions.patch({ key: A, label: "not for the client" });
    await writer.sessions.patch({ key: MINE, label: "not subscribed either" });
    await sleep(150);
    expect(seen).toEqual([]);
    await webchat.subscribe({ sessionKeys: [MINE] });
    await writer.sessions.patch({ key: A, label: "still not for the client" });
    await writer.sessions.patch({ key: MINE, label: "now" });
    await until(() => seen.length > 0, "the client's own update");
    await sleep(100);
    expect(seen).toEqual([MINE]);
  });
});

describe("reconnect backoff", () => {
  it("backs off when every connection drops right after its handshake (the backoff resets only once one lasts)", async () => {
    await startGateway();
    const control = controlledSockets();
    const op = await open({
      WebSocket: control.WebSocket,
      reconnect: { initialDelayMs: 20, maxDelayMs: 5_000, jitter: false },
    });
    const before = control.constructed;
    control.dropAfterHandshake = true;
    control.drop();
    await sleep(1_200);
    const attempts = control.constructed - before;
    // Exponential backoff from 20 ms: 20+40+80+160+320+640 ms covers 1.2 s in about 6 attempts.
    expect(attempts).toBeLessThanOrEqual(10);
    control.dropAfterHandshake = false;
    await op.close();
  });
});

describe("guards that held up", () => {
  it("detects a deaf (half-open) connection by heartbeat, reconnects, and re-sends an in-flight agent.wait once", async () => {
    await startGateway({ ...baseConfig, gateway: { limits: { heartbeatMs: 100 } } });
    const control = controlledSockets();
    const op = await open({ WebSocket: control.WebSocket });
    const { runId } = await op.chat.send({ sessionKey: "main", message: "nobody serves this" });
    const waiting = op.agent.wait({ runId, timeoutMs: 800 });
    await until(() => control.frames(0).some((frame) => frame.method === "agent.wait"), "wait sent");
    control.frozen = true;
    await untilState(op, "reconnecting");
    control.frozen = false;
    await untilState(op, "open");
    await expect(waiting).resolves.toMatchObject({ runId, status: "timeout" });
    expect(control.sockets.length).toBe(2);
    expect(control.frames(1).filter((frame) => frame.method === "agent.wait")).toHaveLength(1);
    expect(pendingCount(op)).toBe(0);
  });

  it("rejects a state-changing call in flight on a dropped socket at once with a retryable UNAVAILABLE", async () => {
    await startGateway();
    const control = controlledSockets();
    const op = await open({ WebSocket: control.WebSocket });
    control.frozen = true; // the answer never reaches the client
    const sending = op.sessions.create({ key: A });
    await until(() => control.frames(0).some((frame) => frame.method === "sessions.create"), "create sent");
    const started = Date.now();
    control.drop();
    await expect(sending).rejects.toMatchObject({ code: "UNAVAILABLE", retryable: true });
    expect(Date.now() - started).toBeLessThan(1_000);
    control.frozen = false;
    await untilState(op, "open");
    expect((await op.sessions.resolve({ key: A })).key).toBe(A);
    expect(pendingCount(op)).toBe(0);
  });

  it("timeouts and aborts of many calls leave no pending entry and no abort listener behind", async () => {
    await startGateway();
    const op = await open();
    const { runId } = await op.chat.send({ sessionKey: "main", message: "queued" });
    const controller = new AbortController();
    let listeners = 0;
    const add = controller.signal.addEventListener.bind(controller.signal);
    const remove = controller.signal.removeEventListener.bind(controller.signal);
    controller.signal.addEventListener = ((...args: Parameters<typeof add>) => {
      listeners += 1;
      add(...args);
    }) as typeof add;
    controller.signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
      listeners -= 1;
      remove(...args);
    }) as typeof remove;
    const timedOut = Array.from({ length: 100 }, () =>
      op.agent.wait({ runId, timeoutMs: 2_000 }, { timeoutMs: 30, signal: controller.signal }),
    );
    const results = await Promise.allSettled(timedOut);
    expect(
      results.every((r) => r.status === "rejected" && (r.reason as { code?: string }).code === "TIMEOUT"),
    ).toBe(true);
    expect(listeners).toBe(0);
    const aborted = Array.from({ length: 100 }, () =>
      op.agent.wait({ runId, timeoutMs: 2_000 }, { signal: controller.signal }),
    );
    controller.abort();
    const abortedResults = await Promise.allSettled(aborted);
    expect(abortedResults.every((r) => r.status === "rejected")).toBe(true);
    expect(listeners).toBe(0);
    expect(pendingCount(op)).toBe(0);
    // Late answers to forgotten calls are ignored; the connection still matches new calls.
    await sleep(50);
    expect((await op.sessions.status({ sessionKey: "main" })).sessionKey).toBeDefined();
  });

  it("refuses an oversized request before sending it and keeps the connection", async () => {
    await startGateway({ ...baseConfig, gateway: { limits: { maxPayload: 2_048 } } });
    const op = await open();
    await expect(
      op.policy.simulate({ as: "main", tool: "sessions_list", args: { blob: "é".repeat(3_000) } }),
    ).rejects.toMatchObject({ code: "PAYLOAD_TOO_LARGE" });
    expect(op.state).toBe("open");
    expect((await op.sessions.list({})).sessions).toBeDefined();
  });

  it("gives up after maxAttempts: pending and queued calls reject, the client closes", async () => {
    await startGateway();
    const control = controlledSockets();
    const op = await open({
      WebSocket: control.WebSocket,
      reconnect: { initialDelayMs: 5, maxDelayMs: 10, jitter: false, maxAttempts: 3 },
    });
    control.blocked = true;
    control.drop();
    await untilState(op, "reconnecting");
    const queued = op.sessions.list({});
    await untilState(op, "closed");
    await expect(queued).rejects.toMatchObject({ code: "UNAVAILABLE" });
    await expect(op.sessions.list({})).rejects.toMatchObject({ code: "UNAVAILABLE" });
    const attempts = control.constructed;
    await sleep(100);
    expect(control.constructed).toBe(attempts);
  });
});

describe("process hygiene (a separate Node process using the built SDK)", () => {
  const sdkDist = new URL("../../../packages/client-sdk/dist/index.js", import.meta.url).href;
  const script = `
import net from "node:net";
const { connect, createClient } = await import(${JSON.stringify(sdkDist)});
process.on("unhandledRejection", (error) => { console.log("UNHANDLED", String(error)); process.exit(3); });
const [url, token] = process.argv.slice(-2);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const fast = { initialDelayMs: 5, maxDelayMs: 20, jitter: false };
// 1. A live client with a subscription, an in-flight wait and a queued list, closed.
const live = await connect({ url, token, role: "operator", reconnect: fast });
live.on("session.updated", () => {});
await live.subscribe({});
const inFlight = live.agent.wait({ runId: "no-such-run", timeoutMs: 60000 }).catch(() => {});
const listed = live.sessions.list({}).catch((error) => console.log("LISTED", error.code));
const closing = live.close();
console.log("CLOSING");
await closing;
console.log("CLOSED");
await listed;
console.log("LISTED-AWAITED");
await inFlight;
console.log("STEP1");
// 2. A client that never reaches a gateway, closed while reconnecting, with a queued call nobody awaits.
const away = createClient({ url: "ws://127.0.0.1:1", token, role: "operator", reconnect: { initialDelayMs: 50 } });
away.sessions.list({}).catch(() => {});
await sleep(120);
await away.close();
console.log("STEP2");
// 3. A client whose server accepts TCP but never answers the upgrade, closed while connecting.
const sockets = new Set();
const server = net.createServer((socket) => { sockets.add(socket); socket.resume(); socket.on("close", () => sockets.delete(socket)); });
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const mute = createClient({ url: "ws://127.0.0.1:" + server.address().port, token, role: "operator" });
mute.ready().catch(() => {});
await sleep(50);
await mute.close();
console.log("STEP3a");
await new Promise((resolve) => server.close(resolve));
console.log("STEP3");
// 4. connect() with a bad token rejects.
await connect({ url, token: "not-a-valid-token-at-all", role: "operator" }).then(() => console.log("CONNECTED?"), (error) => console.log("REFUSED", error.code));
console.log("DONE", Date.now());
`;

  it("close() leaves nothing keeping the process alive and nothing rejects unhandled", async () => {
    await startGateway();
    const child = spawn(process.execPath, ["--input-type=module", "-e", script, sdk.gw.url, sdk.gw.token], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += String(chunk);
    });
    child.stderr.on("data", (chunk) => {
      out += String(chunk);
    });
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        resolve(null);
      }, 6_000);
      child.on("exit", (exitCode) => {
        clearTimeout(timer);
        resolve(exitCode);
      });
    });
    const done = Number(/DONE (\d+)/.exec(out)?.[1]);
    expect({ code, out }).toMatchObject({ out: expect.stringContaining("REFUSED UNAUTHORIZED") });
    expect(out).not.toContain("UNHANDLED");
    expect({ code, out }).toMatchObject({ code: 0 });
    // No lingering timer: the process ends right after the script's last line.
    expect(Date.now() - done).toBeLessThan(1_500);
  }, 10_000);
});
