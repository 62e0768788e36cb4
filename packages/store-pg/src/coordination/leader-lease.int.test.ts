import { expect, it } from "vitest";
import { describeWithPg } from "../../test/pg-harness";
import { openLeaderLease } from "./leader-lease";
import { eventually, useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

async function candidates(count: number, leaseMs: number) {
  const out = [];
  for (let n = 0; n < count; n++) {
    const coordination = await cluster.open({ instanceId: `gw-${n}` });
    const events: string[] = [];
    const lease = openLeaderLease(coordination, {
      leaseMs,
      renewMs: Math.floor(leaseMs / 4),
      onAcquired: (term) => events.push(`acquired ${term}`),
      onLost: () => events.push("lost"),
    });
    cluster.cleanup(() => lease.stop());
    out.push({ lease, events, id: coordination.instanceId });
  }
  return out;
}

await describeWithPg("leader lease", () => {
  it("stays released when a renewal was still in flight at release", async () => {
    const [only] = await candidates(1, 5000);
    // start() sends its first acquisition at once; release() comes before its answer.
    only!.lease.start();
    await only!.lease.release();
    expect(only!.lease.isLeader).toBe(false);
    expect(only!.events).toEqual(["acquired 1", "lost"]);
    expect(await only!.lease.holder()).toMatchObject({ holder: only!.id, expired: true });
  });

  it("has one leader at a time and a takeover within lease + renewal when the leader dies", async () => {
    const leaseMs = 600;
    const all = await candidates(3, leaseMs);
    for (const c of all) c.lease.start();
    await eventually(() => all.some((c) => c.lease.isLeader), 2000, "a leader");
    await new Promise((resolve) => setTimeout(resolve, 300));
    const leaders = all.filter((c) => c.lease.isLeader);
    expect(leaders).toHaveLength(1);
    const first = leaders[0]!;
    expect(first.lease.term).toBe(1);
    expect(await all[0]!.lease.holder()).toEqual({ holder: first.id, term: 1, expired: false });
    // The leader stops renewing (dead). It stops believing it leads once its lease ran out…
    first.lease.stop();
    const died = Date.now();
    await eventually(() => !first.lease.isLeader, leaseMs + 200, "old leader stepping down");
    // …and another takes over within lease + one renewal period.
    await eventually(() => all.some((c) => c !== first && c.lease.isLeader), 3000, "a new leader");
    expect(Date.now() - died).toBeLessThan(leaseMs + leaseMs / 4 + 400);
    const second = all.find((c) => c.lease.isLeader)!;
    expect(second.lease.term).toBe(2);
    expect(second.events).toEqual(["acquired 2"]);
    expect(all.filter((c) => c.lease.isLeader)).toHaveLength(1);
    // The old leader coming back finds the lease taken and learns it lost.
    expect(await first.lease.tryAcquire()).toBe(false);
    expect(first.events).toEqual(["acquired 1", "lost"]);
  });

  it("hands over at once on release", async () => {
    const [a, b] = await candidates(2, 5000);
    expect(await a!.lease.tryAcquire()).toBe(true);
    expect(await b!.lease.tryAcquire()).toBe(false);
    expect(await a!.lease.tryAcquire()).toBe(true);
    expect(a!.lease.term).toBe(1);
    await a!.lease.release();
    expect(a!.lease.isLeader).toBe(false);
    expect(await b!.lease.tryAcquire()).toBe(true);
    expect(b!.lease.term).toBe(2);
  });

  it("refuses a renewal period not shorter than the lease", async () => {
    const coordination = await cluster.open();
    expect(() => openLeaderLease(coordination, { leaseMs: 100, renewMs: 100 })).toThrow(
      "leader.renewMs: must be shorter than leader.leaseMs",
    );
  });
});
