import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { startTestGateway, type TestGateway, testStoreKind } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

const STORE = testStoreKind();

let gw: TestGateway;
afterEach(async () => {
  await gw?.close();
});

/** The answer after the first `before` ones (undefined if none came within `ms`). */
async function responseAfter(peer: TestPeer, before: number, ms = 2000) {
  const deadline = Date.now() + ms;
  while (peer.responses.length === before && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 5));
  return peer.responses[before];
}

async function healthy(url: string, token: string): Promise<void> {
  const peer = await TestPeer.connect(url, { token, role: "operator" });
  const result = await peer.call("agents.list", {});
  expect(result.agents).toBeDefined();
  peer.close();
}

describe("protocol hardening", () => {
  it("answers malformed frames with errors naming the problem, without closing or disturbing others", async () => {
    gw = await startTestGateway({}, { store: STORE });
    const bystander = await gw.operator();
    const peer = await gw.operator();
    const cases: Array<[string | Buffer, string, string?]> = [
      ["{not json", "INVALID_REQUEST", "not valid JSON"],
      ["[]", "INVALID_REQUEST"],
      ['"just a string"', "INVALID_REQUEST"],
      ['{"type":"req","id":"a1"}', "INVALID_REQUEST", "method"],
      ['{"type":"req","id":"a2","method":"no.such.method"}', "INVALID_REQUEST", "unknown method"],
      [
        '{"type":"req","id":"a3","method":"sessions.history","params":{"sessionKey":42}}',
        "INVALID_REQUEST",
        "sessionKey",
      ],
      ['{"type":"req","id":"a4","method":"sessions.history","params":[1,2]}', "INVALID_REQUEST", "params"],
      [
        '{"type":"req","id":"a5","method":"chat.send","params":{"sessionKey":"main","message":""}}',
        "INVALID_REQUEST",
        "message",
      ],
      [
        '{"type":"req","id":"a6","method":"sessions.history","params":{"sessionKey":"../../etc/passwd"}}',
        "INVALID_REQUEST",
        "sessionKey",
      ],
      [
        '{"type":"req","id":"a7","method":"sessions.history","params":{"sessionKey":"agent:main:.."}}',
        "INVALID_REQUEST",
        "sessionKey",
      ],
      ['{"type":"req","id":"a8","method":"connect","params":{}}', "CONFLICT"],
      [
        `{"type":"req","id":"a9","method":"agents.list","params":${"[".repeat(5000)}${"]".repeat(5000)}}`,
        "INVALID_REQUEST",
      ],
      [Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), "INVALID_REQUEST"],
    ];
    for (const [frame, code, mention] of cases) {
      const before = peer.responses.length;
      peer.sendRaw(frame);
      const response = await responseAfter(peer, before);
      expect(response, `no answer to ${String(frame).slice(0, 60)}`).toBeDefined();
      expect(response!.ok).toBe(false);
      expect(response!.error!.code).toBe(code);
      if (mention) expect(response!.error!.message).toContain(mention);
    }
    expect(peer.closed).toBeUndefined();
    await healthy(gw.url, gw.token);
    expect((await bystander.call("agents.list", {})).agents).toBeDefined();
  });

  // protocol.md: params failing their schema are INVALID_REQUEST naming the field. Before session 22 an
  // unknown key was dropped: `sessions.patch` with `clearence` answered ok, audited an empty patch
  // and changed nothing; a `connect` with `concurency` connected at the default.
  it("refuses a param its method does not take, naming it, and changes nothing", async () => {
    gw = await startTestGateway({}, { store: STORE });
    const op = await TestPeer.connect(gw.url, { token: gw.token, role: "operator" });
    await op.call("sessions.create", { key: "agent:main:main", clearance: "CONFIDENTIAL" });
    const patched = await op.request("sessions.patch", {
      key: "agent:main:main",
      clearence: "PUBLIC",
    });
    expect(patched.error).toMatchObject({ code: "INVALID_REQUEST" });
    expect(patched.error?.message).toContain('"clearence"');
    expect(await op.call("sessions.status", { sessionKey: "agent:main:main" })).toMatchObject({
      clearance: "CONFIDENTIAL",
    });
    const audit = await op.call<{ entries: Array<{ kind: string }> }>("audit.tail", { limit: 20 });
    expect(audit.entries.some((entry) => entry.kind === "session.patched")).toBe(false);
    const typo = await TestPeer.open(gw.url);
    const connected = await typo.request("connect", {
      protocol: 1,
      client: { name: "test", version: "0" },
      auth: { token: gw.token },
      role: "operator",
      concurency: 5,
    });
    expect(connected.error).toMatchObject({ code: "INVALID_REQUEST" });
    expect(connected.error?.message).toContain('"concurency"');
    typo.close();
    op.close();
  });

  it("answers a request with 120 000 bad elements with a short error, before and after connect", async () => {
    gw = await startTestGateway({}, { store: STORE });
    const peer = await gw.operator();
    // ~500 KB of request: before, the answer listed every issue (~38 MB) and the default send
    // buffer limit dropped the caller instead of answering.
    const kinds = Array.from({ length: 120_000 }, (_, i) => i);
    const frame = JSON.stringify({ type: "req", id: "k1", method: "sessions.list", params: { kinds } });
    const before = peer.responses.length;
    peer.sendRaw(frame);
    const response = await responseAfter(peer, before, 5000);
    expect(response).toMatchObject({ ok: false, id: "k1", error: { code: "INVALID_REQUEST" } });
    expect(response!.error!.message).toMatch(/^params\.kinds\[0\]: .*; and 119992 more$/);
    expect(JSON.stringify(response).length).toBeLessThan(4096);
    expect(peer.closed).toBeUndefined();

    // Before `connect` (no token): one small error, not one as large as the request's issue list.
    const raw = await TestPeer.open(gw.url);
    const connect = {
      protocol: 1,
      client: { name: "x", version: "0" },
      agents: Array.from({ length: 256 }, (_, i) => i),
    };
    raw.sendRaw(JSON.stringify({ type: "req", id: "c1", method: "connect", params: connect }));
    expect(await responseAfter(raw, 0)).toMatchObject({ ok: false, error: { code: "INVALID_REQUEST" } });
    expect(JSON.stringify(raw.responses[0]).length).toBeLessThan(4096);
    raw.close();
  });

  it("refuses frames over maxPayload with PAYLOAD_TOO_LARGE", async () => {
    gw = await startTestGateway({ gateway: { limits: { maxPayload: 4096 } } }, { store: STORE });
    const peer = await gw.operator();
    const before = peer.responses.length;
    peer.sendRaw(
      JSON.stringify({
        type: "req",
        id: "big",
        method: "chat.send",
        params: { sessionKey: "main", message: "x".repeat(10_000) },
      }),
    );
    expect(await responseAfter(peer, before)).toMatchObject({
      ok: false,
      id: null,
      error: { code: "PAYLOAD_TOO_LARGE" },
    });
    expect(peer.responses[before]!.error!.message).toContain("maxPayload");
    expect((await peer.call("agents.list", {})).agents).toBeDefined();
  });

  it("disconnects a reader whose unsent buffer exceeds maxBufferedBytes, leaving others alone", async () => {
    gw = await startTestGateway({ gateway: { limits: { maxBufferedBytes: 65_536 } } }, { store: STORE });
    const op = await gw.operator();
    for (let i = 0; i < 20; i++) {
      const { runId } = await op.call<{ runId: string }>("agent", {
        sessionKey: "agent:main:cron:big",
        message: "y".repeat(50_000),
        timeoutSeconds: 0.01,
      });
      await op.call("agent.wait", { runId, timeoutMs: 1000 });
    }
    const slow = await gw.operator();
    const raw = (slow.socket as unknown as { _socket: import("node:net").Socket })._socket;
    raw.pause();
    // Each answer is ~64 KiB; the reader never reads, so the gateway's send buffer must hit its limit.
    for (let i = 0; i < 400; i++) {
      slow.socket.send(
        JSON.stringify({
          type: "req",
          id: `h${i}`,
          method: "sessions.history",
          params: { sessionKey: "agent:main:cron:big", limit: 500 },
        }),
      );
    }
    const deadline = Date.now() + 10_000;
    while (gw.gateway.connectionCount() > 1 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    expect(gw.gateway.connectionCount()).toBe(1);
    raw.resume();
    expect((await op.call("agents.list", {})).agents).toBeDefined();
  });

  it("drops a peer that stops answering pings", async () => {
    gw = await startTestGateway({ gateway: { limits: { heartbeatMs: 100 } } }, { store: STORE });
    const socket = new WebSocket(gw.url, { autoPong: false });
    await new Promise((resolve) => socket.once("open", resolve));
    socket.send(
      JSON.stringify({
        type: "req",
        id: "c",
        method: "connect",
        params: {
          protocol: 1,
          client: { name: "t", version: "1" },
          auth: { token: gw.token },
          role: "operator",
        },
      }),
    );
    const closed = await new Promise<number>((resolve) => socket.once("close", (code) => resolve(code)));
    expect(closed).toBe(1006);
    await healthy(gw.url, gw.token);
  });

  it("survives 10 000 generated hostile frames; every one is answered or its connection closed", async () => {
    gw = await startTestGateway({}, { store: STORE });
    const bystander = await gw.operator();
    const methods = [
      "connect",
      "sessions.list",
      "sessions.history",
      "chat.send",
      "tools.invoke",
      "agent.wait",
      "run.complete",
      "nope",
      "",
    ];
    const frame = fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.json({ maxDepth: 4 }),
      fc
        .record({
          type: fc.constantFrom("req", "res", "event", 7, null),
          id: fc.oneof(fc.string({ maxLength: 20 }), fc.integer(), fc.constant(null)),
          method: fc.oneof(fc.constantFrom(...methods), fc.string({ maxLength: 30 })),
          params: fc.oneof(
            fc.jsonValue({ maxDepth: 3 }),
            fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 })),
          ),
        })
        .map((value) => JSON.stringify(value)),
      fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)),
    );
    const frames = fc.sample(frame, { numRuns: 10_000, seed: 42 });
    const heapBefore = process.memoryUsage().heapUsed;
    let peer = await gw.operator();
    let answered = 0;
    let closedConnections = 0;
    for (let i = 0; i < frames.length; i += 100) {
      const batch = frames.slice(i, i + 100);
      const before = peer.responses.length;
      for (const item of batch) peer.sendRaw(item as string | Buffer);
      const deadline = Date.now() + 5000;
      while (peer.responses.length - before < batch.length && !peer.closed && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 2));
      }
      answered += peer.responses.length - before;
      if (peer.closed) {
        closedConnections += 1;
        peer = await gw.operator();
      } else {
        expect(peer.responses.length - before).toBe(batch.length);
      }
    }
    expect(answered + closedConnections).toBeGreaterThan(9_000);
    expect((await bystander.call("agents.list", {})).agents).toBeDefined();
    await healthy(gw.url, gw.token);
    const heapAfter = process.memoryUsage().heapUsed;
    expect(heapAfter - heapBefore).toBeLessThan(200 * 1024 * 1024);
  }, 60_000);
});
