/**
 * Coalesces a run's text deltas: a model streaming one character per chunk would otherwise become
 * one `run.progress` call and one gateway event per character. Deltas are joined and sent every
 * `intervalMs`, or at once when `maxChars` are buffered. Order is kept because every send is
 * issued in call order on the one connection; callers flush before anything that must follow.
 */
export class DeltaBuffer {
  private text = "";
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly send: (text: string) => Promise<void>,
    private readonly intervalMs: number,
    private readonly maxChars: number,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Buffers a delta: resolves at once, or once sent when the buffer is full (backpressure). */
  add(text: string): Promise<void> {
    if (this.intervalMs === 0) return this.send(text);
    this.text += text;
    if (this.text.length >= this.maxChars) return this.flush();
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      this.flush().catch(this.onError);
    }, this.intervalMs);
    return Promise.resolve();
  }

  /** Sends what is buffered now (issued before whatever the caller sends next). */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.text === "") return Promise.resolve();
    const text = this.text;
    this.text = "";
    return this.send(text);
  }

  /** Drops what is buffered (the run is no longer ours to report on). */
  discard(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.text = "";
  }
}
