import type { Store, StoreHealth } from "@switchboard/core";
import type { Logger } from "pino";

/**
 * Polls the store's health so `/healthz` (synchronous) can answer from the last report, and so a
 * store that refuses writes after a storage fault probes again on its own: writes come back when
 * the cause clears, without a restart and without waiting for traffic.
 */
export class StoreHealthMonitor {
  private last: StoreHealth = { ok: true };
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | undefined;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    private readonly intervalMs = 1000,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.poll(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** One poll (also what the timer runs); concurrent calls share one. */
  poll(): Promise<void> {
    this.polling ??= (async () => {
      try {
        const next = await this.store.health();
        if (next.ok !== this.last.ok) {
          if (next.ok) this.log.info({}, "store accepts writes again");
          else this.log.error({ degraded: next.degraded }, "store refuses writes");
        }
        this.last = next;
      } catch (error) {
        this.last = {
          ok: false,
          degraded: { health: { cause: String(error), since: new Date().toISOString() } },
        };
      } finally {
        this.polling = undefined;
      }
    })();
    return this.polling;
  }

  /** For `/healthz`: `ok`, and each failing part with its cause. */
  report(): { ok: boolean; degraded?: string[] } {
    if (this.last.ok) return { ok: true };
    const degraded = Object.entries(this.last.degraded ?? {}).map(
      ([part, problem]) => `${part}: ${problem.cause} (since ${problem.since})`,
    );
    return { ok: false, degraded };
  }
}
