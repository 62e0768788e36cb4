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
  /** When the poll in flight began (epoch ms): one that does not answer is a fault of its own. */
  private pollStartedAt: number | undefined;

  /**
   * `stallMs`: how long a health check may go unanswered before the store counts as degraded (a
   * pool whose connections all wait on a lock answers nothing, and refuses nothing either).
   */
  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    private readonly intervalMs = 1000,
    private readonly stallMs = 3000,
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
      this.pollStartedAt = Date.now();
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
        this.pollStartedAt = undefined;
      }
    })();
    return this.polling;
  }

  /** The store's health as last polled, or a stall when the poll in flight has not answered. */
  current(): StoreHealth {
    const started = this.pollStartedAt;
    if (started === undefined || Date.now() - started <= this.stallMs) return this.last;
    return {
      ok: false,
      degraded: {
        ...this.last.degraded,
        health: {
          cause: `the store has not answered a health check for ${Date.now() - started} ms`,
          since: new Date(started).toISOString(),
        },
      },
    };
  }

  /** For `/healthz`: `ok`, and each failing part with its cause (the store's, then `others`'). */
  report(...others: StoreHealth[]): { ok: boolean; degraded?: string[] } {
    const parts = [this.current(), ...others];
    if (parts.every((part) => part.ok)) return { ok: true };
    const degraded = parts.flatMap((part) =>
      Object.entries(part.degraded ?? {}).map(
        ([name, problem]) => `${name}: ${problem.cause} (since ${problem.since})`,
      ),
    );
    return { ok: false, degraded };
  }
}
