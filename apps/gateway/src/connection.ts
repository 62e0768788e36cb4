import { setMaxListeners } from "node:events";
import type { Role } from "@switchboard/core";
import { CloseCodes } from "@switchboard/core";
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
   * The connection's event subscriptions, by session key (`*`: all it may see): an event is sent
   * when any of them accepts it. Each `events.subscribe` adds one (or renews its own).
   */
  readonly subscriptionFilters = new Map<string, (event: import("./event-bus").BusEvent) => boolean>();
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
    private readonly maxBufferedBytes: number,
  ) {}

  get isOpen(): boolean {
    return this.state !== "closed" && this.socket.readyState === this.socket.OPEN;
  }

  send(frame: unknown): boolean {
    if (!this.isOpen) return false;
    return this.sendText(JSON.stringify(frame));
  }

  /**
   * Sends an already serialised frame, as a text frame also when given its UTF-8 bytes (a frame
   * assembled from cached parts is copied once, not flattened and encoded).
   */
  sendText(text: string | Buffer): boolean {
    if (!this.isOpen) return false;
    if (this.socket.bufferedAmount + text.length > this.maxBufferedBytes) {
      this.log.warn(
        { buffered: this.socket.bufferedAmount },
        "peer too slow: unsent buffer above limit, disconnecting",
      );
      this.close(CloseCodes.tryAgainLater, "send buffer limit exceeded");
      return false;
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
    if (typeof text === "string") this.socket.send(text);
    else this.socket.send(text, TEXT_FRAME);
    return true;
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
