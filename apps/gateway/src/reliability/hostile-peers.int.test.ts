import { type Socket, connect as tcpConnect } from "node:net";
import { CloseCodes } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { startTestGateway, type TestGateway } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";
import { SOCKET_SLACK } from "../transport/connection-caps";

let gw: TestGateway | undefined;
const opened: Array<WebSocket | Socket> = [];
afterEach(async () => {
  for (const socket of opened.splice(0)) {
    if (socket instanceof WebSocket) socket.terminate();
    else socket.destroy();
  }
  await gw?.close();
  gw = undefined;
});

function port(url: string): number {
  return Number(new URL(url).port);
}

/** A WebSocket from a chosen loopback address (127.0.0.x all reach a gateway bound to 127.0.0.1 on Linux). */
async function openFrom(url: string, localAddress = "127.0.0.1"): Promise<TestPeer> {
  const socket = new WebSocket(url, { localAddress });
  opened.push(socket);
  await new Promise<void>((resolve, reject) => {
    socket.once("open", () => resolve());
    socket.once("error", reject);
  });
  // TestPeer's constructor is private (its `open` has no localAddress); this is the same wrapping.
  const Peer = TestPeer as unknown as new (socket: WebSocket) => TestPeer;
  return new Peer(socket);
}

/**
 * How each socket ended, watched from the moment it was opened (so nothing is missed): "end" is the
 * gateway's FIN, "close" the socket fully closed (either is the gateway hanging up).
 */
const endings = new WeakMap<Socket, Promise<"end" | "close">>();

function rawSocket(url: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = tcpConnect({ host: "127.0.0.1", port: port(url) }, () => resolve(socket));
    endings.set(
      socket,
      new Promise((ended) => {
        socket.once("end", () => ended("end"));
        socket.once("close", () => ended("close"));
      }),
    );
    // Read what the gateway sends: a socket that leaves an answer unread (Node's own header timeout
    // answers 408 before hanging up) never sees the FIN behind it, and would look open for ever.
    socket.resume();
    opened.push(socket);
    socket.once("error", reject);
  });
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Whether the gateway hung up on `socket` within `ms`. A loop stalled past both the gateway's deadline
 * and `ms` runs both timers in one pass, before the close they cause is delivered: the outcome is read
 * again after a few loop turns, so a slow machine cannot pass for an open socket.
 */
async function closedWithin(socket: Socket, ms: number): Promise<boolean> {
  let seen = false;
  const ending = endings.get(socket);
  if (!ending) return socket.destroyed;
  void ending.then(() => {
    seen = true;
  });
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([ending, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
  for (let i = 0; i < 5 && !seen; i++) await turn();
  return seen;
}

/** What a socket the gateway failed to close does with a whole request: it gets an answer. */
async function probe(socket: Socket): Promise<string> {
  if (socket.destroyed) return "closed";
  const answer = new Promise<string>((resolve) => {
    socket.once("data", (chunk: Buffer) =>
      resolve(`answered: ${chunk.toString("latin1").split("\r\n", 1)[0]}`),
    );
    socket.once("close", () => resolve("closed on write"));
    socket.once("error", (error) => resolve(`write failed: ${error.message}`));
  });
  socket.write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  return Promise.race([
    answer,
    new Promise<string>((resolve) => setTimeout(() => resolve("no answer"), 2000)),
  ]);
}

const UPGRADE =
  "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/** Header of a masked text frame with an all-zero mask, so `payload` can be written as is (and shared). */
function frameHeader(length: number): Buffer {
  const header = Buffer.alloc(14);
  header[0] = 0x81;
  header[1] = 0x80 | 127;
  header.writeBigUInt64BE(BigInt(length), 2);
  return header; // the last 4 bytes are the zero mask key
}

async function operatorWorks(gateway: TestGateway): Promise<void> {
  const peer = await gateway.operator();
  expect((await peer.call("agents.list", {})).agents).toBeDefined();
  peer.close();
}

describe("hostile peers", () => {
  it("closes a peer sending 64 KiB before connect with 1009, and keeps serving others", async () => {
    gw = await startTestGateway({}, { store: "memory" });
    const bystander = await gw.operator();
    const peer = await openFrom(gw.url);
    peer.sendRaw("x".repeat(64 * 1024));
    const closed = await peer.waitClosed();
    expect(closed.code).toBe(CloseCodes.messageTooBig);
    expect(closed.reason).toContain("limits.maxPreConnectBytes");
    // No answer was produced for the frame: the gateway stopped reading before it was complete.
    expect(peer.responses).toHaveLength(0);
    expect((await bystander.call("agents.list", {})).agents).toBeDefined();
    await operatorWorks(gw);
  });

  it("lifts the pre-connect cap once connect succeeds: a 64 KiB frame is then just a request", async () => {
    gw = await startTestGateway({}, { store: "memory" });
    const peer = await gw.operator();
    const response = await peer.request("sessions.history", { sessionKey: "x".repeat(64 * 1024) });
    expect(response.ok).toBe(false);
    expect(response.error?.code).toBe("INVALID_REQUEST");
    expect(peer.closed).toBeUndefined();
  });

  // Node's header timeout and the gateway's own deadline race to close these; when Node's won it
  // answered 408 first, and a test socket that did not read never saw the close (a CI flake until
  // `rawSocket` read). A socket still open is probed, so a failure names what the gateway did.
  it("closes raw TCP sockets that stay silent or dribble headers, after the handshake timeout", {
    timeout: 25_000,
  }, async () => {
    gw = await startTestGateway({}, { store: "memory", handshakeTimeoutMs: 300 });
    const silent = await rawSocket(gw.url);
    const dribbler = await rawSocket(gw.url);
    dribbler.write("GET / HTTP/1.1\r\nHost: x\r\n");
    const drip = setInterval(() => {
      if (!dribbler.destroyed) dribbler.write("X-Slow: 1\r\n");
    }, 50);
    try {
      const [silentClosed, dribblerClosed] = await Promise.all([
        // Generous bounds for a loaded CI machine: unfixed, such sockets were never closed.
        closedWithin(silent, 10_000),
        closedWithin(dribbler, 10_000),
      ]);
      // A socket still open is asked for /healthz: the failure then says whether the gateway still
      // serves it (it never hung up) or the hang-up was only not seen.
      expect(silentClosed ? "closed" : `silent socket open: ${await probe(silent)}`).toBe("closed");
      expect(dribblerClosed ? "closed" : `dribbling socket open: ${await probe(dribbler)}`).toBe("closed");
    } finally {
      clearInterval(drip);
    }
    await operatorWorks(gw);
  });

  it("refuses connections over the per-address and total caps with close code 4004", async () => {
    gw = await startTestGateway(
      { gateway: { limits: { maxConnections: 3, maxConnectionsPerAddress: 2 } } },
      { store: "memory" },
    );
    const first = await openFrom(gw.url, "127.0.0.1");
    await openFrom(gw.url, "127.0.0.1");
    const thirdLocal = await openFrom(gw.url, "127.0.0.1");
    const perAddress = await thirdLocal.waitClosed();
    expect(perAddress.code).toBe(CloseCodes.connectionLimit);
    expect(perAddress.reason).toContain("limits.maxConnectionsPerAddress");

    const other = await openFrom(gw.url, "127.0.0.2");
    const overTotal = await openFrom(gw.url, "127.0.0.3");
    const total = await overTotal.waitClosed();
    expect(total.code).toBe(CloseCodes.connectionLimit);
    expect(total.reason).toContain("limits.maxConnections ");
    expect(other.closed).toBeUndefined();

    // A freed slot is usable again, and a refused peer never held one.
    first.close();
    await first.waitClosed();
    const deadline = Date.now() + 5000;
    while (gw.gateway.connectionCount() > 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    const again = await openFrom(gw.url, "127.0.0.1");
    await again.handshake({ token: gw.token, role: "operator" });
    expect((await again.call("agents.list", {})).agents).toBeDefined();
  });

  it("drops raw sockets from one address past the per-address cap plus slack, before any HTTP", async () => {
    gw = await startTestGateway(
      { gateway: { limits: { maxConnectionsPerAddress: 1 } } },
      { store: "memory", handshakeTimeoutMs: 30_000 },
    );
    const held = await Promise.all(Array.from({ length: 1 + SOCKET_SLACK }, () => rawSocket(gw!.url)));
    const extra = await rawSocket(gw.url);
    // Only the backstop can close it this early: the handshake window is 30 s.
    expect(await closedWithin(extra, 5000)).toBe(true);
    expect(held.every((socket) => !socket.destroyed)).toBe(true);
    for (const socket of held) socket.destroy();
  });

  it("answers requests over limits.maxInFlight with a retryable RATE_LIMITED, and frees slots as answers go out", async () => {
    gw = await startTestGateway({ gateway: { limits: { maxInFlight: 3 } } }, { store: "memory" });
    const op = await gw.operator();
    // No worker serves the agent: the run stays queued and every agent.wait on it stays in flight.
    const { runId } = await op.call<{ runId: string }>("agent", {
      sessionKey: "agent:main:cron:held",
      message: "nobody picks this up",
    });
    const waits = [1, 2, 3].map(() => op.request("agent.wait", { runId, timeoutMs: 1500 }));
    const refused = await op.request("agents.list", {});
    expect(refused.ok).toBe(false);
    expect(refused.error?.code).toBe("RATE_LIMITED");
    expect(refused.error?.message).toContain("limits.maxInFlight = 3");
    expect((refused.error as { retryable?: boolean } | undefined)?.retryable).toBe(true);

    for (const wait of await Promise.all(waits)) expect(wait.ok).toBe(true);
    expect((await op.call("agents.list", {})).agents).toBeDefined();

    // A pipelined burst is answered in full: each request either ran or was refused, none dropped.
    const burst = Array.from({ length: 200 }, () =>
      op.request("sessions.history", { sessionKey: "agent:main:cron:held", limit: 5 }),
    );
    const answers = await Promise.all(burst);
    for (const answer of answers) {
      if (!answer.ok) expect(answer.error?.code).toBe("RATE_LIMITED");
    }
    expect(answers.some((answer) => answer.ok)).toBe(true);
    expect(op.closed).toBeUndefined();
  });

  it("does not buffer 200 pre-connect frames of 1 MiB (memory stays far below what they would take)", async () => {
    gw = await startTestGateway({}, { store: "memory" });
    const MiB = 1024 * 1024;
    const payload = Buffer.alloc(MiB, 0x61);
    const header = frameHeader(MiB);
    const rssBefore = process.memoryUsage.rss();
    let peak = rssBefore;
    const sample = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage.rss());
    }, 5);
    try {
      const sockets = await Promise.all(Array.from({ length: 200 }, () => rawSocket(gw!.url)));
      const closeCodes = sockets.map(
        (socket) =>
          new Promise<number | undefined>((resolve) => {
            let received = Buffer.alloc(0);
            socket.on("data", (chunk: Buffer) => {
              received = Buffer.concat([received, chunk]);
            });
            socket.on("error", () => {});
            socket.once("close", () => {
              const body = received.subarray(received.indexOf("\r\n\r\n") + 4);
              // A server close frame: 0x88, a length byte, then the 2-byte code.
              resolve(body[0] === 0x88 && body.length >= 4 ? body.readUInt16BE(2) : undefined);
            });
          }),
      );
      for (const socket of sockets) {
        socket.write(UPGRADE);
        socket.write(header);
        socket.write(payload);
      }
      const codes = await Promise.all(closeCodes);
      expect(codes.filter((code) => code === CloseCodes.messageTooBig)).toHaveLength(200);
    } finally {
      clearInterval(sample);
    }
    peak = Math.max(peak, process.memoryUsage.rss());
    // Buffering the frames would take 200 MiB; reading one socket chunk each is a few MiB.
    expect(peak - rssBefore).toBeLessThan(100 * MiB);
    await operatorWorks(gw);
  });
});
