/**
 * UTF-8 bytes of text one `run.progress` carries at most. The gateway takes up to 512 KiB; a quarter of
 * that keeps the frame under the default 1 MiB `maxPayload` even when JSON escapes every character of
 * control text six-fold.
 */
export const MAX_DELTA_BYTES = 128 * 1024;

/** `text` in pieces of at most `maxBytes` UTF-8 bytes each, never splitting a surrogate pair. */
export function splitUtf8(text: string, maxBytes = MAX_DELTA_BYTES): string[] {
  // A UTF-16 unit is at most 3 UTF-8 bytes (a pair, 2 units, is 4): short text needs no count.
  if (text.length * 3 <= maxBytes) return [text];
  const pieces: string[] = [];
  let start = 0;
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const pair = code >= 0xd800 && code <= 0xdbff && i + 1 < text.length;
    const size = pair ? 4 : code < 0x80 ? 1 : code < 0x800 ? 2 : 3;
    if (bytes + size > maxBytes) {
      pieces.push(text.slice(start, i));
      start = i;
      bytes = 0;
    }
    bytes += size;
    if (pair) i++;
  }
  pieces.push(text.slice(start));
  return pieces;
}

/**
 * Coalesces a run's text deltas: a model streaming one character per chunk would otherwise become
 * one `run.progress` call and one gateway event per character. Deltas are joined and sent every
 * `intervalMs`, or at once when `maxChars` are buffered. Order is kept because every send is
 * issued in call order on the one connection; callers flush before anything that must follow.
 */
export class DeltaBuffer {
  private text = "";
  private timer: ReturnType<typeof setTimeout> | undefined;

  private readonly send: (text: string) => Promise<void>;

  constructor(
    send: (text: string) => Promise<void>,
    private readonly intervalMs: number,
    private readonly maxChars: number,
    private readonly onError: (error: unknown) => void,
  ) {
    // A delta the gateway would refuse whole (one long non-streamed reply, or multibyte text past
    // `maxChars`) goes in pieces, issued in order on the one connection.
    this.send = (text) => {
      const pieces = splitUtf8(text);
      if (pieces.length === 1) return send(text);
      return Promise.all(pieces.map((piece) => send(piece))).then(() => undefined);
    };
  }

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
