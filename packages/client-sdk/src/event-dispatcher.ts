import {
  type EventFrame,
  type EventName,
  type EventPayload,
  Events,
  formatZodIssues,
  SwitchboardError,
} from "@switchboard/core";
import { describeError } from "./client-errors";
import { EventQueue } from "./event-queue";
import type { Logger } from "./logger";

/** An event as consumers see it: the frame with its payload parsed and typed by event name. */
export type TypedEvent<E extends EventName = EventName> = {
  [K in E]: { readonly event: K; readonly seq: number; readonly payload: EventPayload<K> };
}[E];

export type TypedEventListener<E extends EventName> = (event: TypedEvent<E>) => void;

export interface EventsOptions<E extends EventName> {
  /** Only these events; all when absent. */
  events?: readonly E[];
  /** Events buffered for a slow consumer before the iterator ends with an error (default 10 000). */
  highWaterMark?: number;
}

const DEFAULT_EVENT_HIGH_WATER_MARK = 10_000;
/** Events addressed to one connection (protocol.md): outside the resumable stream. */
const ADDRESSED_EVENTS: ReadonlySet<string> = new Set(["run.assigned"]);

interface EventConsumer {
  readonly queue: EventQueue<TypedEvent>;
  readonly filter: ReadonlySet<EventName> | undefined;
}

/**
 * Delivers event frames to listeners and iterators, each once and in `seq` order: frames at or
 * below the cursor (the last delivered `seq`) are replays of what was already delivered.
 */
export class EventDispatcher {
  /** The `seq` of the last event delivered (or the point a live subscription started from). */
  cursor: number | undefined;
  private readonly listeners = new Map<EventName, Set<TypedEventListener<EventName>>>();
  private readonly consumers = new Set<EventConsumer>();
  private ended = false;

  constructor(private readonly logger: Logger) {}

  on<E extends EventName>(event: E, listener: TypedEventListener<E>): () => void {
    assertEventName(event);
    let set = this.listeners.get(event);
    if (!set) {
      set = new Set();
      this.listeners.set(event, set);
    }
    const stored = listener as TypedEventListener<EventName>;
    set.add(stored);
    return () => {
      set.delete(stored);
    };
  }

  iterate<E extends EventName>(options: EventsOptions<E>): AsyncIterableIterator<TypedEvent<E>> {
    for (const name of options.events ?? []) assertEventName(name);
    const highWaterMark = options.highWaterMark ?? DEFAULT_EVENT_HIGH_WATER_MARK;
    if (!Number.isInteger(highWaterMark) || highWaterMark < 1) {
      throw new SwitchboardError("INVALID_REQUEST", "options.highWaterMark: must be a positive integer");
    }
    let consumer: EventConsumer | undefined;
    const queue = new EventQueue<TypedEvent>(highWaterMark, () => {
      if (consumer) this.consumers.delete(consumer);
    });
    consumer = { queue, filter: options.events ? new Set<EventName>(options.events) : undefined };
    if (this.ended) queue.end();
    else this.consumers.add(consumer);
    return queue as unknown as AsyncIterableIterator<TypedEvent<E>>;
  }

  /** Moves the cursor forward (never back) without delivering anything. */
  advanceTo(seq: number): void {
    this.cursor = Math.max(this.cursor ?? -1, seq);
  }

  dispatch(frame: EventFrame): void {
    if (ADDRESSED_EVENTS.has(frame.event)) {
      // Sent to this connection alone and never replayed: no resume filter applies, and it does
      // not move the cursor of the subscribed stream (the agent worker de-duplicates by runId).
    } else if (this.cursor !== undefined && frame.seq <= this.cursor) {
      // seq is the gateway-wide order, so anything not past the cursor has been delivered already.
      this.logger.debug({ seq: frame.seq, cursor: this.cursor }, "dropping an already delivered event");
      return;
    } else {
      this.cursor = frame.seq;
    }
    if (!Object.hasOwn(Events, frame.event)) {
      this.logger.debug({ event: frame.event }, "ignoring an event this SDK version does not know");
      return;
    }
    const name = frame.event as EventName;
    const payload = Events[name].safeParse(frame.payload);
    if (!payload.success) {
      this.logger.warn(
        { event: name, seq: frame.seq, issues: formatZodIssues(payload.error) },
        "dropping a malformed event",
      );
      return;
    }
    const event = { event: name, seq: frame.seq, payload: payload.data } as TypedEvent;
    for (const listener of [...(this.listeners.get(name) ?? [])]) this.callListener(listener, event);
    for (const consumer of this.consumers) {
      if (!consumer.filter || consumer.filter.has(name)) consumer.queue.push(event);
    }
  }

  /** Ends every iterator (with `error` if given); later iterators start ended. */
  end(error?: unknown): void {
    this.ended = true;
    for (const consumer of [...this.consumers]) consumer.queue.end(error);
    this.consumers.clear();
  }

  private callListener(listener: TypedEventListener<EventName>, event: TypedEvent): void {
    // A consumer's bug must not stop delivery to the others or break the connection.
    try {
      const returned: unknown = listener(event);
      if (returned instanceof Promise) {
        returned.catch((error: unknown) =>
          this.logger.error({ event: event.event, error: describeError(error) }, "an event listener failed"),
        );
      }
    } catch (error) {
      this.logger.error({ event: event.event, error: describeError(error) }, "an event listener threw");
    }
  }
}

function assertEventName(name: string): asserts name is EventName {
  if (!Object.hasOwn(Events, name)) {
    throw new SwitchboardError("INVALID_REQUEST", `unknown event "${name}"`, { details: { event: name } });
  }
}
