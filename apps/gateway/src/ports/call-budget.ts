/** Which of a session's budgets a call draws on (agent-to-agent.md, loops). */
export type BudgetKind = "send" | "spawn";

/**
 * How many sends and spawns each session started in the last minute. Only one process can know
 * this; a cluster backs it with a shared store behind the same interface.
 */
export interface CallBudget {
  /** Calls of `kind` by `sessionKey` in the window ending now. */
  used(sessionKey: string, kind: BudgetKind): number;
  /** Counts one call; the returned function gives that slot back (the call was refused). */
  record(sessionKey: string, kind: BudgetKind): () => void;
}

/** Windows kept before the first sweep of empty ones. */
const SWEEP_MIN = 1_024;

/**
 * In-process sliding window. Memory is bounded: a session holds at most one timestamp per allowed
 * call in the window (the policy refuses past the budget), and an empty window is dropped.
 */
export class MemoryCallBudget implements CallBudget {
  private readonly windows = new Map<string, number[]>();
  /** Past this many windows, a `record` drops every empty one (a session that called once and never again). */
  private sweepAt = SWEEP_MIN;
  private sweptAt = 0;

  constructor(
    private readonly windowMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  private live(id: string): number[] | undefined {
    const stamps = this.windows.get(id);
    if (!stamps) return undefined;
    const from = this.now() - this.windowMs;
    let drop = 0;
    while (drop < stamps.length && stamps[drop]! <= from) drop += 1;
    if (drop > 0) stamps.splice(0, drop);
    if (stamps.length === 0) {
      this.windows.delete(id);
      return undefined;
    }
    return stamps;
  }

  /** Windows held (tests: nothing is left behind). */
  get size(): number {
    return this.windows.size;
  }

  used(sessionKey: string, kind: BudgetKind): number {
    return this.live(`${kind}\u0000${sessionKey}`)?.length ?? 0;
  }

  record(sessionKey: string, kind: BudgetKind): () => void {
    // A sweep drops every window emptied by time: once a window's length has passed since the
    // last, or when the map doubled past what was live then (amortised O(1) a call either way).
    const now = this.now();
    if (this.windows.size >= this.sweepAt || now - this.sweptAt >= this.windowMs) {
      for (const key of [...this.windows.keys()]) this.live(key);
      this.sweepAt = Math.max(SWEEP_MIN, this.windows.size * 2);
      this.sweptAt = now;
    }
    const id = `${kind}\u0000${sessionKey}`;
    const stamps = this.live(id) ?? [];
    const stamp = this.now();
    stamps.push(stamp);
    this.windows.set(id, stamps);
    return () => {
      const current = this.windows.get(id);
      const at = current?.lastIndexOf(stamp) ?? -1;
      if (at < 0) return;
      current!.splice(at, 1);
      if (current!.length === 0) this.windows.delete(id);
    };
  }
}
