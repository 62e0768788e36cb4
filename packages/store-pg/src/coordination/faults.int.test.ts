import { expect, it } from "vitest";
import { describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import { TcpProxy } from "../tcp-proxy";
import { type ClusterEvent, openClusterEventLog } from "./event-log";
import { openLeaderLease } from "./leader-lease";
import { openMembership } from "./membership";
import { openClusterRunLanes } from "./run-lanes";
import { eventually, useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

await describeWithPg("cluster coordination: an instance cut off from the database", () => {
  it("does not let an instance frozen inside a publish hold the event lock for ever", async () => {
    const frozen = await cluster.open({ idleInTransactionTimeoutMs: 300 });
    const other = await cluster.open();
    const log = await openClusterEventLog(other);
    cluster.cleanup(() => log.stop());
    // The frozen instance took the publish lock, then stopped (its process paused mid-transaction).
    let locked!: () => void;
    const hasLock = new Promise<void>((resolve) => {
      locked = resolve;
    });
    const stuck = frozen.db
      .transaction("a publish that freezes", async (client) => {
        await client.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", [
          0x5357_4245,
          `${frozen.schema}.events`,
        ]);
        locked();
        await new Promise((resolve) => setTimeout(resolve, 1500));
      })
      .catch((error: unknown) => error);
    await hasLock;
    const started = Date.now();
    await log.publish("audit.appended", { index: 0, kind: "x" } as never);
    // The server ended the idle transaction (and its lock) after 300 ms, not after the 1.5 s pause.
    expect(Date.now() - started).toBeLessThan(1200);
    expect(await stuck).toMatchObject({ code: "UNAVAILABLE" });
  });

  it("fails UNAVAILABLE, steps down as leader, is swept, and catches up on the events when back", async () => {
    const target = new URL(TEST_PG_URL);
    const proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
    cluster.cleanup(() => proxy.stop());
    const leaseMs = 500;
    // Instance a reaches the database through the proxy; b directly.
    const a = await cluster.open({
      instanceId: "gw-a",
      url: proxy.urlFor(TEST_PG_URL),
      connectTimeoutMs: 1000,
    });
    const b = await cluster.open({ instanceId: "gw-b" });
    const [aMember, bMember] = [openMembership(a, { leaseMs }), openMembership(b, { leaseMs })];
    await aMember.renew();
    await bMember.renew();
    bMember.start();
    cluster.cleanup(() => bMember.stop());
    const [aLeader, bLeader] = [openLeaderLease(a, { leaseMs }), openLeaderLease(b, { leaseMs })];
    const aEvents = await openClusterEventLog(a, { pollMs: 100, reconnectMs: 100, onError: () => undefined });
    const bEvents = await openClusterEventLog(b);
    cluster.cleanup(async () => {
      aLeader.stop();
      bLeader.stop();
      await aEvents.stop();
      await bEvents.stop();
    });
    const seen: ClusterEvent[] = [];
    aEvents.subscribe({ accepts: () => true, deliver: (event) => seen.push(event) });
    expect(await aLeader.tryAcquire()).toBe(true);
    await openClusterRunLanes(b).enqueue("lane", "r1", { agentId: "w" });
    expect(await openClusterRunLanes(a).claimNext(["w"])).toMatchObject({ runId: "r1" });

    await proxy.stop();
    const outage = Date.now();
    await expect(aMember.renew()).rejects.toMatchObject({ code: "UNAVAILABLE", retryable: true });
    await expect(aEvents.publish("audit.appended", { index: 0, kind: "x" } as never)).rejects.toMatchObject({
      code: "UNAVAILABLE",
    });
    await expect(aLeader.tryAcquire()).rejects.toMatchObject({ code: "UNAVAILABLE" });
    // a stops acting as leader once its lease ran out on its own clock; b takes over after that.
    await eventually(() => !aLeader.isLeader, leaseMs + 200, "a stepping down");
    await eventually(() => bLeader.tryAcquire(), 2000, "b leading");
    expect(Date.now() - outage).toBeLessThan(leaseMs + 1000);
    const swept = await bMember.sweep();
    expect(swept.lostInstances).toEqual(["gw-a"]);
    expect(swept.requeued.map((run) => run.runId)).toEqual(["r1"]);
    const published = await Promise.all(
      [1, 2, 3].map((n) => bEvents.publish("audit.appended", { index: n, kind: `during-${n}` } as never)),
    );

    await proxy.start();
    await eventually(() => seen.length === 3, 5000, "a catching up");
    expect(seen.map((event) => event.seq)).toEqual(published);
    expect(await aMember.renew()).toEqual({ lost: true });
    expect(await aLeader.tryAcquire()).toBe(false);
  });
});
