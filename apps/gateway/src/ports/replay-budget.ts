import { KeyedCounts } from "../keyed-counts";

/**
 * Bytes of `events.subscribe` replay this process has queued on its sockets and not yet written.
 * A replay is up to half a connection's send buffer, and a peer that stops reading keeps it in
 * memory: without a budget across connections, one token holder opening many connections and
 * asking each for the whole window held gigabytes. Memory is this process's, so a cluster keeps one
 * budget per instance (nothing to share).
 */
export interface ReplayBudget {
  /**
   * Takes `bytes` for a replay to a connection of `token`: the returned function gives them back
   * (idempotent), once the replay is written or its connection is gone. Undefined: it does not fit.
   */
  take(token: string, bytes: number): (() => void) | undefined;
  /** Bytes taken and not given back, all tokens together. */
  readonly queued: number;
}

/**
 * Gateway-wide limit, and a quarter of it per token, so one token holder cannot keep every other
 * client's reconnect from replaying. A replay is admitted whatever its size when nothing of the
 * same scope is queued: a window larger than the budget (a raised `maxBufferedBytes`) is then sent
 * one replay at a time instead of never.
 */
export class InProcessReplayBudget implements ReplayBudget {
  private total = 0;
  private readonly byToken = new KeyedCounts();
  readonly perToken: number;

  constructor(readonly limit: number) {
    this.perToken = Math.floor(limit / 4);
  }

  get queued(): number {
    return this.total;
  }

  /** Bytes a token has queued (tests: nothing is left behind). */
  queuedBy(token: string): number {
    return this.byToken.get(token);
  }

  take(token: string, bytes: number): (() => void) | undefined {
    const mine = this.byToken.get(token);
    if (mine > 0 && mine + bytes > this.perToken) return undefined;
    if (this.total > 0 && this.total + bytes > this.limit) return undefined;
    this.total += bytes;
    this.byToken.add(token, bytes);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.total -= bytes;
      this.byToken.add(token, -bytes);
    };
  }
}
