import { afterEach, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { startTestGateway, type TestGateway } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

// A web page of any site can open a WebSocket to 127.0.0.1: before session 21 the gateway took the
// upgrade whatever its Origin, so a page looping on it held the connection slots every local peer
// shares (one per-address cap) and locked local agents out. On loopback an upgrade whose Origin or
// Host is not a loopback name is now refused 403 before it takes a slot (the rule /mcp already had).

let gw: TestGateway;
afterEach(async () => {
  await gw?.close();
});

/** The HTTP status an upgrade got (101 when it was taken). */
function upgrade(url: string, options: WebSocket.ClientOptions): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, options);
    socket.once("open", () => {
      socket.close();
      resolve(101);
    });
    socket.once("unexpected-response", (_req, res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
      socket.terminate();
    });
    socket.once("error", reject);
  });
}

describe("WebSocket upgrades on loopback", () => {
  it("refuses a foreign Origin or Host with 403, and takes clients without Origin and same-site pages", async () => {
    gw = await startTestGateway({});
    const port = new URL(gw.url).port;
    expect(await upgrade(gw.url, { origin: "https://evil.example" })).toBe(403);
    expect(await upgrade(gw.url, { headers: { host: `rebound.evil.example:${port}` } })).toBe(403);
    expect(await upgrade(gw.url, { origin: "null" })).toBe(403);
    expect(await upgrade(gw.url, {})).toBe(101);
    expect(await upgrade(gw.url, { origin: `http://127.0.0.1:${port}` })).toBe(101);
    expect(await upgrade(gw.url, { origin: `http://localhost:${port}` })).toBe(101);
  });

  it("a page hammering the port from another site never takes the slots local peers share", async () => {
    gw = await startTestGateway({ gateway: { limits: { maxConnectionsPerAddress: 8 } } });
    const statuses = await Promise.all(
      Array.from({ length: 40 }, () => upgrade(gw.url, { origin: "https://evil.example" })),
    );
    expect(statuses.every((status) => status === 403)).toBe(true);
    // Eight local peers still get in and complete their handshake.
    const peers = await Promise.all(
      Array.from({ length: 8 }, () => TestPeer.connect(gw.url, { token: gw.token, role: "operator" })),
    );
    for (const peer of peers) {
      expect((await peer.call<{ agents: unknown[] }>("agents.list")).agents).toBeDefined();
      peer.close();
    }
  });
});
