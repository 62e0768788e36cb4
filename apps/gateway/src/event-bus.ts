import type { EventName, EventPayload, MetaStore } from "@switchboard/core";
import type { BusEvent, EventLog, EventScope, EventSubscriber } from "./ports/event-log";

export type { BusEvent, EventSubscriber } from "./ports/event-log";

/** Durable ceiling of handed-out seq numbers: a restart starts above it. */
export const SEQ_RESERVED_KEY = "events.seq.reserved";
/** The periodic high-water mark of older versions; read once so an upgrade never goes back. */
const LEGACY_SEQ_KEY = "events.seq";
/**
 * The last seq a gracefully stopped process handed out ("0" while a process runs): a client resuming
 * from it lost nothing, though the next process numbers far above it. Absent or "0" at open: the last
 * process was killed, and any cursor below this one's numbering may have missed events.
 */
export const SEQ_STOPPED_KEY = "events.seq.stopped";
/**
 * Numbers reserved per durable write. At several thousand events/s a block lasts minutes, and it is
 * extended when half used, so the write lands long before the block runs out.
 */
export const DEFAULT_SEQ_BLOCK = 1_000_000;
/** Events held while the reservation cannot be extended (storage failing) before the oldest are dropped. */
const MAX_PENDING = 65_536;
/** Events the replay window keeps at most (protocol.md: at least the last 10 000). */
export const DEFAULT_REPLAY_EVENTS = 16_384;
/** Bytes the replay window keeps at most (`gateway.limits.maxReplayBytes`). */
export const DEFAULT_REPLAY_BYTES = 64 * 1024 * 1024;
/** What a held direct frame is counted as (its bytes are the sender's; this is the closure). */
const DIRECT_BYTES = 64;

/** How many events, and how many of their bytes, the replay window keeps; the oldest leave first. */
export interface ReplayWindow {
  events?: number;
  bytes?: number;
}

/**
 * About the bytes an event holds: its strings' lengths plus a little per field. Cheaper than
 * serialising it (a payload is a flat object of strings and numbers, a frame-sized string is one
 * `length` read), and close to its JSON size, which is what the window's budget is stated in.
 */
export function eventBytes(event: Omit<BusEvent, "seq">): number {
  return (
    48 +
    event.event.length +
    (event.sessionKey?.length ?? 0) +
    (event.agentId?.length ?? 0) +
    (event.connectionId?.length ?? 0) +
    valueBytes(event.payload)
  );
}

function valueBytes(value: unknown): number {
  if (typeof value === "string") return value.length + 2;
  if (typeof value !== "object" || value === null) return 8;
  let bytes = 2;
  if (Array.isArray(value)) for (const item of value) bytes += valueBytes(item) + 1;
  else
    for (const [key, item] of Object.entries(value as Record<string, unknown>))
      bytes += key.length + 4 + valueBytes(item);
  return bytes;
}
const RETRY_DELAY_MS = 1_000;

export interface SeqReservation {
  /** The highest seq that may be handed out (durably recorded). */
  reservedUpTo: number;
  /** Size of each extension. */
  block: number;
  /** Records a new ceiling durably; resolves once it would survive kill -9. */
  persist(upTo: number): Promise<void>;
  onError?(error: unknown, pending: number): void;
}

type Pending =
  | { kind: "publish"; entry: Omit<BusEvent, "seq">; bytes: number }
  | { kind: "direct"; send: (seq: number) => void; bytes: number };

/**
 * Global event sequence with a bounded replay window. `seq` never goes back or repeats, whatever a
 * crash interrupts: numbers are handed out only below a durably reserved ceiling, and a restart
 * starts above it. Should the ceiling be reached before its extension is durable, events wait (in
 * order) rather than take unreserved numbers.
 *
 * The window is bounded by bytes as well as by count: events are as big as a peer makes them (a
 * text delta, a reply), and a count alone let one worker's frame-sized events hold gigabytes.
 */
export class EventBus implements EventLog {
  private readonly ring: (BusEvent | undefined)[];
  /** Each slot's `eventBytes`. */
  private readonly ringBytes: Uint32Array;
  private ringStart = 0;
  private ringSize = 0;
  private heldBytes = 0;
  private pendingBytes = 0;
  private readonly capacity: number;
  private readonly maxBytes: number;
  private seq: number;
  private readonly subscribers = new Set<EventSubscriber>();
  private readonly pending: Pending[] = [];
  private extending: Promise<void> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private dropped = 0;
  /** Events below it are gone: numbered by an earlier process, or pushed out of the ring. */
  private firstReplayable: number;

  constructor(
    window: ReplayWindow = {},
    initialSeq = 0,
    private readonly reservation?: SeqReservation,
    firstReplayable = initialSeq + 1,
  ) {
    this.capacity = window.events ?? DEFAULT_REPLAY_EVENTS;
    this.maxBytes = window.bytes ?? DEFAULT_REPLAY_BYTES;
    this.ring = new Array(this.capacity);
    this.ringBytes = new Uint32Array(this.capacity);
    this.seq = initialSeq;
    this.firstReplayable = firstReplayable;
  }

  /**
   * A bus whose numbering continues above everything a previous process (even one killed mid-write)
   * may have handed out; the first block is reserved before this resolves.
   */
  static async open(
    meta: MetaStore,
    options: {
      window?: ReplayWindow;
      block?: number;
      onError?: (error: unknown, pending: number) => void;
    } = {},
  ): Promise<EventBus> {
    const block = options.block ?? DEFAULT_SEQ_BLOCK;
    const read = async (key: string) => {
      const value = Number((await meta.get(key)) ?? 0);
      return Number.isSafeInteger(value) && value > 0 ? value : 0;
    };
    // The clock floor keeps a data dir whose meta was lost above the numbers clients saw before.
    const reserved = Math.max(await read(SEQ_RESERVED_KEY), await read(LEGACY_SEQ_KEY));
    const last = Math.max(reserved, Date.now());
    const stopped = await read(SEQ_STOPPED_KEY);
    const reservedUpTo = last + block;
    // The stop mark is cleared as the numbering moves on: if this process is killed, the next one
    // must not take the old mark for its own stop.
    await Promise.all([
      meta.set(SEQ_RESERVED_KEY, String(reservedUpTo)),
      ...(stopped > 0 ? [meta.set(SEQ_STOPPED_KEY, "0")] : []),
    ]);
    const bus = new EventBus(
      options.window,
      last,
      {
        reservedUpTo,
        block,
        persist: (upTo) => meta.set(SEQ_RESERVED_KEY, String(upTo)),
        ...(options.onError ? { onError: options.onError } : {}),
      },
      // Without a mark an earlier process may have numbered up to its ceiling (none on a fresh data
      // dir: numbers below the clock floor were never handed out).
      stopped > 0 && stopped <= reserved ? stopped + 1 : reserved + 1,
    );
    bus.meta = meta;
    return bus;
  }

  private meta: MetaStore | undefined;

  /**
   * Marks a graceful stop (the last thing the gateway does before its store closes, once nothing
   * publishes): the next process then knows which cursors lost nothing across the restart.
   */
  async markStopped(): Promise<void> {
    if (this.pending.length === 0) await this.meta?.set(SEQ_STOPPED_KEY, String(this.seq));
  }

  /** The seq of the last event handed out. */
  get currentSeq(): number {
    return this.seq;
  }

  /** Events waiting for a durable reservation (0 unless storage is failing). */
  get pendingCount(): number {
    return this.pending.length;
  }

  /** What the replay window holds now: events, and their `eventBytes`. */
  get window(): { events: number; bytes: number } {
    return { events: this.ringSize, bytes: this.heldBytes };
  }

  /**
   * Calls `send` with a fresh seq for a frame sent directly to one peer (outside the replay window),
   * in order with published events: at once, unless numbering waits for a reservation.
   */
  withSeq(send: (seq: number) => void): void {
    if (this.pending.length === 0 && this.take()) {
      send(this.seq);
      return;
    }
    this.hold({ kind: "direct", send, bytes: DIRECT_BYTES });
  }

  publish<E extends EventName>(event: E, payload: EventPayload<E>, scope: EventScope = {}): void {
    const entry = { event, payload: payload as Record<string, unknown>, ...scope };
    const bytes = eventBytes(entry);
    if (this.pending.length === 0 && this.take()) this.emit(entry, this.seq, bytes);
    else this.hold({ kind: "publish", entry, bytes });
  }

  /** Events with `seq > after` still in the window, oldest first. */
  replay(after: number, accepts: (event: BusEvent) => boolean): BusEvent[] {
    const out: BusEvent[] = [];
    for (let i = 0; i < this.ringSize; i++) {
      const entry = this.ring[(this.ringStart + i) % this.capacity]!;
      if (entry.seq > after && accepts(entry)) out.push(entry);
    }
    return out;
  }

  replayableFrom(): number {
    return this.firstReplayable;
  }

  subscribe(subscriber: EventSubscriber): () => void {
    this.subscribers.add(subscriber);
    return () => this.subscribers.delete(subscriber);
  }

  /** Stops retrying a failed reservation (shutdown); held events stay undelivered. */
  stop(): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
  }

  /** Advances `seq` if the next number is reserved; starts an extension when half the block is used. */
  private take(): boolean {
    const reservation = this.reservation;
    if (!reservation) {
      this.seq += 1;
      return true;
    }
    if (this.seq >= reservation.reservedUpTo) {
      this.extend();
      return false;
    }
    this.seq += 1;
    if (reservation.reservedUpTo - this.seq < reservation.block / 2) this.extend();
    return true;
  }

  private emit(fields: Omit<BusEvent, "seq">, seq: number, bytes: number): void {
    const entry = fields as BusEvent;
    entry.seq = seq;
    if (this.ringSize === this.capacity) this.evictOldest();
    const index = (this.ringStart + this.ringSize) % this.capacity;
    this.ring[index] = entry;
    this.ringBytes[index] = bytes;
    this.ringSize += 1;
    this.heldBytes += bytes;
    // An event bigger than the whole budget goes too: the window then starts after it.
    while (this.heldBytes > this.maxBytes && this.ringSize > 0) this.evictOldest();
    for (const subscriber of this.subscribers) {
      if (subscriber.accepts(entry)) subscriber.deliver(entry);
    }
  }

  /** The oldest event leaves the window, and with it everything numbered below it. */
  private evictOldest(): void {
    const index = this.ringStart;
    this.firstReplayable = this.ring[index]!.seq + 1;
    this.heldBytes -= this.ringBytes[index]!;
    // Cleared, not left for a later overwrite: a byte eviction frees the slot's event now.
    this.ring[index] = undefined;
    this.ringStart = (index + 1) % this.capacity;
    this.ringSize -= 1;
  }

  private hold(item: Pending): void {
    this.pending.push(item);
    this.pendingBytes += item.bytes;
    while (
      this.pending.length > MAX_PENDING ||
      (this.pendingBytes > this.maxBytes && this.pending.length > 1)
    ) {
      // Storage has refused the reservation for a long time: bounded memory beats a crash.
      this.pendingBytes -= this.pending.shift()!.bytes;
      this.dropped += 1;
    }
    this.extend();
  }

  private extend(): void {
    const reservation = this.reservation;
    if (!reservation || this.extending || this.retryTimer) return;
    const upTo = Math.max(this.seq, reservation.reservedUpTo) + reservation.block;
    this.extending = reservation.persist(upTo).then(
      () => {
        this.extending = undefined;
        reservation.reservedUpTo = Math.max(reservation.reservedUpTo, upTo);
        this.drain();
      },
      (error: unknown) => {
        this.extending = undefined;
        reservation.onError?.(error, this.pending.length + this.dropped);
        this.retryTimer = setTimeout(() => {
          this.retryTimer = undefined;
          if (this.pending.length > 0) this.extend();
        }, RETRY_DELAY_MS);
        this.retryTimer.unref();
      },
    );
  }

  private drain(): void {
    while (this.pending.length > 0 && this.take()) {
      const item = this.pending.shift()!;
      this.pendingBytes -= item.bytes;
      if (item.kind === "publish") this.emit(item.entry, this.seq, item.bytes);
      else item.send(this.seq);
    }
  }
}
