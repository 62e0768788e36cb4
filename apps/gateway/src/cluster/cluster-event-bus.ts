import type { EventName, EventPayload } from "@switchboard/core";
import type { ClusterEventLog } from "@switchboard/store-pg";
import type { BusEvent, EventLog, EventScope, EventSubscriber } from "../ports/event-log";

/**
 * The `EventLog` port over the cluster's event log: one seq order for every instance, replay from
 * the database, wake-ups by LISTEN/NOTIFY. The port's `publish` and `withSeq` return nothing (the
 * gateway's services publish and go on), so the database's answer is awaited here: a publish the
 * database refuses (unreachable) is reported to `onError` and the event is not delivered anywhere
 * — no instance shows an event the log does not hold. Subscribers here get every instance's events,
 * this one's included, in seq order a few milliseconds after the commit.
 */
export class ClusterEventBus implements EventLog {
  constructor(
    private readonly log: ClusterEventLog,
    private readonly onError: (error: unknown, event: string) => void,
  ) {}

  get epoch(): string {
    return this.log.epoch;
  }

  get currentSeq(): number {
    return this.log.currentSeq;
  }

  publish<E extends EventName>(event: E, payload: EventPayload<E>, scope?: EventScope): void {
    this.log.publish(event, payload, scope).catch((error: unknown) => this.onError(error, event));
  }

  withSeq(send: (seq: number) => void): void {
    this.log.withSeq(send).catch((error: unknown) => this.onError(error, "direct frame"));
  }

  replay(after: number, accepts: (event: BusEvent) => boolean): Promise<BusEvent[]> {
    return this.log.replay(after, accepts);
  }

  /** Above what the cluster's retention removed; the table outlives any instance. */
  replayableFrom(): Promise<number> {
    return this.log.replayableFrom();
  }

  catchUp(): Promise<void> {
    return this.log.catchUp();
  }

  subscribe(subscriber: EventSubscriber): () => void {
    return this.log.subscribe(subscriber);
  }

  /** The log's listener and timers stop with the cluster (`Cluster.close`). */
  stop(): void {}
}
