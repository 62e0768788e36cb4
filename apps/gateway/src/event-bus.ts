import type { EventName, EventPayload } from "@switchboard/core";

export interface BusEvent {
  event: string;
  seq: number;
  payload: Record<string, unknown>;
  /** Session the event concerns (for per-role filtering). */
  sessionKey?: string;
  /** Agent the event concerns (workers see events of the agents they serve). */
  agentId?: string;
  /** When set, only this connection may receive the event (e.g. `run.assigned`). */
  connectionId?: string;
}

export interface EventSubscriber {
  /** Returns false when the event must not be delivered to this subscriber. */
  accepts(event: BusEvent): boolean;
  deliver(event: BusEvent): void;
}

/**
 * Global event sequence with a bounded replay window. `seq` starts from a persisted base so it keeps
 * increasing across restarts, and a client resuming with `after` never sees a repeated number.
 */
export class EventBus {
  private readonly ring: BusEvent[];
  private ringStart = 0;
  private ringSize = 0;
  private seq: number;
  private readonly subscribers = new Set<EventSubscriber>();

  constructor(
    private readonly capacity = 16_384,
    initialSeq = 0,
  ) {
    this.ring = new Array(capacity);
    this.seq = initialSeq;
  }

  get currentSeq(): number {
    return this.seq;
  }

  /** A seq for an event sent directly to one peer, outside the replay window. */
  allocateSeq(): number {
    this.seq += 1;
    return this.seq;
  }

  publish<E extends EventName>(
    event: E,
    payload: EventPayload<E>,
    scope: { sessionKey?: string; agentId?: string; connectionId?: string } = {},
  ): BusEvent {
    this.seq += 1;
    const entry: BusEvent = { event, seq: this.seq, payload: payload as Record<string, unknown>, ...scope };
    const index = (this.ringStart + this.ringSize) % this.capacity;
    this.ring[index] = entry;
    if (this.ringSize < this.capacity) this.ringSize += 1;
    else this.ringStart = (this.ringStart + 1) % this.capacity;
    for (const subscriber of this.subscribers) {
      if (subscriber.accepts(entry)) subscriber.deliver(entry);
    }
    return entry;
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

  subscribe(subscriber: EventSubscriber): () => void {
    this.subscribers.add(subscriber);
    return () => this.subscribers.delete(subscriber);
  }
}
