import { setMaxListeners } from "node:events";
import type { Role } from "@switchboard/core";
import { CloseCodes, SwitchboardError } from "@switchboard/core";
import type { Logger } from "pino";
import type { WebSocket } from "ws";

export interface ConnectionIdentity {
  role: Role;
  tokenName: string;
  /** Agent ids a worker serves (role agent). */
  agents: ReadonlySet<string>;
  /** Session-key patterns a client may act for (role client); `*` globs. */
  sessionPatterns: readonly string[];
  /** The one session an `mcp` token acts as (from its config entry, never from the peer). */
  boundSession?: string;
}

const TEXT_FRAME = { binary: false } as const;

/** What became of a frame handed to `Connection.sendText`. */
export type SendOutcome = "sent" | "too-large" | "closed";

/** The UTF-8 size of a frame, or a bound below `limit` when that is all the caller needs to know. */
function bytesWithin(text: string | Buffer, limit: number): number {
  if (typeof text !== "string") return text.length;
  // A UTF-16 unit is at most 3 bytes of UTF-8: counting is only needed near the limit.
  if (text.length * 3 <= limit) return text.length * 3;
  return Buffer.byteLength(text);
}

/** One WebSocket peer. Owns the outgoing-buffer guard so a slow reader never grows memory without bound. */
export class Connection {
  identity: ConnectionIdentity | undefined;
  state: "handshake" | "ready" | "closed" = "handshake";
  lastSeen = Date.now();
  /** Highest event seq delivered, so replay and live delivery never send the same event twice. */
  lastEventSeq = 0;
  subscribed = false;
  /** Requests handed to the gateway and not yet answered (bounded by `limits.maxInFlight`). */
  inFlight = 0;
  private corked = false;
  /**
   * The session keys whose events it subscribed to (`*`: all it may see). Kept in step with the
   * gateway's subscription index (`event-subscriptions.ts`), which changes it.
   */
  readonly subscriptionFilters = new Set<string>();
  private readonly closeCallbacks: Array<() => void> = [];
  /** Aborted when the connection closes (`closedSignal`); made on first use. */
  private closing: AbortController | undefined;

  onClosed(callback: () => void): void {
    if (this.state === "closed") callback();
    else this.closeCallbacks.push(callback);
  }

  /**
   * Aborts when the connection closes: a call waiting on the caller's behalf (a run's end, a send's
   * reply) passes it on, so nothing waits on for a caller that is gone. One per connection, not per
   * call: every wait that listens to it removes its listener when it ends.
   */
  get closedSignal(): AbortSignal {
    if (!this.closing) {
      this.closing = new AbortController();
      // Each call in flight listens while it waits: as many as the in-flight cap allows.
      setMaxListeners(0, this.closing.signal);
      if (this.state === "closed") this.closing.abort(new Error("connection closed"));
    }
    return this.closing.signal;
  }

  /**
   * A graceful stop: calls waiting on this peer's behalf (a run's end, a send's reply) stop waiting
   * and answer now, while the socket stays open to carry those answers.
   */
  stopWaiting(): void {
    const signal = this.closedSignal;
    if (!signal.aborted) this.closing!.abort(new Error("gateway shutting down"));
  }

  /** Called by the transport once the socket is gone. */
  markClosed(): void {
    this.state = "closed";
    this.closing?.abort(new Error("connection closed"));
    for (const callback of this.closeCallbacks.splice(0)) callback();
  }

  constructor(
    readonly id: string,
    private readonly socket: WebSocket,
    readonly log: Logger,
    /** Bytes that may wait unsent (`limits.maxBufferedBytes`); also the largest frame this peer can get. */
    readonly maxBufferedBytes: number,
  ) {}

  get isOpen(): boolean {
    return this.state !== "closed" && this.socket.readyState === this.socket.OPEN;
  }

  send(frame: unknown): boolean {
    if (!this.isOpen) return false;
    const text = JSON.stringify(frame);
    const outcome = this.sendText(text);
    const id =
      (frame as { type?: unknown; id?: unknown }).type === "res" ? (frame as { id: unknown }).id : undefined;
    if (outcome === "too-large" && typeof id === "string") {
      // An answer that can never be sent is answered with why, or its caller would wait forever.
      const error = new SwitchboardError(
        "PAYLOAD_TOO_LARGE",
        `the answer (${Buffer.byteLength(text)} bytes) is larger than this connection's send buffer (limits.maxBufferedBytes = ${this.maxBufferedBytes}); ask for less`,
        { details: { limit: this.maxBufferedBytes } },
      );
      this.sendText(JSON.stringify({ type: "res", id, ok: false, error: error.toWire() }));
    }
    return outcome === "sent";
  }

  /**
   * Sends an already serialised frame, as a text frame also when given its UTF-8 bytes (a frame
   * assembled from cached parts is copied once, not flattened and encoded).
   *
   * A frame larger than the whole send buffer is refused ("too-large") and the peer stays: it says
   * nothing about how fast the peer reads. A frame that does not fit beside what is still unsent
   * means the peer reads too slowly, and it is disconnected ("closed").
   *
   * `onWritten` is called once the frame has left this process's buffers for the socket (or with an
   * error once it never will); only for a frame that was "sent".
   */
  sendText(text: string | Buffer, onWritten?: (error?: Error) => void): SendOutcome {
    if (!this.isOpen) return "closed";
    const buffered = this.socket.bufferedAmount;
    const bytes = bytesWithin(text, this.maxBufferedBytes - buffered);
    if (bytes > this.maxBufferedBytes) {
      this.log.warn(
        { bytes, limit: this.maxBufferedBytes },
        "frame larger than the whole send buffer (limits.maxBufferedBytes) not sent",
      );
      return "too-large";
    }
    if (buffered + bytes > this.maxBufferedBytes) {
      this.log.warn({ buffered }, "peer too slow: unsent buffer above limit, disconnecting");
      this.close(CloseCodes.tryAgainLater, "send buffer limit exceeded");
      return "closed";
    }
    // Frames sent in the same tick leave in one write: cork the TCP socket until the next tick.
    const tcp = (this.socket as unknown as { _socket?: { cork(): void; uncork(): void } })._socket;
    if (tcp && !this.corked) {
      this.corked = true;
      tcp.cork();
      process.nextTick(() => {
        this.corked = false;
        tcp.uncork();
      });
    }
    if (typeof text === "string") this.socket.send(text, onWritten);
    else this.socket.send(text, TEXT_FRAME, onWritten);
    return "sent";
  }

  close(code: number, reason: string): void {
    if (this.state === "closed") return;
    this.state = "closed";
    try {
      this.socket.close(code, reason);
    } catch {
      this.socket.terminate();
    }
    // A peer that never reads would keep the close handshake pending forever.
    setTimeout(() => this.socket.terminate(), 1000).unref();
  }

  /**
   * Closes with `code` and stops reading: a hostile peer keeps streaming while the close handshake is
   * pending, and whatever is read would be buffered. ws's own `pause` is used because it also keeps its
   * receiver from resuming the socket when it drains.
   */
  refuse(code: number, reason: string): void {
    this.close(code, reason);
    this.socket.pause();
  }

  terminate(): void {
    this.state = "closed";
    this.socket.terminate();
  }
}
