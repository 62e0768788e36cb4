import { createMemoryStore, type MetaStore } from "@switchboard/core";
import { describe, expect, it, vi } from "vitest";
import { type BusEvent, DEFAULT_REPLAY_BYTES, EventBus, eventBytes, SEQ_RESERVED_KEY } from "./event-bus";

function collect(bus: EventBus): BusEvent[] {
  const seen: BusEvent[] = [];
  bus.subscribe({ accepts: () => true, deliver: (event) => seen.push(event) });
  return seen;
}

function publishMany(bus: EventBus, count: number): void {
  for (let i = 0; i < count; i++) {
    bus.publish("session.updated", { key: `k${i}`, sessionId: "s", reason: "test" });
  }
}

/** A meta store whose writes wait until released (a slow or stuck disk). */
function gatedMeta(): { meta: MetaStore; writes: string[]; release(): void; fail(error: Error): void } {
  const inner = createMemoryStore().meta;
  const waiting: Array<{ resolve: () => void; reject: (error: Error) => void }> = [];
  const writes: string[] = [];
  return {
    writes,
    meta: {
      get: (name) => inner.get(name),
      set: async (name, value) => {
        writes.push(value);
        await new Promise<void>((resolve, reject) => waiting.push({ resolve, reject }));
        await inner.set(name, value);
      },
    },
    release: () => {
      for (const write of waiting.splice(0)) write.resolve();
    },
    fail: (error) => {
      for (const write of waiting.splice(0)) write.reject(error);
    },
  };
}

describe("EventBus seq reservation", () => {
  it("starts above every number a killed process may have handed out, even far ahead of the clock", async () => {
    const { meta } = createMemoryStore();
    const first = await EventBus.open(meta, { block: 100 });
    const seen = collect(first);
    // 1 000 events in one tick: far more numbers than milliseconds passed (the old clock floor).
    publishMany(first, 1_000);
    await new Promise((resolve) => setImmediate(resolve));
    publishMany(first, 10);
    const highest = seen.at(-1)!.seq;
    // "kill -9": no close, no final write; a new process opens the same meta store.
    const second = await EventBus.open(meta, { block: 100 });
    const after = collect(second);
    publishMany(second, 1);
    expect(after[0]!.seq).toBeGreaterThan(highest);
    expect(Number(await meta.get(SEQ_RESERVED_KEY))).toBeGreaterThanOrEqual(after[0]!.seq);
  });

  it("never hands out a number above the durable ceiling: events wait, in order, until it is extended", async () => {
    const gated = gatedMeta();
    const opening = EventBus.open(gated.meta, { block: 10 });
    await vi.waitFor(() => expect(gated.writes).toHaveLength(1));
    gated.release();
    const bus = await opening;
    const ceiling = bus.currentSeq + 10;
    const seen = collect(bus);
    const direct: number[] = [];
    publishMany(bus, 12);
    bus.withSeq((seq) => direct.push(seq));
    publishMany(bus, 3);
    // The extension write has not landed: nothing beyond the ceiling went out.
    expect(seen).toHaveLength(10);
    expect(seen.at(-1)!.seq).toBe(ceiling);
    expect(direct).toEqual([]);
    expect(bus.pendingCount).toBe(6);
    gated.release();
    await vi.waitFor(() => expect(seen).toHaveLength(15));
    const seqs = seen.map((event) => event.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(15);
    // The direct frame took its number in publishing order, between the 12th and 13th event.
    expect(direct[0]).toBeGreaterThan(seen[11]!.seq);
    expect(direct[0]).toBeLessThan(seen[12]!.seq);
  });

  it("keeps the events and retries when the reservation write fails (no unhandled rejection)", async () => {
    const gated = gatedMeta();
    const opening = EventBus.open(gated.meta, {
      block: 4,
      onError: (error, pending) => errors.push(`${(error as Error).message} (${pending} waiting)`),
    });
    const errors: string[] = [];
    await vi.waitFor(() => expect(gated.writes).toHaveLength(1));
    gated.release();
    const bus = await opening;
    const seen = collect(bus);
    publishMany(bus, 6);
    expect(seen).toHaveLength(4);
    gated.fail(new Error("disk full"));
    await vi.waitFor(() => expect(errors).toEqual(["disk full (2 waiting)"]));
    expect(seen).toHaveLength(4);
    // The retry after the failure succeeds: the held events go out.
    await vi.waitFor(() => expect(gated.writes.length).toBeGreaterThan(2), { timeout: 3_000 });
    gated.release();
    await vi.waitFor(() => expect(seen).toHaveLength(6));
    bus.stop();
  });
});

describe("EventBus replay window", () => {
  it("names the first seq it can still replay: past the ring's capacity, and above a restart", async () => {
    const bus = new EventBus({ events: 4 });
    expect(bus.replayableFrom()).toBe(1);
    publishMany(bus, 4);
    expect(bus.replayableFrom()).toBe(1);
    // A direct frame takes a number no replay ever held.
    bus.withSeq(() => undefined);
    publishMany(bus, 2);
    // Two events pushed out (seqs 1 and 2): from 3 on everything is still there.
    expect(bus.replayableFrom()).toBe(3);
    expect(bus.replay(2, () => true).map((event) => event.seq)).toEqual([3, 4, 6, 7]);
    publishMany(bus, 1);
    // Seq 3 went; 4 is kept, so a cursor at 3 lost nothing.
    expect(bus.replayableFrom()).toBe(4);

    const meta = createMemoryStore().meta;
    const first = await EventBus.open(meta, { block: 100 });
    // A fresh data dir numbers from the clock, but nothing below was ever handed out.
    expect(first.currentSeq).toBeGreaterThan(1_000_000);
    expect(first.replayableFrom()).toBe(1);
    publishMany(first, 3);
    const second = await EventBus.open(meta, { block: 100 });
    // The first process was killed: nothing it may have numbered (up to its ceiling) can be replayed.
    expect(second.replayableFrom()).toBeGreaterThan(first.currentSeq);
    expect(second.replayableFrom()).toBeLessThanOrEqual(second.currentSeq + 1);
  });

  it("after a graceful stop, a cursor at the stopped process's last seq lost nothing; a kill after clears that", async () => {
    const meta = createMemoryStore().meta;
    const first = await EventBus.open(meta, { block: 100 });
    publishMany(first, 3);
    const lastSeen = first.currentSeq;
    await first.markStopped();
    const second = await EventBus.open(meta, { block: 100 });
    expect(second.currentSeq).toBeGreaterThan(lastSeen);
    expect(second.replayableFrom()).toBe(lastSeen + 1);
    publishMany(second, 2);
    // The second is killed (no mark): the third must not trust the first's mark for it.
    const third = await EventBus.open(meta, { block: 100 });
    expect(third.replayableFrom()).toBeGreaterThan(second.currentSeq);
  });
});

describe("EventBus replay window bytes", () => {
  /** What one worker can stream: text deltas just under the frame limit, as fast as it likes. */
  function streamDeltas(bus: EventBus, count: number, text: string): void {
    for (let i = 0; i < count; i++) {
      bus.publish(
        "run.progress",
        { runId: "r", sessionKey: "agent:main:main", kind: "text-delta", text },
        { sessionKey: "agent:main:main", agentId: "main" },
      );
    }
  }

  it("keeps frame-sized events within its byte budget by default, however many arrive", async () => {
    const bus = await EventBus.open(createMemoryStore().meta, { block: 100_000 });
    const start = bus.currentSeq;
    const delta = "d".repeat(900_000);
    // 300 deltas: 270 MB of text, far under the 16 384-event count that used to be the only bound.
    streamDeltas(bus, 300, delta);
    const kept = bus.replay(start, () => true);
    expect(kept.length).toBeLessThan(300);
    expect(kept.length).toBeGreaterThanOrEqual(Math.floor(DEFAULT_REPLAY_BYTES / 1_000_000));
    expect(bus.window).toEqual({ events: kept.length, bytes: expect.any(Number) });
    expect(bus.window.bytes).toBeLessThanOrEqual(DEFAULT_REPLAY_BYTES);
    // The newest are the ones kept, and the oldest kept is the first replayable seq.
    expect(kept.at(-1)!.seq).toBe(bus.currentSeq);
    expect(bus.replayableFrom()).toBe(kept[0]!.seq);
  });

  it("evicts the oldest first, and a cursor before them learns it missed events; small events keep the count bound", () => {
    const bus = new EventBus({ events: 1_000, bytes: 10_000 });
    publishMany(bus, 5);
    const cursor = bus.currentSeq;
    expect(bus.replayableFrom()).toBe(1);
    streamDeltas(bus, 6, "x".repeat(2_000));
    // Six events of ~2 KB in a 10 KB window: what went first left, and the count was never reached.
    expect(bus.window.bytes).toBeLessThanOrEqual(10_000);
    expect(bus.window.events).toBeLessThan(11);
    // Every event up to and past the cursor is gone: resuming from it has lost some (the `missed`
    // answer of events.subscribe, whose rule is `after + 1 < replayableFrom()`).
    expect(bus.replayableFrom()).toBeGreaterThan(cursor + 1);
    const replayed = bus.replay(cursor, () => true).map((event) => event.seq);
    expect(replayed[0]).toBe(bus.replayableFrom());
    expect(replayed.at(-1)).toBe(bus.currentSeq);

    // An event bigger than the whole budget is delivered live but not kept: the window starts after it.
    const seen = collect(bus);
    streamDeltas(bus, 1, "y".repeat(20_000));
    expect(seen).toHaveLength(1);
    expect(bus.window).toEqual({ events: 0, bytes: 0 });
    expect(bus.replayableFrom()).toBe(bus.currentSeq + 1);

    const counted = new EventBus({ events: 3, bytes: 10_000_000 });
    publishMany(counted, 10);
    expect(counted.window.events).toBe(3);
    expect(counted.replayableFrom()).toBe(8);
  });

  it("counts an event's text, so accounting follows what it holds", () => {
    const small = eventBytes({ event: "run.progress", payload: { text: "a" } });
    const large = eventBytes({ event: "run.progress", payload: { text: "a".repeat(100_001) } });
    expect(large - small).toBe(100_000);
  });

  it("bounds events held while the reservation is down by the same budget", async () => {
    const gated = gatedMeta();
    const opening = EventBus.open(gated.meta, { block: 2, window: { bytes: 10_000 } });
    await vi.waitFor(() => expect(gated.writes).toHaveLength(1));
    gated.release();
    const bus = await opening;
    streamDeltas(bus, 2, "x");
    // The ceiling is reached and its extension never lands: the rest wait, bounded.
    streamDeltas(bus, 50, "x".repeat(2_000));
    expect(bus.pendingCount).toBeLessThanOrEqual(5);
    bus.stop();
  });
});
