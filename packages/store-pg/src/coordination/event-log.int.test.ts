import { expect, it } from "vitest";
import { adminQuery, describeWithPg } from "../../test/pg-harness";
import type { Coordination } from "./context";
import { type ClusterEvent, type ClusterEventLog, eventChannel, openClusterEventLog } from "./event-log";
import { eventually, useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

async function instance(options: Parameters<typeof openClusterEventLog>[1] = {}) {
  const coordination = await cluster.open();
  const errors: unknown[] = [];
  const log = await openClusterEventLog(coordination, { onError: (error) => errors.push(error), ...options });
  cluster.cleanup(() => log.stop());
  const seen: ClusterEvent[] = [];
  log.subscribe({
    accepts: () => true,
    deliver: (event) => {
      // Order is checked at the moment of delivery: a later seq before an earlier one fails here.
      const last = seen.at(-1);
      if (last && event.seq <= last.seq) throw new Error(`out of order: ${event.seq} after ${last.seq}`);
      seen.push(event);
    },
  });
  return { coordination, log, seen, errors };
}

/** Counts the reader's queries of the events table on one instance. */
function countTableReads(coordination: Coordination) {
  const counter = { count: 0 };
  const read = coordination.db.read.bind(coordination.db);
  coordination.db.read = ((
    action: string,
    ...rest: Parameters<typeof read> extends [string, ...infer R] ? R : never
  ) => {
    if (action === "reading new events") counter.count += 1;
    return read(action, ...rest);
  }) as typeof read;
  return counter;
}

const ids = (events: ClusterEvent[]) => events.map((event) => String(event.payload.id));

const publishMany = async (log: ClusterEventLog, prefix: string, count: number) => {
  const pending: Promise<number>[] = [];
  for (let n = 0; n < count; n++) {
    pending.push(
      log.publish("audit.appended", { index: n, kind: `${prefix}-${n}`, id: `${prefix}-${n}` } as never),
    );
    // Bursts of different sizes interleave the instances' batches.
    if (n % (3 + prefix.length) === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  return Promise.all(pending);
};

await describeWithPg("cluster event log", () => {
  it("gives three instances publishing at once the same totally ordered stream, none lost or duplicated", async () => {
    const a = await instance();
    const b = await instance();
    const c = await instance();
    expect(b.log.epoch).toBe(a.log.epoch);
    expect(c.log.epoch).toBe(a.log.epoch);
    const [sa, sb, sc] = await Promise.all([
      publishMany(a.log, "a", 150),
      publishMany(b.log, "bb", 150),
      publishMany(c.log, "ccc", 150),
    ]);
    const all = [...sa, ...sb, ...sc];
    expect(new Set(all).size).toBe(450);
    // Each publisher's own events keep its call order.
    for (const seqs of [sa, sb, sc]) expect([...seqs].sort((x, y) => x - y)).toEqual(seqs);
    for (const { seen } of [a, b, c])
      await eventually(() => seen.length >= 450, 5000, "every event everywhere");
    expect(ids(b.seen)).toEqual(ids(a.seen));
    expect(ids(c.seen)).toEqual(ids(a.seen));
    expect(new Set(ids(a.seen)).size).toBe(450);
    expect(a.seen.map((event) => event.seq)).toEqual([...all].sort((x, y) => x - y));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(a.seen).toHaveLength(450);
    expect([...a.errors, ...b.errors, ...c.errors]).toEqual([]);
  });

  it("replays after any retained seq on another instance, then continues live without a gap", async () => {
    const a = await instance();
    const seqs = await publishMany(a.log, "a", 40);
    const b = await instance();
    const cursor = seqs[14]!;
    const replayed = await b.log.replay(cursor, () => true);
    expect(replayed.map((event) => event.seq)).toEqual(seqs.slice(15));
    expect(ids(replayed)).toEqual(Array.from({ length: 25 }, (_, n) => `a-${n + 15}`));
    // A failing subscriber is reported and does not keep the event from the others.
    b.log.subscribe({
      accepts: () => true,
      deliver: () => {
        throw new Error("subscriber bug");
      },
    });
    // Filters apply, scope columns come back.
    await a.log.publish("audit.appended", { index: 1, kind: "x", id: "scoped" } as never, {
      sessionKey: "agent:main:main",
      agentId: "main",
    });
    await eventually(() => b.seen.length === 1, 3000, "live event on b");
    expect(b.seen[0]).toMatchObject({
      sessionKey: "agent:main:main",
      agentId: "main",
      payload: { id: "scoped" },
    });
    expect(b.errors).toEqual([new Error("subscriber bug")]);
    const scoped = await b.log.replay(cursor, (event) => event.sessionKey === "agent:main:main");
    expect(ids(scoped)).toEqual(["scoped"]);
  });

  it("calls withSeq's send in order with delivered events and never replays or forwards it", async () => {
    const a = await instance();
    const b = await instance();
    const order: string[] = [];
    a.log.subscribe({ accepts: () => true, deliver: (event) => order.push(`event ${event.seq}`) });
    const first = a.log.publish("audit.appended", { index: 1, kind: "x", id: "1" } as never);
    const direct = a.log.withSeq((seq) => order.push(`direct ${seq}`));
    const second = a.log.publish("audit.appended", { index: 2, kind: "x", id: "2" } as never);
    const [s1, sd, s2] = await Promise.all([first, direct, second]);
    expect(s1 < sd && sd < s2).toBe(true);
    await eventually(() => order.length === 3, 3000, "three deliveries");
    expect(order).toEqual([`event ${s1}`, `direct ${sd}`, `event ${s2}`]);
    await eventually(() => b.seen.length === 2, 3000, "b's events");
    expect(b.seen.map((event) => event.seq)).toEqual([s1, s2]);
    expect((await b.log.replay(0, () => true)).map((event) => event.seq)).toEqual([s1, s2]);
  });

  it("delivers batches from their NOTIFY without reading, and big events and gaps in one order", async () => {
    const a = await instance();
    const b = await instance({ pollMs: 600_000 });
    const reads = countTableReads(b.coordination);
    // Small events ride along with their wake-up: b reads the table for none of them.
    await publishMany(a.log, "a", 30);
    await eventually(() => b.seen.length === 30, 10_000, "small events on b");
    expect(reads.count).toBe(0);
    // An event too big for a NOTIFY payload (8000 bytes) makes b read; numbers drawn and never
    // used (a publish that rolled back) leave a gap the table proves empty.
    const big = a.log.publish("audit.appended", { index: 30, kind: "x".repeat(9000), id: "big" } as never);
    const after = a.log.publish("audit.appended", { index: 31, kind: "x", id: "after-big" } as never);
    await Promise.all([big, after]);
    await a.coordination.db.query(
      "drawing numbers",
      `SELECT nextval('${cluster.schema}.event_seq') FROM generate_series(1, 3)`,
    );
    const last = await a.log.publish("audit.appended", { index: 32, kind: "x", id: "after-gap" } as never);
    await eventually(() => b.seen.length === 33, 10_000, "every event on b");
    expect(ids(b.seen).slice(-3)).toEqual(["big", "after-big", "after-gap"]);
    expect(b.seen.at(-2)!.payload.kind).toBe("x");
    expect(b.seen.at(-3)!.payload.kind).toHaveLength(9000);
    expect(b.log.currentSeq).toBe(last);
    expect(reads.count).toBeGreaterThan(0);
    expect(ids(a.seen)).toEqual(ids(b.seen));
  });

  it("recovers events whose NOTIFY was lost while its listener connection was killed", async () => {
    // No safety-net poll here: only the reconnect's catch-up read can find the events.
    const a = await instance({ pollMs: 600_000, reconnectMs: 50 });
    const b = await instance({ pollMs: 600_000, reconnectMs: 300 });
    await a.log.publish("audit.appended", { index: 0, kind: "x", id: "before" } as never);
    await eventually(() => b.seen.length === 1, 3000, "first event on b");
    const killed = await adminQuery(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1 AND datname = current_database()",
      // The last statement of each instance's listener connection (its only channel here).
      [`LISTEN "${eventChannel(cluster.schema)}"`],
    );
    // Both instances' listeners were idle with that query as their last.
    expect(killed.rowCount).toBeGreaterThanOrEqual(1);
    await Promise.all(
      [1, 2, 3].map((n) =>
        a.log.publish("audit.appended", { index: n, kind: "x", id: `during-${n}` } as never),
      ),
    );
    await eventually(() => b.seen.length === 4, 5000, "events recovered on b");
    expect(ids(b.seen)).toEqual(["before", "during-1", "during-2", "during-3"]);
    // And the re-opened listener wakes b again.
    await a.log.publish("audit.appended", { index: 4, kind: "x", id: "after" } as never);
    await eventually(() => b.seen.length === 5, 3000, "event after reconnect");
  });

  it("keeps the table bounded: prune drops all but the newest events, replay starts at the oldest kept", async () => {
    const a = await instance();
    // Nothing below the table's first event was ever numbered: the whole stream is replayable.
    expect(await a.log.replayableFrom()).toBe(1);
    const seqs = await publishMany(a.log, "a", 30);
    await a.log.withSeq(() => undefined);
    expect(await a.log.prune({ keep: 10 })).toBe(21);
    const kept = await a.log.replay(0, () => true);
    expect(ids(kept)).toEqual(Array.from({ length: 9 }, (_, n) => `a-${n + 21}`));
    // Retention says where it cut: a cursor just below the oldest kept event lost nothing.
    expect(await a.log.replayableFrom()).toBe(seqs[21]);
    // Age protects recent events.
    await publishMany(a.log, "a", 5);
    expect(await a.log.prune({ keep: 1, minAgeMs: 60_000 })).toBe(0);
    expect(await a.log.replayableFrom()).toBe(seqs[21]);
    await expect(a.log.prune({ keep: 0 })).rejects.toThrow("keep: must be an integer >= 1");
  });

  it("numbers above the clock at creation and keeps numbering on reopen", async () => {
    const before = Date.now();
    const a = await instance();
    const first = await a.log.publish("audit.appended", { index: 0, kind: "x", id: "1" } as never);
    expect(first).toBeGreaterThan(before);
    await a.log.stop();
    const again = await openClusterEventLog(a.coordination);
    cluster.cleanup(() => again.stop());
    expect(again.currentSeq).toBe(first);
    expect(again.epoch).toBe(a.log.epoch);
    expect(await again.publish("audit.appended", { index: 1, kind: "x", id: "2" } as never)).toBeGreaterThan(
      first,
    );
    await expect(a.log.publish("audit.appended", { index: 2, kind: "x", id: "3" } as never)).rejects.toThrow(
      "stopped",
    );
  });
});
