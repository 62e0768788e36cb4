import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

// A socket that has had one HTTP answer is past the handshake deadline, and a client asking again
// every few seconds keeps it alive for ever. Before session 21 a local process (or everyone behind
// one reverse proxy) holding 576 such sockets filled the per-address socket budget: every WebSocket
// client of that address was refused. Plain sockets kept alive per address are now capped (32).

let gw: TestGateway;
const sockets: Socket[] = [];
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await gw?.close();
});

/** A keep-alive socket that asked for /healthz once: its answer's Connection header, and whether it closed. */
function healthzOnce(port: number): Promise<{ connection: string; closed: Promise<boolean> }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    sockets.push(socket);
    let text = "";
    const closed = new Promise<boolean>((done) => {
      socket.once("close", () => done(true));
      setTimeout(() => done(false), 1_500);
    });
    socket.on("data", (chunk) => {
      text += chunk.toString();
      const header = /\r\nconnection: ([^\r]+)/i.exec(text);
      if (text.includes("\r\n\r\n") && header) resolve({ connection: header[1]!.toLowerCase(), closed });
    });
    socket.once("error", reject);
    socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n");
  });
}

describe("plain HTTP keep-alive sockets", () => {
  it("are capped per address, so they never take the room WebSocket clients need", async () => {
    gw = await startTestGateway({ gateway: { limits: { maxConnectionsPerAddress: 40 } } });
    const port = Number(new URL(gw.url).port);
    const answers = [];
    for (let i = 0; i < 60; i++) answers.push(await healthzOnce(port));
    const kept = answers.filter((answer) => answer.connection === "keep-alive");
    expect(kept).toHaveLength(32);
    const closing = answers.filter((answer) => answer.connection === "close");
    expect(closing).toHaveLength(28);
    expect(await Promise.all(closing.map((answer) => answer.closed))).toEqual(closing.map(() => true));
    // The held sockets leave room for WebSocket clients of the same address.
    const peers = await Promise.all(
      Array.from({ length: 8 }, () => TestPeer.connect(gw.url, { token: gw.token, role: "operator" })),
    );
    for (const peer of peers) peer.close();
  });
});

/** Writes `count` pipelined requests at once, reads until the socket closes or goes quiet. */
function pipelined(port: number, path: string, count: number): Promise<{ answers: number; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    sockets.push(socket);
    let text = "";
    let quiet: NodeJS.Timeout | undefined;
    const done = (closed: boolean) => {
      clearTimeout(quiet);
      resolve({ answers: text.split("HTTP/1.1 ").length - 1, closed });
    };
    socket.on("data", (chunk) => {
      text += chunk.toString();
      clearTimeout(quiet);
      quiet = setTimeout(() => done(false), 1_000);
    });
    socket.once("close", () => done(true));
    socket.once("error", (error: NodeJS.ErrnoException) =>
      error.code === "ECONNRESET" ? done(true) : reject(error),
    );
    socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`.repeat(count));
  });
}

// Before session 23 every pipelined request started its answer before any was written (Node parses
// a whole chunk first): 1 500 requests for the UI's bundle on one socket that never read held 587 MB,
// and four such sockets took the gateway past 11 GB.
describe("pipelined HTTP requests", () => {
  it("are answered up to 16 unanswered on a socket; past that the socket is closed", async () => {
    gw = await startTestGateway({});
    const port = Number(new URL(gw.url).port);
    expect(await pipelined(port, "/healthz", 16)).toEqual({ answers: 16, closed: false });
    const flood = await pipelined(port, "/healthz", 100);
    expect(flood.closed).toBe(true);
    expect(flood.answers).toBeLessThanOrEqual(16);
    // One socket asking one request after another is never cut.
    const socket = connect(port, "127.0.0.1");
    sockets.push(socket);
    let answered = 0;
    await new Promise<void>((resolve, reject) => {
      socket.on("data", (chunk) => {
        answered += chunk.toString().split("HTTP/1.1 200").length - 1;
        if (answered === 40) resolve();
        else socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
      });
      socket.once("close", () => reject(new Error(`closed after ${answered} answers`)));
      socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    });
  });
});
