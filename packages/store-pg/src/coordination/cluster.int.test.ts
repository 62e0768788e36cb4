import { expect, it } from "vitest";
import { describeWithPg, TEST_PG_URL, testSchemaName } from "../../test/pg-harness";
import { dropTestSchema } from "../testing";
import { type Cluster, type ClusterOptions, openCluster } from "./cluster";
import type { LostRun } from "./membership";
import { eventually } from "./test-helpers";

const fast = { leaseMs: 400, leaderLeaseMs: 300, sweepMs: 50, anchorMs: 100 };

await describeWithPg("cluster: components opened together, with the leader's timers", () => {
  it("frees a killed instance's runs through the surviving leader, and anchors the audit chains", async () => {
    const schema = testSchemaName("sbclu");
    const open: Cluster[] = [];
    try {
      const requeued: LostRun[] = [];
      const failed: LostRun[] = [];
      // What the gateway does: end each failed run (recorded here), then acknowledge it.
      const handler =
        (self: () => Cluster): ClusterOptions["onLostRuns"] =>
        async (runs) => {
          requeued.push(...runs.requeued);
          failed.push(...runs.failed);
          for (const run of runs.failed) await self().lanes.acknowledgeFailure(run.runId);
        };
      const a: Cluster = await openCluster({
        url: TEST_PG_URL,
        schema,
        instanceId: "gw-a",
        ...fast,
        onLostRuns: handler(() => a),
      });
      open.push(a);
      await eventually(() => a.leader.isLeader, 2000, "a leading");
      const b: Cluster = await openCluster({
        url: TEST_PG_URL,
        schema,
        instanceId: "gw-b",
        ...fast,
        onLostRuns: handler(() => b),
      });
      open.push(b);
      expect(await b.secrets.operatorToken()).toBe(await a.secrets.operatorToken());
      await a.audit.append({ kind: "delivery", at: Date.now(), data: { n: 1 } });
      await b.audit.append({ kind: "delivery", at: Date.now(), data: { n: 2 } });
      await eventually(
        async () => Object.keys(await b.audit.anchored()).length === 2,
        2000,
        "an anchor of both chains",
      );

      await a.lanes.enqueue("lane", "r1", { agentId: "w" });
      expect(await a.lanes.claimNext(["w"])).toMatchObject({ runId: "r1" });
      // kill -9 of the leader holding a run.
      await a.close({ graceful: false });
      const killed = Date.now();
      await eventually(() => requeued.length > 0, 5000, "r1 requeued by b");
      expect(b.leader.isLeader).toBe(true);
      // Lease of a, then b's leadership, then a sweep: far inside the spec's 10 s.
      expect(Date.now() - killed).toBeLessThan(fast.leaseMs + fast.leaderLeaseMs + 1000);
      expect(requeued.map((run) => `${run.runId}@${run.lostInstance}`)).toEqual(["r1@gw-a"]);
      expect(await b.lanes.claimNext(["w"])).toMatchObject({ runId: "r1", attempts: 1 });

      // A third instance joins; b is killed while holding the reassigned run: the run fails.
      const c: Cluster = await openCluster({
        url: TEST_PG_URL,
        schema,
        instanceId: "gw-c",
        ...fast,
        onLostRuns: handler(() => c),
      });
      open.push(c);
      await b.close({ graceful: false });
      await eventually(() => failed.length > 0, 5000, "r1 failed by c");
      expect(failed[0]).toMatchObject({ runId: "r1", lostInstance: "gw-b" });
      expect(failed[0]!.reason).toContain("gw-b");
      await eventually(async () => (await c.lanes.failures()).length === 0, 2000, "failure acknowledged");
      expect(await c.audit.verify()).toMatchObject({ ok: true, chains: 3 });
      // A graceful close hands the leadership over at once.
      await c.close();
      expect(c.leader.isLeader).toBe(false);
    } finally {
      for (const cluster of open) await cluster.close({ graceful: false }).catch(() => undefined);
      await dropTestSchema(schema);
    }
  }, 20_000);
});
