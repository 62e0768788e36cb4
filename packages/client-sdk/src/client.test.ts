import { readFileSync } from "node:fs";
import { SwitchboardError } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { connect, createClient } from "./client";
import { SDK_VERSION } from "./client-options";
import { FAKE_TOKENS, FakeGateway } from "./testing/fake-gateway";
import { deferred, untilState, useFakeGateway } from "./testing/fixtures";

const fixture = useFakeGateway();

describe("handshake", () => {
  it("connects, exposes the handshake result and makes typed calls", async () => {
    const client = await fixture.connect("operator", { clientName: "billing-app", clientVersion: "2.3.4" });

    expect(client.state).toBe("open");
    expect(client.server).toEqual({
      name: "switchboard",
      version: "0.0.0-fake",
      instanceId: fixture.gateway.instanceId,
    });
    const [connection] = fixture.gateway.connections();
    expect(client.connection?.connectionId).toBe(connection?.id);
    expect(connection?.clientName).toBe("billing-app");
    expect(client.connection?.methods).toContain("sessions.list");

    fixture.gateway.handle("sessions.list", (params) => ({
      status: "ok",
      count: 1,
      hidden: 0,
      sessions: [
        {
          key: "agent:main:main",
          kind: "main",
          channel: "internal",
          updatedAt: params.limit ?? 50,
          sessionId: "8c0f6a8e-2f8e-4a36-9d7e-3b1f2d6c9a10",
          agentId: "main",
          taint: "PUBLIC",
          clearance: "PUBLIC",
          transcriptPath: "sessions/8c0f6a8e.jsonl",
        },
      ],
    }));
    const listed = await client.sessions.list({ limit: 7 });
    expect(listed.sessions[0]?.key).toBe("agent:main:main");
    expect(listed.sessions[0]?.updatedAt).toBe(7);
    expect(fixture.gateway.requestsFor("sessions.list")[0]?.params).toEqual({ limit: 7 });

    const viaCall = await client.call("agents.list");
    expect(viaCall).toEqual({ agents: [] });
  });

  it("rejects connect() with UNAUTHORIZED on a bad token and never retries it", async () => {
    const failure = await connect({ ...fixture.options("operator"), token: "wrong" }).catch(
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(SwitchboardError);
    expect(failure).toMatchObject({ code: "UNAUTHORIZED" });

    // Even a client that keeps retrying unreachable gateways stops on a refused token.
    const client = fixture.track(createClient({ ...fixture.options("operator"), token: "wrong" }));
    await expect(client.ready()).rejects.toMatchObject({ code: "UNAUTHORIZED" });
    expect(client.state).toBe("closed");
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(fixture.gateway.handshakes).toBe(0);
    expect(client.state).toBe("closed");
  });

  it("rejects connect() with UNAVAILABLE when nothing listens", async () => {
    const gone = await FakeGateway.start();
    const url = gone.url;
    await gone.close();
    const failure = await connect({ url, token: FAKE_TOKENS.operator, role: "operator" }).catch(
      (error: unknown) => error,
    );
    expect(failure).toMatchObject({ code: "UNAVAILABLE", retryable: true });
    expect((failure as Error).message).toContain(url);
  });

  it("opens its sockets with an injected WebSocket implementation", async () => {
    const opened: string[] = [];
    class CountingWebSocket extends WebSocket {
      constructor(url: string) {
        super(url);
        opened.push(url);
      }
    }
    const client = fixture.track(
      await connect({ ...fixture.options("operator"), WebSocket: CountingWebSocket }),
    );
    fixture.gateway.dropConnections();
    await untilState(client, "reconnecting");
    await client.ready();
    expect(opened).toEqual([fixture.gateway.url, fixture.gateway.url]);
  });

  it("queues calls made before the handshake and sends them once connected", async () => {
    const client = fixture.client("operator");
    expect(client.state).toBe("connecting");
    const result = await client.agents.list();
    expect(result.agents).toEqual([]);
    expect(client.state).toBe("open");
  });

  it("refuses bad options with an error naming the option", () => {
    expect(() => createClient({ url: "http://localhost:1", token: "t", role: "operator" })).toThrow(
      /options\.url: must be a ws:\/\/ or wss:\/\/ URL/,
    );
    expect(() => createClient({ url: "ws://localhost:1", token: "t", role: "agent" })).toThrow(
      /options\.agents: is required for role agent/,
    );
    expect(() =>
      createClient({
        url: "ws://localhost:1",
        token: "t",
        role: "client",
        reconnect: { initialDelayMs: 500, maxDelayMs: 10 },
      }),
    ).toThrow(/options\.reconnect\.maxDelayMs: maxDelayMs must be at least initialDelayMs/);
  });

  it("keeps SDK_VERSION in step with package.json", () => {
    const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    expect(SDK_VERSION).toBe(manifest.version);
  });
});

describe("calls", () => {
  it("validates params locally, names the field and sends nothing", async () => {
    const client = await fixture.connect("operator");
    const failure = await client.chat
      .send({ sessionKey: "agent:main:main", message: "" })
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(SwitchboardError);
    expect(failure).toMatchObject({ code: "INVALID_REQUEST" });
    expect((failure as Error).message).toMatch(/chat\.send.*message: must not be empty/);

    await expect(
      // @ts-expect-error: limit must be a number (the types come from the protocol schema)
      client.sessions.history({ sessionKey: "main", limit: "50" }),
    ).rejects.toThrow(/sessions\.history.*limit/);
    await expect(client.sessions.resolve({})).rejects.toThrow(/exactly one of key, sessionId, label/);
    // @ts-expect-error: chat.send has required params
    await expect(client.chat.send()).rejects.toThrow(/chat\.send.*sessionKey/);

    await client.agents.list();
    expect(fixture.gateway.requests.map((request) => request.method)).toEqual(["agents.list"]);
  });

  it("refuses methods the role may not call before sending them", async () => {
    const client = await fixture.connect("client", { sessionKey: "agent:alpha:main" });
    await expect(client.sessions.list()).rejects.toMatchObject({ code: "FORBIDDEN" });
    await expect(client.sessions.list()).rejects.toThrow(/sessions\.list is not available to role client/);
    expect(fixture.gateway.requests).toEqual([]);
  });

  it("rejects with TIMEOUT when no response comes in time, and ignores the late response", async () => {
    const client = await fixture.connect("operator");
    const release = deferred();
    fixture.gateway.handle("audit.verify", async () => {
      await release.promise;
      return { ok: true, entries: 1 };
    });
    const failure = await client.audit.verify({}, { timeoutMs: 30 }).catch((error: unknown) => error);
    expect(failure).toMatchObject({ code: "TIMEOUT", retryable: true });
    expect((failure as Error).message).toContain("audit.verify");

    release.resolve();
    // The late answer arrives first and finds no pending call; the connection keeps working.
    await expect(client.audit.verify()).resolves.toEqual({ ok: true, entries: 1 });
  });

  it("rejects an aborted call with the abort reason and forgets it", async () => {
    const client = await fixture.connect("operator");
    fixture.gateway.handle("audit.tail", () => new Promise(() => {}));

    const controller = new AbortController();
    const call = client.audit.tail({ limit: 5 }, { signal: controller.signal });
    await fixture.gateway.waitForRequest("audit.tail");
    controller.abort();
    await expect(call).rejects.toMatchObject({ name: "AbortError" });

    const withReason = new AbortController();
    const second = client.audit.tail({}, { signal: withReason.signal });
    await fixture.gateway.waitForRequest("audit.tail", 2);
    const reason = new Error("user navigated away");
    withReason.abort(reason);
    await expect(second).rejects.toBe(reason);

    // An already aborted signal: rejected without sending anything.
    await expect(client.audit.tail({}, { signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: "AbortError",
    });
    expect(fixture.gateway.requestsFor("audit.tail")).toHaveLength(2);
  });

  it("maps error responses to SwitchboardError with code, message, details and retryable", async () => {
    const client = await fixture.connect("operator");
    fixture.gateway.handle("sessions.delete", (params) => {
      throw new SwitchboardError("NOT_FOUND", `no session ${params.key}`, {
        details: { key: params.key },
        retryable: false,
      });
    });
    const failure = await client.sessions.delete({ key: "agent:main:gone" }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(SwitchboardError);
    expect(failure).toMatchObject({
      code: "NOT_FOUND",
      message: "no session agent:main:gone",
      details: { key: "agent:main:gone" },
      retryable: false,
    });
  });

  it("rejects a result that does not match the method's schema", async () => {
    const client = await fixture.connect("operator");
    fixture.gateway.handle("audit.verify", () => ({ ok: "yes", entries: 1 }) as never);
    await expect(client.audit.verify()).rejects.toMatchObject({ code: "INTERNAL" });
    await expect(client.audit.verify()).rejects.toThrow(/audit\.verify result.*ok/);
  });

  it("refuses a request larger than the gateway's frame limit without losing the connection", async () => {
    const small = await FakeGateway.start({ maxPayload: 2048 });
    try {
      const client = fixture.track(
        await connect({ url: small.url, token: FAKE_TOKENS.operator, role: "operator" }),
      );
      await expect(
        client.chat.send({ sessionKey: "agent:main:main", message: "x".repeat(5000) }),
      ).rejects.toMatchObject({
        code: "PAYLOAD_TOO_LARGE",
      });
      expect(small.requestsFor("chat.send")).toHaveLength(0);
      await expect(client.agents.list()).resolves.toEqual({ agents: [] });
      expect(client.state).toBe("open");
    } finally {
      await small.close();
    }
  });

  it("survives malformed frames from the gateway", async () => {
    const client = await fixture.connect("operator");
    fixture.gateway.sendRaw("this is not json");
    fixture.gateway.sendRaw(JSON.stringify({ type: "event", event: "run.ended" }));
    fixture.gateway.sendRaw(
      JSON.stringify({ type: "res", id: null, ok: false, error: { code: "INVALID_REQUEST", message: "?" } }),
    );
    await expect(client.agents.list()).resolves.toEqual({ agents: [] });
    expect(client.state).toBe("open");
  });
});

describe("closing", () => {
  it("rejects every pending call with a retryable UNAVAILABLE when the connection closes", async () => {
    const client = await fixture.connect("operator", { reconnect: { enabled: false } });
    fixture.gateway.handle("audit.verify", () => new Promise(() => {}));
    const calls = [client.audit.verify(), client.audit.verify()];
    await fixture.gateway.waitForRequest("audit.verify", 2);

    fixture.gateway.dropConnections();
    for (const call of calls) {
      const failure = await call.catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(SwitchboardError);
      expect(failure).toMatchObject({ code: "UNAVAILABLE", retryable: true });
    }
    expect(client.state).toBe("closed");
    await expect(client.agents.list()).rejects.toThrow(/the client is closed/);
  });

  it("close() rejects pending and queued calls, settles the state and stops for good", async () => {
    const client = await fixture.connect("operator");
    fixture.gateway.handle("audit.verify", () => new Promise(() => {}));
    const states: string[] = [];
    client.onStateChange((state) => states.push(state));
    const inFlight = expect(client.audit.verify()).rejects.toMatchObject({
      code: "UNAVAILABLE",
      retryable: true,
    });
    await fixture.gateway.waitForRequest("audit.verify");

    await client.close();
    await inFlight;
    expect(client.state).toBe("closed");
    expect(states).toEqual(["closed"]);
    await untilState(client, "closed");
    await expect(client.ready()).rejects.toMatchObject({ code: "UNAVAILABLE" });
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(fixture.gateway.handshakes).toBe(1);

    // A call still waiting for the first handshake is rejected the same way and never sent.
    const early = fixture.client("operator");
    const queued = expect(early.agents.list()).rejects.toMatchObject({
      code: "UNAVAILABLE",
      retryable: true,
    });
    await early.close();
    await queued;
    expect(fixture.gateway.requestsFor("agents.list")).toHaveLength(0);
  });
});
