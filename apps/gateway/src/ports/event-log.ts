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

/** Who an event concerns, for per-role filtering. */
export interface EventScope {
  sessionKey?: string;
  agentId?: string;
  connectionId?: string;
}

/**
 * The gateway's event stream: one `seq` order, publish/subscribe, and replay of a recent window.
 * The in-process bus numbers and fans out events of this process only; several instances need a
 * shared sequence and a shared log (what the PostgreSQL backend provides) behind this interface.
 */
export interface EventLog {
  /** The seq of the last event handed out. */
  readonly currentSeq: number;
  publish<E extends EventName>(event: E, payload: EventPayload<E>, scope?: EventScope): void;
  /**
   * Calls `send` with a fresh seq for a frame sent directly to one peer (outside the replay window),
   * in order with published events.
   */
  withSeq(send: (seq: number) => void): void;
  /**
   * Events with `seq > after` still in the window, oldest first, up to `currentSeq` at the call.
   * The in-process bus answers synchronously; the cluster log reads the database (a promise): the
   * caller subscribes first and holds live events until the replay is sent.
   */
  replay(after: number, accepts: (event: BusEvent) => boolean): BusEvent[] | Promise<BusEvent[]>;
  /**
   * The lowest seq from which every event this log numbered can still be replayed: a cursor below
   * it minus one has lost events (they left the window, or were numbered before the window began).
   */
  replayableFrom(): number | Promise<number>;
  subscribe(subscriber: EventSubscriber): () => void;
  /**
   * What a client resumes by (connect result `server.epoch`): the cluster's stream id, shared by
   * every instance; undefined for the in-process bus (the gateway sends its instance id).
   */
  readonly epoch?: string;
  /**
   * Brings `currentSeq` up to everything committed, delivering it to subscribers first. The
   * cluster's reader can be behind the stream (its database connection was down a moment); the
   * in-process bus is always current and has none.
   */
  catchUp?(): Promise<void>;
  /** Stops background work (shutdown). */
  stop(): void;
  /**
   * Records, once nothing publishes any more, where a graceful stop left the numbering (a log whose
   * window does not outlive the process; the cluster's table does and has none).
   */
  markStopped?(): Promise<void>;
}
