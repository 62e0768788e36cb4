// `events.subscribe` replay is bounded across connections: a peer that asks for the whole window on
// many connections and never reads keeps at most the gateway's replay budget queued, the rest are
// refused RATE_LIMITED, and other clients still get their replay.
import { afterEach, describe, expect, it } from "vitest";
import type { Connection } from "./connection";
import { CLIENT_TOKEN, startTestGateway, type TestGateway, twoAgentConfig } from "./testing/test-gateway";
import { type ResponseFrame, TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

const MiB = 1_048_576;
const SESSION = "agent:main:webchat:dm:alice";
const OTHER_CLIENT_TOKEN = "client-token-other-0123456789";
/** Paused peers asking for the whole window. */
const ATTACKERS = 20;

let gw: TestGateway | undefined;
const peers: TestPeer[] = [];
afterEach(async () => {
  for (const peer of peers.splice(0)) peer.socket.terminate();
  await gw?.close();
  gw = undefined;
});

function connections(): ReadonlySet<Connection> {
  // biome-ignore lint/suspicious/noExplicitAny: the transport is private to the gateway
  return (gw!.gateway as any).transport.connections;
}

/** Bytes the gateway holds unsent for its peers, all connections together. */
function queuedBytes(): number {
  let sum = 0;
  // biome-ignore lint/suspicious/noExplicitAny: the socket is private to the connection
  for (const connection of connections()) sum += (connection as any).socket.bufferedAmount as number;
  return sum;
}

async function client(token = CLIENT_TOKEN): Promise<TestPeer> {
  const peer = await TestPeer.connect(gw!.url, { token, role: "client" });
  peers.push(peer);
  return peer;
}

const BUDGET = 16 * MiB;

function config() {
  return {
    ...twoAgentConfig,
    auth: {
      tokens: [
        ...twoAgentConfig.auth.tokens,
        { name: "other", token: OTHER_CLIENT_TOKEN, role: "client" as const, sessions: [SESSION] },
      ],
    },
    // A replay is at most 4 MiB (half the default send buffer), a token's at most 4 MiB together.
    gateway: { limits: { maxQueuedReplayBytes: BUDGET } },
  };
}

/** ~6 MB of events the clients may see: a replay from 0 is the newest 4 MiB of them (20 events). */
async function publishBig(gateway: TestGateway, count = 30): Promise<void> {
  const { bus } = gateway.gateway;
  const from = bus.currentSeq;
  for (let i = 0; i < count; i++)
    bus.publish(
      "session.updated",
      { key: SESSION, sessionId: "s", reason: `${i}:${"x".repeat(200_000)}` },
      { sessionKey: SESSION },
    );
  // A cluster's log numbers them once written and read back.
  await until(() => bus.currentSeq >= from + count, "the events to be in the log");
}

describe("replay queued for peers that do not read", () => {
  it("holds at most the replay budget, refuses the rest RATE_LIMITED, and other clients still replay", async () => {
    gw = await startTestGateway(config());
    await publishBig(gw);

    const attackers: TestPeer[] = [];
    for (let i = 0; i < ATTACKERS; i++) attackers.push(await client());
    for (const peer of attackers) {
      // biome-ignore lint/suspicious/noExplicitAny: ws's underlying TCP socket
      (peer.socket as any)._socket.pause();
      peer.sendRaw(
        JSON.stringify({ type: "req", id: "s", method: "events.subscribe", params: { after: 0 } }),
      );
    }
    await until(
      () => [...connections()].filter((connection) => connection.subscribed).length === ATTACKERS,
      "every subscribe to be handled",
    );
    // Before: 20 replays of 4 MiB, less what the kernel took (~80 MB here).
    expect(queuedBytes()).toBeLessThanOrEqual(BUDGET);

    // Another token's reconnecting client gets its whole replay meanwhile.
    const other = await client(OTHER_CLIENT_TOKEN);
    const answer = await other.request("events.subscribe", { after: 0 });
    expect(answer.ok).toBe(true);
    await until(
      () => other.events.some((event) => String(event.payload.reason).startsWith("29:")),
      "the other client's replay",
    );
    expect(other.events.map((event) => Number(String(event.payload.reason).split(":")[0]))).toEqual(
      Array.from({ length: 20 }, (_, i) => 10 + i),
    );

    // Once read, the attackers' answers: the replays that did not fit were refused, naming the limit.
    // biome-ignore lint/suspicious/noExplicitAny: ws's underlying TCP socket
    for (const peer of attackers) (peer.socket as any)._socket.resume();
    const answers = await until(() => {
      const all = attackers.map((peer) => peer.responses.find((frame) => frame.id === "s"));
      return all.every(Boolean) && (all as ResponseFrame[]);
    }, "every attacker's answer");
    const refused = answers.filter((frame) => frame.error?.code === "RATE_LIMITED");
    // One token's share is one replay here (4 MiB): the kernel may have taken a few whole.
    expect(refused.length).toBeGreaterThanOrEqual(ATTACKERS - 5);
    expect(refused[0]!.error!.message).toContain("gateway.limits.maxQueuedReplayBytes");
    expect(refused[0]!.error).toMatchObject({ details: { limit: "gateway.limits.maxQueuedReplayBytes" } });

    // Written out, the budget is free again: the same token replays, and nothing stays queued.
    await until(() => queuedBytes() === 0, "the replays to be written");
    const retry = await attackers[0]!.request("events.subscribe", { after: 0 });
    expect(retry.ok).toBe(true);
    for (const peer of attackers) peer.close();
    await until(() => connections().size === 1, "the attackers' connections to be gone");
    const again = await client();
    const before = again.events.length;
    expect((await again.request("events.subscribe", { after: 0 })).ok).toBe(true);
    await until(() => again.events.length >= before + 20, "a replay after the attack");
  }, 60_000);

  it("a refused subscribe leaves the connection as it was: a retry replays what it missed", async () => {
    gw = await startTestGateway(config());
    await publishBig(gw);
    // One paused connection holds the token's share.
    const holder = await client();
    // biome-ignore lint/suspicious/noExplicitAny: ws's underlying TCP socket
    (holder.socket as any)._socket.pause();
    holder.sendRaw(
      JSON.stringify({ type: "req", id: "s", method: "events.subscribe", params: { after: 0 } }),
    );
    await until(
      () => [...connections()].some((connection) => connection.subscribed),
      "the holder's subscribe",
    );

    const late = await client();
    const refused = await late.request("events.subscribe", { after: 0 });
    expect(refused.error).toMatchObject({ code: "RATE_LIMITED", retryable: true });
    // Not subscribed meanwhile: a live event is not sent (it will come with the retry's replay).
    gw.gateway.bus.publish(
      "session.updated",
      { key: SESSION, sessionId: "s", reason: "live" },
      { sessionKey: SESSION },
    );
    holder.socket.terminate();
    await until(() => connections().size === 1, "the holder to be gone");
    expect(late.events).toEqual([]);
    expect((await late.request("events.subscribe", { after: 0 })).ok).toBe(true);
    await until(() => late.events.some((event) => event.payload.reason === "live"), "the retry's replay");
    expect(late.events.length).toBeGreaterThan(1);
  }, 30_000);
});

describe("events.subscribe input", () => {
  it("names the entry of sessionKeys that is not a key", async () => {
    gw = await startTestGateway(config());
    const peer = await client();
    const answer = await peer.request("events.subscribe", {
      sessionKeys: [SESSION, "agent:main:webchat:dm:.."],
    });
    expect(answer.error?.code).toBe("INVALID_REQUEST");
    expect(answer.error?.message).toMatch(/^sessionKeys\[1\]/);
    const single = await peer.request("events.subscribe", { sessionKey: "agent:main:webchat:dm:.." });
    expect(single.error?.message).toMatch(/^sessionKey\b/);
  });
});
