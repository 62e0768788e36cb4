/**
 * Serialises read-modify-writes per session key. Only the process that holds the lock knows it is
 * held: several gateways on one store need a shared lock (or the store's compare-and-set) here.
 */
export interface SessionLocks {
  /** Runs `fn` after every earlier `fn` of the same key has settled. */
  run<T>(key: string, fn: () => Promise<T>): Promise<T>;
}

/** A promise chain per key; keys with nothing queued hold no memory. */
export class InProcessSessionLocks implements SessionLocks {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const next = previous.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return next;
  }
}
