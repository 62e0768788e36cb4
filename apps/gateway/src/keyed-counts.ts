/** Counts per key (sessions, addresses, tokens); a key whose count falls to zero holds no memory. */
export class KeyedCounts {
  private readonly counts = new Map<string, number>();

  get(key: string): number {
    return this.counts.get(key) ?? 0;
  }

  has(key: string): boolean {
    return this.counts.has(key);
  }

  /** Adds `delta` (negative to take off) and returns the key's new count. */
  add(key: string, delta: number): number {
    const next = (this.counts.get(key) ?? 0) + delta;
    if (next > 0) this.counts.set(key, next);
    else this.counts.delete(key);
    return next;
  }
}
