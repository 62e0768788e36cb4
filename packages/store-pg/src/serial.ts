/**
 * Writes from one store instance to one row are applied in call order, as in the embedded stores:
 * callers may start a write before the previous one resolved (the event bus reserves seq blocks
 * that way; the audit service hands records over in chain order). A pool of connections would
 * otherwise let a later write overtake an earlier one.
 */
export class KeyedSerializer {
  private readonly tails = new Map<string, Promise<unknown>>();

  /** Settles once every call made so far has settled (for a close that finishes what was started). */
  async idle(): Promise<void> {
    while (this.tails.size > 0) await Promise.all([...this.tails.values()]);
  }

  /** Runs `body` once every earlier call for `key` has settled; failures do not block later calls. */
  run<T>(key: string, body: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key);
    const result = previous === undefined ? body() : previous.then(body);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }
}
