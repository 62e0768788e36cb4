import type { Store, StoreHealth } from "@switchboard/core";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { StoreHealthMonitor } from "./store-health-monitor";
import { deferred } from "./testing/deferred";

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** A store whose health checks answer when the test says so. */
function storeAnswering(next: () => Promise<StoreHealth>): Store {
  return { health: next } as unknown as Store;
}

describe("StoreHealthMonitor", () => {
  // Before session 23 a health check that never answered (every pooled connection waiting on a
  // table lock) left the last answer standing: /healthz said ok while every send hung.
  it("reports a health check that has not answered within stallMs, and recovers when it does", async () => {
    const answer = deferred<StoreHealth>();
    const monitor = new StoreHealthMonitor(
      storeAnswering(() => answer.promise),
      pino({ level: "silent" }),
      1000,
      50,
    );
    const polled = monitor.poll();
    expect(monitor.report()).toEqual({ ok: true });
    await sleep(80);
    const stalled = monitor.report();
    expect(stalled.ok).toBe(false);
    expect(stalled.degraded?.[0]).toMatch(
      /^health: the store has not answered a health check for \d+ ms \(since /,
    );
    answer.resolve({ ok: true });
    await polled;
    expect(monitor.report()).toEqual({ ok: true });
  });

  it("puts the store's failing parts first, then those of the other parts given", async () => {
    const monitor = new StoreHealthMonitor(
      storeAnswering(async () => ({
        ok: false,
        degraded: { database: { cause: "connection refused", since: "2026-11-25T00:00:00.000Z" } },
      })),
      pino({ level: "silent" }),
    );
    await monitor.poll();
    const cluster: StoreHealth = {
      ok: false,
      degraded: { lease: { cause: "lease not renewed", since: "2026-11-25T00:00:01.000Z" } },
    };
    expect(monitor.report(cluster)).toEqual({
      ok: false,
      degraded: [
        "database: connection refused (since 2026-11-25T00:00:00.000Z)",
        "lease: lease not renewed (since 2026-11-25T00:00:01.000Z)",
      ],
    });
    expect(monitor.report({ ok: true }).ok).toBe(false);
  });
});
