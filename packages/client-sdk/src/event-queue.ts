import { SwitchboardError } from "@switchboard/core";

/**
 * A push-to-pull bridge: the client pushes events as they arrive, a `for await` loop pulls them.
 * The buffer is bounded so a consumer that stopped reading cannot grow memory without limit; it
 * overflows into an error the consumer sees instead of silently losing events.
 */
export class EventQueue<T> implements AsyncIterableIterator<T> {
  private readonly buffer: T[] = [];
  private readonly waiting: Array<{
    resolve: (result: IteratorResult<T>) => void;
    reject: (error: unknown) => void;
  }> = [];
  private finished = false;
  private failure: unknown;

  constructor(
    private readonly highWaterMark: number,
    private readonly onDetach: () => void,
  ) {}

  push(item: T): void {
    if (this.finished) return;
    const waiter = this.waiting.shift();
    if (waiter) {
      waiter.resolve({ value: item, done: false });
      return;
    }
    if (this.buffer.length >= this.highWaterMark) {
      this.end(
        new SwitchboardError(
          "UNAVAILABLE",
          `event consumer fell more than ${this.highWaterMark} events behind; the iterator was ended`,
          { retryable: true, details: { highWaterMark: this.highWaterMark } },
        ),
      );
      return;
    }
    this.buffer.push(item);
  }

  /** Ends the stream after the buffered items; with an error, the consumer gets it once they are read. */
  end(error?: unknown): void {
    if (this.finished) return;
    this.finished = true;
    this.onDetach();
    const waiters = this.waiting.splice(0);
    // Waiters exist only while the buffer is empty, so the error reaches the consumer right away.
    if (error !== undefined && waiters.length === 0) this.failure = error;
    for (const waiter of waiters) {
      if (error === undefined) waiter.resolve({ value: undefined, done: true });
      else waiter.reject(error);
    }
  }

  next(): Promise<IteratorResult<T>> {
    if (this.buffer.length > 0) return Promise.resolve({ value: this.buffer.shift() as T, done: false });
    if (this.finished) {
      if (this.failure !== undefined) {
        const failure = this.failure;
        this.failure = undefined;
        return Promise.reject(failure);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  /** Called by `break` in a `for await` loop: stop listening and drop what was buffered. */
  return(): Promise<IteratorResult<T>> {
    this.buffer.length = 0;
    this.end();
    this.failure = undefined;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}
