import { describe, expect, it } from "vitest";
import { ALL_EVENTS, EventSubscriptions, type StreamSubscriber } from "./event-subscriptions";
import type { BusEvent, EventSubscriber } from "./ports/event-log";

/** A log with one publish: what the index subscribed is called as the bus would. */
function fakeLog() {
  const subscribers = new Set<EventSubscriber>();
  let seq = 0;
  return {
    subscribe(subscriber: EventSubscriber) {
      subscribers.add(subscriber);
      return () => subscribers.delete(subscriber);
    },
    publish(fields: Omit<BusEvent, "seq" | "event" | "payload">) {
      const event: BusEvent = { event: "session.updated", payload: {}, seq: ++seq, ...fields };
      for (const subscriber of subscribers) if (subscriber.accepts(event)) subscriber.deliver(event);
    },
  };
}

interface Probe extends StreamSubscriber {
  visited: number;
  got: number[];
}

function probe(id: string, mayReceive: (event: BusEvent) => boolean = () => true): Probe {
  const subscriber: Probe = {
    id,
    follows: new Set(),
    visited: 0,
    got: [],
    mayReceive: (event) => {
      subscriber.visited += 1;
      return mayReceive(event);
    },
    deliver: (event) => void subscriber.got.push(event.seq),
  };
  return subscriber;
}

describe("EventSubscriptions", () => {
  it("runs the checks of the subscribers following an event's session and of those following all, none other", () => {
    const log = fakeLog();
    const index = new EventSubscriptions(log);
    // 400 connections following 1 000 sessions each that no event is about, as a hostile client.
    const idle = Array.from({ length: 400 }, (_, n) => probe(`idle-${n}`));
    for (const [n, subscriber] of idle.entries())
      index.follow(
        subscriber,
        Array.from({ length: 1_000 }, (_, k) => `agent:main:webchat:dm:made-up-${n}-${k}`),
      );
    const follower = probe("follower");
    index.follow(follower, ["agent:main:main", "agent:main:other"]);
    const everything = probe("everything");
    index.follow(everything, []);
    const agentOnly = probe("agent-only", (event) => event.agentId === "main");
    index.follow(agentOnly, []);

    log.publish({ sessionKey: "agent:main:main", agentId: "research" });
    log.publish({ sessionKey: "agent:main:nobody" });
    log.publish({});

    expect(idle.reduce((sum, subscriber) => sum + subscriber.visited, 0)).toBe(0);
    expect(follower).toMatchObject({ visited: 1, got: [1] });
    expect(everything).toMatchObject({ visited: 3, got: [1, 2, 3] });
    expect(agentOnly).toMatchObject({ visited: 3, got: [] });
  });

  it("sends an event addressed to one connection to it alone, if it follows the event's session", () => {
    const log = fakeLog();
    const index = new EventSubscriptions(log);
    const target = probe("c1");
    const other = probe("c2");
    index.follow(target, ["agent:main:main"]);
    index.follow(other, []);
    log.publish({ sessionKey: "agent:main:main", connectionId: "c1" });
    log.publish({ sessionKey: "agent:main:else", connectionId: "c1" });
    expect(target).toMatchObject({ visited: 1, got: [1] });
    expect(other.visited).toBe(0);
  });

  it("all events replaces the sessions followed; a restore and a removal leave no key behind", () => {
    const log = fakeLog();
    const index = new EventSubscriptions(log);
    const subscriber = probe("c1");
    index.follow(subscriber, ["agent:main:a", "agent:main:b"]);
    const before = new Set(subscriber.follows);
    index.follow(subscriber, []);
    expect([...subscriber.follows]).toEqual([ALL_EVENTS]);
    expect(index.keyCount).toBe(0);
    // Following a session while following all adds nothing.
    index.follow(subscriber, ["agent:main:c"]);
    expect([...subscriber.follows]).toEqual([ALL_EVENTS]);
    index.replace(subscriber, before);
    expect([...subscriber.follows]).toEqual(["agent:main:a", "agent:main:b"]);
    log.publish({ sessionKey: "agent:main:c" });
    log.publish({ sessionKey: "agent:main:b" });
    expect(subscriber.got).toEqual([2]);
    index.remove(subscriber);
    expect({ size: index.size, keys: index.keyCount, follows: subscriber.follows.size }).toEqual({
      size: 0,
      keys: 0,
      follows: 0,
    });
  });
});
