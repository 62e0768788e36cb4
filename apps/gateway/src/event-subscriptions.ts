import type { BusEvent, EventLog } from "./ports/event-log";

/** `follows` entry meaning every event the subscriber may see. */
export const ALL_EVENTS = "*";

/** One connection's subscriptions, as the index sees them. */
export interface StreamSubscriber {
  /** Its connection id: an event addressed to one connection goes to that subscriber only. */
  readonly id: string;
  /**
   * The session keys it follows, or just `ALL_EVENTS`. Changed only through the index, which keeps
   * its own lookups in step.
   */
  readonly follows: Set<string>;
  /** What its role lets it see (the session it follows is already checked by the index). */
  mayReceive(event: BusEvent): boolean;
  deliver(event: BusEvent): void;
}

/**
 * The event stream's subscriptions by session key, on one subscription to the log. A connection
 * may follow up to 1 000 sessions and an address may hold hundreds of connections: an event runs
 * the role check of the subscribers following its session and of those following everything, not
 * a filter per subscription that cannot match it.
 */
export class EventSubscriptions {
  private readonly all = new Set<StreamSubscriber>();
  private readonly byKey = new Map<string, Set<StreamSubscriber>>();
  private readonly byId = new Map<string, StreamSubscriber>();
  private readonly unsubscribe: () => void;

  constructor(log: Pick<EventLog, "subscribe">) {
    this.unsubscribe = log.subscribe({ accepts: () => true, deliver: (event) => this.dispatch(event) });
  }

  /** Subscribers following at least one session, or everything (tests). */
  get size(): number {
    return this.byId.size;
  }

  /** Keys with a subscriber (tests: a closed connection leaves none behind). */
  get keyCount(): number {
    return this.byKey.size;
  }

  /**
   * Adds `keys` to what `subscriber` follows; none means every event, which covers (and replaces)
   * the sessions it followed.
   */
  follow(subscriber: StreamSubscriber, keys: readonly string[]): void {
    if (keys.length === 0) {
      this.replace(subscriber, [ALL_EVENTS]);
      return;
    }
    if (subscriber.follows.has(ALL_EVENTS)) return;
    this.byId.set(subscriber.id, subscriber);
    for (const key of keys) {
      if (subscriber.follows.has(key)) continue;
      subscriber.follows.add(key);
      let set = this.byKey.get(key);
      if (!set) {
        set = new Set();
        this.byKey.set(key, set);
      }
      set.add(subscriber);
    }
  }

  /** Makes `subscriber` follow exactly `keys` (`ALL_EVENTS` among them: everything). */
  replace(subscriber: StreamSubscriber, keys: Iterable<string>): void {
    const next = [...keys];
    this.remove(subscriber);
    if (next.includes(ALL_EVENTS)) {
      subscriber.follows.add(ALL_EVENTS);
      this.all.add(subscriber);
      this.byId.set(subscriber.id, subscriber);
    } else if (next.length > 0) this.follow(subscriber, next);
  }

  remove(subscriber: StreamSubscriber): void {
    if (this.byId.get(subscriber.id) === subscriber) this.byId.delete(subscriber.id);
    this.all.delete(subscriber);
    for (const key of subscriber.follows) {
      const set = this.byKey.get(key);
      if (!set) continue;
      set.delete(subscriber);
      if (set.size === 0) this.byKey.delete(key);
    }
    subscriber.follows.clear();
  }

  /** Stops listening to the log (the gateway is closing). */
  close(): void {
    this.unsubscribe();
  }

  private dispatch(event: BusEvent): void {
    if (event.connectionId) {
      const target = this.byId.get(event.connectionId);
      if (
        target &&
        (target.follows.has(ALL_EVENTS) ||
          (event.sessionKey !== undefined && target.follows.has(event.sessionKey))) &&
        target.mayReceive(event)
      )
        target.deliver(event);
      return;
    }
    // A delivery can drop a slow reader, which removes it from these sets: deleting while a Set is
    // iterated is safe (it is just not visited).
    for (const subscriber of this.all) if (subscriber.mayReceive(event)) subscriber.deliver(event);
    if (event.sessionKey === undefined) return;
    const following = this.byKey.get(event.sessionKey);
    if (following)
      for (const subscriber of following) if (subscriber.mayReceive(event)) subscriber.deliver(event);
  }
}
