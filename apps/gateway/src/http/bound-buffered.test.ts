import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { boundBuffered } from "./bound-buffered";

const servers: Array<{ close: () => void }> = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

/** A server writing `chunks` of 64 KiB at once to a client that sends its request and never reads. */
async function unreadResponse(limit: number, chunks: number) {
  let exceeded = 0;
  let response!: ServerResponse;
  const server = createServer((_req, res) => {
    response = res;
    boundBuffered(res, limit, () => exceeded++);
    res.writeHead(200, { "content-type": "text/event-stream" });
    const chunk = "x".repeat(65_536);
    for (let i = 0; i < chunks && !res.destroyed; i++) res.write(chunk);
  });
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  servers.push({ close: () => server.close() });
  const socket = connect((server.address() as AddressInfo).port, "127.0.0.1");
  socket.pause();
  socket.write("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  for (let i = 0; i < 100 && !response; i++) await new Promise((done) => setTimeout(done, 10));
  servers.push({ close: () => socket.destroy() });
  return { response, exceeded: () => exceeded };
}

describe("boundBuffered", () => {
  it("destroys a response whose unsent bytes pass the limit, once", async () => {
    // 32 MiB: far more than the kernel's socket buffers take in for a reader that never reads.
    const { response, exceeded } = await unreadResponse(1_048_576, 512);
    expect(response.destroyed).toBe(true);
    expect(exceeded()).toBe(1);
  });

  it("leaves a response within the limit alone", async () => {
    const { response, exceeded } = await unreadResponse(64 * 1_048_576, 16);
    expect(response.destroyed).toBe(false);
    expect(exceeded()).toBe(0);
  });
});
