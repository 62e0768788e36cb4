import { SwitchboardError } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import type { ConnectionState } from "./client";
import { FakeGateway } from "./testing/fake-gateway";
import { deferred, untilState, useFakeGateway } from "./testing/fixtures";

const fixture = useFakeGateway();

describe("reconnect", () => {
  it("reconnects after a dropped connection, redoing the handshake", async () => {
    const client = await fixture.connect("operator");
    const states: ConnectionState[] = [];
    client.onStateChange((state) => states.push(state));
    const firstConnection = client.connection?.connectionId;

    fixture.gateway.dropConnections();
    await untilState(client, "reconnecting");
    await client.ready();

    expect(states).toEqual(["reconnecting", "open"]);
    expect(fixture.gateway.handshakes).toBe(2);
    expect(client.connection?.connectionId).not.toBe(firstConnection);
    await expect(client.agents.list()).resolves.toEqual({ agents: [] });
  });

  it("keeps retrying a gateway that is not up yet (createClient) and connects once it is", async () => {
    const late = await FakeGateway.start();
    const url = late.url;
    const port = Number(new URL(url).port);
    await late.close();

    const client = fixture.client("operator", { url });
    await untilState(client, "reconnecting");
    const pendingCall = client.agents.list();

    // Bring a gateway up on the port the client keeps trying.
    const revived = await FakeGateway.start({ port });
    try {
      await expect(pendingCall).resolves.toEqual({ agents: [] });
      expect(client.state).toBe("open");
    } finally {
      await client.close();
      await revived.close();
    }
  });

  it("re-sends an in-flight agent.wait after reconnecting, with only the remaining wait", async () => {
    const client = await fixture.connect("operator");
    const run = fixture.gateway.startRun("agent:alpha:main", "hello");

    const waiting = client.agent.wait({ runId: run.runId, timeoutMs: 20_000 });
    await fixture.gateway.waitForRequest("agent.wait");
    fixture.gateway.dropConnections();

    const resent = await fixture.gateway.waitForRequest("agent.wait", 2);
    expect(resent.params?.runId).toBe(run.runId);
    expect(resent.params?.timeoutMs).toEqual(expect.any(Number));
    expect(resent.params?.timeoutMs as number).toBeLessThanOrEqual(20_000);

    fixture.gateway.completeRun(run.runId, "hi there");
    await expect(waiting).resolves.toMatchObject({ runId: run.runId, status: "ok", reply: "hi there" });
  });

  it("rejects an in-flight call that changes state with a retryable UNAVAILABLE, then works again", async () => {
    const client = await fixture.connect("operator");
    const hold = deferred();
    fixture.gateway.handle("sessions.reset", async (params) => {
      await hold.promise;
      return { key: params.key, sessionId: "new" };
    });

    const reset = client.sessions.reset({ key: "agent:main:main" });
    await fixture.gateway.waitForRequest("sessions.reset");
    fixture.gateway.dropConnections();

    const failure = await reset.catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(SwitchboardError);
    expect(failure).toMatchObject({ code: "UNAVAILABLE", retryable: true });
    expect((failure as Error).message).toMatch(
      /sessions\.reset was in flight.*may or may not have taken effect/,
    );
    // It was not sent a second time behind the caller's back.
    hold.resolve();
    await client.ready();
    await client.agents.list();
    expect(fixture.gateway.requestsFor("sessions.reset")).toHaveLength(1);
    await expect(client.sessions.reset({ key: "agent:main:main" })).resolves.toEqual({
      key: "agent:main:main",
      sessionId: "new",
    });
  });

  it("lets a caller opt a read out of re-sending, or a write into it", async () => {
    const client = await fixture.connect("operator");
    fixture.gateway.handle("audit.verify", () => new Promise(() => {}));
    const read = client.audit.verify({}, { retryOnReconnect: false });
    const hold = deferred();
    fixture.gateway.handle("sessions.create", async (params) => {
      await hold.promise;
      return { key: params.key, sessionId: "s-1", created: true };
    });
    const idempotentWrite = client.sessions.create({ key: "agent:main:x" }, { retryOnReconnect: true });
    await fixture.gateway.waitForRequest("sessions.create");
    await fixture.gateway.waitForRequest("audit.verify");

    fixture.gateway.dropConnections();
    await expect(read).rejects.toMatchObject({ code: "UNAVAILABLE", retryable: true });
    await fixture.gateway.waitForRequest("sessions.create", 2);
    hold.resolve();
    await expect(idempotentWrite).resolves.toMatchObject({ key: "agent:main:x", created: true });
  });

  it("does not reconnect when the gateway closes with 4003 (credentials refused)", async () => {
    const client = await fixture.connect("operator");
    fixture.gateway.handle("audit.verify", () => new Promise(() => {}));
    const pending = client.audit.verify();
    await fixture.gateway.waitForRequest("audit.verify");

    fixture.gateway.dropConnections({ code: 4003, reason: "token revoked" });
    await expect(pending).rejects.toMatchObject({ code: "UNAUTHORIZED" });
    expect(client.state).toBe("closed");
    await expect(client.ready()).rejects.toThrow(/token revoked/);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(fixture.gateway.handshakes).toBe(1);
  });

  it("gives up after maxAttempts failed reconnects and rejects what was waiting", async () => {
    const client = await fixture.connect("operator", {
      reconnect: { initialDelayMs: 1, maxDelayMs: 5, maxAttempts: 2 },
    });
    await fixture.gateway.close();
    await untilState(client, "reconnecting");
    const queued = client.agents.list();

    await untilState(client, "closed");
    await expect(queued).rejects.toMatchObject({ code: "UNAVAILABLE", retryable: true });
    await expect(client.ready()).rejects.toThrow(/could not connect/);
  });

  it("drops a connection whose gateway went silent and reconnects", async () => {
    const quiet = await FakeGateway.start({ heartbeatMs: 40 });
    try {
      const client = fixture.track(
        fixture.client(
          "operator",
          { url: quiet.url, reconnect: { initialDelayMs: 1, maxDelayMs: 5 } },
          { failFast: true },
        ),
      );
      await client.ready();
      quiet.freeze();
      await untilState(client, "reconnecting");
      quiet.thaw();
      await client.ready();
      expect(quiet.handshakes).toBeGreaterThanOrEqual(2);
    } finally {
      await quiet.close();
    }
  });
});
