import { createMemoryStore, type MetaStore } from "@switchboard/core";
import { describe, expect, it, vi } from "vitest";
import { type BusEvent, EventBus, SEQ_RESERVED_KEY } from "./event-bus";

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
    const bus = new EventBus(4);
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
