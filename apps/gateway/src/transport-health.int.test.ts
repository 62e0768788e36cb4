import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { type HealthReport, startTransport, type Transport } from "./transport";

let transport: Transport | undefined;
afterEach(async () => {
  transport?.closeAll(1001, "test over");
  await transport?.stopAccepting();
  transport = undefined;
});

async function serve(health: () => HealthReport): Promise<string> {
  transport = await startTransport({
    host: "127.0.0.1",
    port: 0,
    limits: {
      maxPayload: 1_048_576,
      maxBufferedBytes: 8_388_608,
      heartbeatMs: 15_000,
      handshakeTimeoutMs: 5000,
      maxPreConnectBytes: 16_384,
      maxConnectionsPerAddress: 16,
      maxInFlight: 16,
    },
    handlers: {
      authenticate: () => {
        throw new Error("not used");
      },
      connectResult: () => ({}),
      handle: async () => ({}),
      onReady: () => {},
      onClose: () => {},
      health,
    },
    log: pino({ level: "silent" }),
  });
  return `http://127.0.0.1:${transport.port}/healthz`;
}

describe("GET /healthz", () => {
  it("answers 200 with ok: true and the handler's fields when healthy", async () => {
    const url = await serve(() => ({ instanceId: "i-1", version: "1.2.3" }));
    const response = await fetch(url);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true, instanceId: "i-1", version: "1.2.3" });
  });

  it("answers 503 with ok: false and the reasons when the gateway is degraded", async () => {
    const url = await serve(() => ({ ok: false, degraded: ["store: ENOSPC on append"], version: "1.2.3" }));
    const response = await fetch(url);
    expect(response.status).toBe(503);
    expect(await response.json()).toEqual({
      ok: false,
      degraded: ["store: ENOSPC on append"],
      version: "1.2.3",
    });
  });

  it("answers 503 when the health check itself throws", async () => {
    const url = await serve(() => {
      throw new Error("boom");
    });
    const response = await fetch(url);
    expect(response.status).toBe(503);
    expect(await response.json()).toEqual({ ok: false, degraded: ["health check failed"] });
  });
});
