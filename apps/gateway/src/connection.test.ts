import { CloseCodes } from "@switchboard/core";
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { WebSocket } from "ws";
import { Connection } from "./connection";

/** A socket that keeps what it is given unsent (`bufferedAmount`), as for a peer that does not read. */
function fakeSocket(buffered = 0) {
  const socket = {
    OPEN: 1,
    readyState: 1,
    bufferedAmount: buffered,
    sent: [] as Array<string | Buffer>,
    closed: undefined as { code: number; reason: string } | undefined,
    send(data: string | Buffer) {
      socket.sent.push(data);
      socket.bufferedAmount += Buffer.byteLength(data);
    },
    close(code: number, reason: string) {
      socket.closed = { code, reason };
      socket.readyState = 3;
    },
    terminate() {
      socket.readyState = 3;
    },
    pause() {},
  };
  return socket;
}

function connectionOn(socket: ReturnType<typeof fakeSocket>, maxBufferedBytes: number): Connection {
  return new Connection("c", socket as unknown as WebSocket, pino({ level: "silent" }), maxBufferedBytes);
}

describe("Connection send buffer", () => {
  it("refuses one frame larger than the whole buffer, and keeps the peer", () => {
    const socket = fakeSocket();
    const connection = connectionOn(socket, 1_000);
    expect(connection.sendText("x".repeat(1_001))).toBe("too-large");
    expect(socket.closed).toBeUndefined();
    expect(connection.isOpen).toBe(true);
    expect(connection.sendText("small")).toBe("sent");
    expect(socket.sent).toEqual(["small"]);
  });

  it("disconnects a peer whose unsent bytes and the next frame exceed the limit (a slow reader)", () => {
    const socket = fakeSocket(600);
    const connection = connectionOn(socket, 1_000);
    expect(connection.sendText("x".repeat(500))).toBe("closed");
    expect(socket.closed?.code).toBe(CloseCodes.tryAgainLater);
  });

  it("counts UTF-8 bytes, not characters", () => {
    // 300 characters but 900 bytes: beside 500 unsent bytes, over the 1 000-byte limit.
    const slow = fakeSocket(500);
    expect(connectionOn(slow, 1_000).sendText("€".repeat(300))).toBe("closed");
    // 400 characters, 1 200 bytes: alone bigger than the whole buffer.
    const empty = fakeSocket();
    expect(connectionOn(empty, 1_000).sendText("€".repeat(400))).toBe("too-large");
    expect(empty.sent).toEqual([]);
    expect(empty.closed).toBeUndefined();
  });

  it("answers a request whose answer can never be sent with PAYLOAD_TOO_LARGE naming the limit", () => {
    const socket = fakeSocket();
    const connection = connectionOn(socket, 1_000);
    expect(connection.send({ type: "res", id: "7", ok: true, result: { text: "y".repeat(2_000) } })).toBe(
      false,
    );
    expect(socket.closed).toBeUndefined();
    expect(socket.sent).toHaveLength(1);
    const answer = JSON.parse(String(socket.sent[0]));
    expect(answer).toMatchObject({ type: "res", id: "7", ok: false, error: { code: "PAYLOAD_TOO_LARGE" } });
    expect(answer.error.message).toContain("limits.maxBufferedBytes = 1000");
  });
});
