import { sampleRun, sampleSession } from "@switchboard/core/testing";
import { expect, it } from "vitest";
import { describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import { openPostgresStore } from "../pg-store";
import { createRunOnce, openClusterRunLanes } from "./run-lanes";
import { eventually, useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

async function instance(name: string, leaseMs = 5000) {
  const { coordination, membership } = await cluster.member(name, leaseMs);
  return { coordination, membership, lanes: openClusterRunLanes(coordination) };
}

await describeWithPg("cluster run lanes", () => {
  it("lets two competing instances run every queued run once, FIFO per lane, one at a time per lane", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const lanes = ["agent:w:one|main", "agent:w:two|main", "agent:w:three|main"];
    const queued: Record<string, string[]> = {};
    for (const lane of lanes) {
      queued[lane] = [];
      for (let n = 0; n < 6; n++) {
        const runId = `${lane}#${n}`;
        await (n % 2 ? a : b).lanes.enqueue(lane, runId, { agentId: "w" });
        queued[lane]!.push(runId);
      }
    }
    const active = new Set<string>();
    const ran: Record<string, string[]> = {};
    const byInstance: Record<string, number> = { "gw-a": 0, "gw-b": 0 };
    const work = async (who: Awaited<ReturnType<typeof instance>>) => {
      for (;;) {
        const claim = await who.lanes.claimNext(["w"]);
        if (!claim) {
          if ((await who.lanes.laneKeys()).length === 0) return;
          await new Promise((resolve) => setTimeout(resolve, 2));
          continue;
        }
        if (active.has(claim.laneKey)) throw new Error(`two runs active in ${claim.laneKey}`);
        active.add(claim.laneKey);
        ran[claim.laneKey] = [...(ran[claim.laneKey] ?? []), claim.runId];
        byInstance[who.coordination.instanceId]! += 1;
        expect(await who.lanes.holder(claim.laneKey)).toEqual({
          runId: claim.runId,
          instanceId: who.coordination.instanceId,
        });
        await new Promise((resolve) => setTimeout(resolve, 3));
        active.delete(claim.laneKey);
        await who.lanes.release(claim.laneKey, claim.runId);
      }
    };
    await Promise.all([work(a), work(a), work(b), work(b)]);
    for (const lane of lanes) expect(ran[lane]).toEqual(queued[lane]);
    expect(byInstance["gw-a"]! + byInstance["gw-b"]!).toBe(18);
    expect(byInstance["gw-a"]).toBeGreaterThan(0);
    expect(byInstance["gw-b"]).toBeGreaterThan(0);
  });

  it("claims a run that did not queue only when no other run of its lane waits (unlessQueued)", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const lane = "agent:w:order|main";
    await a.lanes.enqueue(lane, "queued-first", { agentId: "w" });
    // Accepted on B after the queued one: it may not overtake it, and nothing is changed.
    expect(await b.lanes.claim(lane, "accepted-later", "w", { unlessQueued: true })).toBe(false);
    expect(await b.lanes.holder(lane)).toBeUndefined();
    expect(await b.lanes.next(lane)).toBe("queued-first");
    // Without the option the lane is only refused while held (a run re-dispatched where it runs).
    const first = await b.lanes.claimNext(["w"]);
    expect(first?.runId).toBe("queued-first");
    expect(await a.lanes.claim(lane, "accepted-later", "w", { unlessQueued: true })).toBe(false);
    await b.lanes.release(lane, "queued-first");
    // The lane free and its queue empty: claimed.
    expect(await a.lanes.claim(lane, "accepted-later", "w", { unlessQueued: true })).toBe(true);
    expect(await b.lanes.holder(lane)).toEqual({ runId: "accepted-later", instanceId: "gw-a" });
  });

  it("hands a run holding its lane back to the head of the lane's queue in one step", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const lane = "agent:w:back|main";
    expect(await a.lanes.claim(lane, "running", "w")).toBe(true);
    // A run reassigned once already (its claim counts it): the count goes back with it.
    const { db, q } = a.coordination;
    await db.query("test", `UPDATE ${q("run_claims")} SET attempts = 1 WHERE run_id = 'running'`);
    await b.lanes.enqueue(lane, "later", { agentId: "w" });
    await a.lanes.handBack(lane, "running", "w", "sb_test_hand_back");
    expect(await b.lanes.holder(lane)).toBeUndefined();
    // Ahead of the run queued behind it, for any instance, with its reassignment count.
    expect(await b.lanes.claimNext(["w"])).toMatchObject({ runId: "running", attempts: 1 });
    await b.lanes.release(lane, "running");
    expect((await b.lanes.claimNext(["w"]))?.runId).toBe("later");
  });

  it("mirrors the RunLanes operations across instances", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    await a.lanes.enqueue("agent:w:x|main", "r1", { agentId: "w" });
    await a.lanes.enqueue("agent:w:x|main", "r2", { agentId: "w" });
    await b.lanes.enqueue("agent:w:x|main", "r0", { agentId: "w", front: true });
    await b.lanes.enqueue("agent:v:y|main", "v1", { agentId: "v" });
    expect(await b.lanes.next("agent:w:x|main")).toBe("r0");
    expect(await b.lanes.laneKeys()).toEqual(["agent:v:y|main", "agent:w:x|main"]);
    expect(await b.lanes.queuedUnder("agent:w:")).toBe(3);
    // A worker of agent v only sees v's lanes.
    expect(await a.lanes.claimNext(["v"])).toMatchObject({ runId: "v1", agentId: "v", attempts: 0 });
    expect(await a.lanes.claimNext(["v"])).toBeUndefined();
    // Claiming a specific run: the lane is a's; b's try is refused.
    expect(await a.lanes.claim("agent:w:x|main", "r0", "w")).toBe(true);
    expect(await b.lanes.claim("agent:w:x|main", "r1", "w")).toBe(false);
    expect(await b.lanes.claimNext(["w"])).toBeUndefined();
    expect(await b.lanes.holder("agent:w:x|main")).toEqual({ runId: "r0", instanceId: "gw-a" });
    expect(await b.lanes.holderUnder("agent:w:")).toBe("r0");
    expect(await b.lanes.next("agent:w:x|main")).toBe("r1");
    // Releasing a queued run takes it out of the queue; the holder's release frees the lane.
    expect(await b.lanes.release("agent:w:x|main", "r1")).toBe(false);
    expect(await a.lanes.release("agent:w:x|main", "r0")).toBe(false);
    expect(await b.lanes.holder("agent:w:x|main")).toBeUndefined();
    expect(await b.lanes.claimNext(["w"])).toMatchObject({ runId: "r2" });
    await b.lanes.enqueue("agent:w:z|main", "z1", { agentId: "w" });
    await b.lanes.skip("agent:w:z|main");
    expect(await b.lanes.next("agent:w:z|main")).toBeUndefined();
    expect(await b.lanes.queuedUnder("agent:w:")).toBe(0);
  });

  it("refuses claims from an instance without a lease", async () => {
    const coordination = await cluster.open({ instanceId: "never-registered" });
    const lanes = openClusterRunLanes(coordination);
    await lanes.enqueue("l", "r", { agentId: "w" });
    await expect(lanes.claim("l", "r", "w")).rejects.toMatchObject({
      code: "UNAVAILABLE",
      message: expect.stringContaining("never-registered"),
    });
    expect(await lanes.claimNext(["w"])).toBeUndefined();
    expect(await lanes.next("l")).toBe("r");
  });

  it("reassigns a lost instance's run once, at the head of its lane, then fails it naming the instance", async () => {
    const leaseMs = 400;
    const a = await instance("gw-a", leaseMs);
    const b = await instance("gw-b", leaseMs);
    const c = await instance("gw-c", leaseMs);
    for (const who of [a, b, c]) who.membership.start();
    await a.lanes.enqueue("lane", "first", { agentId: "w" });
    await a.lanes.enqueue("lane", "second", { agentId: "w" });
    expect(await a.lanes.claimNext(["w"])).toMatchObject({ runId: "first" });
    // a dies: no more renewals. Another instance's sweep puts the run back within lease + sweep.
    a.membership.stop();
    const died = Date.now();
    let requeued: string[] = [];
    await eventually(
      async () => {
        const swept = await c.membership.sweep();
        requeued.push(...swept.requeued.map((run) => `${run.runId}@${run.lostInstance}`));
        return requeued.length > 0;
      },
      3000,
      "a's run requeued",
    );
    expect(Date.now() - died).toBeLessThan(leaseMs + 1000);
    expect(requeued).toEqual(["first@gw-a"]);
    expect(await c.membership.alive()).toEqual(["gw-b", "gw-c"]);
    // Ahead of the run that was waiting, one attempt more.
    expect(await b.lanes.claimNext(["w"])).toEqual({
      runId: "first",
      laneKey: "lane",
      agentId: "w",
      attempts: 1,
    });
    // b dies too: this time the run fails, and the failure waits in the outbox.
    b.membership.stop();
    requeued = [];
    let failed: { runId: string; reason?: string }[] = [];
    await eventually(
      async () => {
        failed = (await c.membership.sweep()).failed;
        return failed.length > 0;
      },
      3000,
      "b's run failed",
    );
    expect(failed).toEqual([expect.objectContaining({ runId: "first", lostInstance: "gw-b" })]);
    expect(failed[0]!.reason).toMatch(/gateway instance gw-b holding the run was lost .* reassigned 1 time/);
    expect((await c.lanes.failures()).map((run) => run.runId)).toEqual(["first"]);
    expect(await c.lanes.holder("lane")).toBeUndefined();
    expect(await c.lanes.claimNext(["w"])).toMatchObject({ runId: "second", attempts: 0 });
    await c.lanes.acknowledgeFailure("first");
    expect(await c.lanes.failures()).toEqual([]);
    // a comes back: told it was declared dead, registered again.
    expect(await a.membership.renew()).toEqual({ lost: true });
    expect(await a.membership.renew()).toEqual({ lost: false });
  });

  it("keeps a run's deadline on the database's clock from the queue to its claims and back, across a lost instance", async () => {
    const leaseMs = 400;
    const a = await instance("gw-a", leaseMs);
    const b = await instance("gw-b", leaseMs);
    for (const who of [a, b]) who.membership.start();
    const stored = async (table: "run_queue" | "run_claims") => {
      const found = await a.coordination.db.read<{ at: string }>(
        "reading a deadline",
        `SELECT deadline_at::text AS at FROM ${a.coordination.q(table)} WHERE run_id = 'timed'`,
      );
      return found.rows[0]?.at;
    };
    // Queued with 60 s left: the deadline is the database's now() plus that, set once.
    await a.lanes.enqueue("lane", "timed", { agentId: "w", deadlineInMs: 60_000 });
    await a.lanes.enqueue("other", "untimed", { agentId: "w" });
    const deadline = await stored("run_queue");
    expect(deadline).toBeDefined();
    await a.lanes.enqueue("lane", "timed", { agentId: "w", deadlineInMs: 1_000 });
    expect(await stored("run_queue")).toBe(deadline);
    // A claim carries it, and answers the time left as the database counts it.
    const claim = await a.lanes.claimNext(["w"], { runId: "timed" });
    expect(claim?.deadlineInMs).toBeGreaterThan(55_000);
    expect(claim?.deadlineInMs).toBeLessThanOrEqual(60_000);
    expect(await stored("run_claims")).toBe(deadline);
    // Handed back: the claim's deadline, not the one the instance offers.
    await a.lanes.handBack("lane", "timed", "w", "unheard", { deadlineInMs: 5 });
    expect(await stored("run_queue")).toBe(deadline);
    expect(await b.lanes.claimNext(["w"], { runId: "timed" })).toMatchObject({ runId: "timed" });
    // b is lost: the sweep puts the run back in the queue with its deadline.
    b.membership.stop();
    await eventually(async () => (await a.membership.sweep()).requeued.length > 0, 3000, "b's run requeued");
    expect(await stored("run_queue")).toBe(deadline);
    // No timeout: no deadline (infinity), and no time left answered.
    const untimed = await a.lanes.claimNext(["w"], { runId: "untimed" });
    expect(untimed).toMatchObject({ runId: "untimed" });
    expect(untimed).not.toHaveProperty("deadlineInMs");
  });

  it("frees what a previous process with the same instance id held when it registers again", async () => {
    const before = await instance("gw-fixed");
    await before.lanes.enqueue("lane", "r1", { agentId: "w" });
    expect(await before.lanes.claimNext(["w"])).toMatchObject({ runId: "r1" });
    await before.membership.renew();
    // kill -9 and a restart within the lease: the new process has the same id, none of the state.
    const after = await instance("gw-fixed");
    expect(await after.lanes.holder("lane")).toBeUndefined();
    expect(await after.lanes.claimNext(["w"])).toEqual({
      runId: "r1",
      laneKey: "lane",
      agentId: "w",
      attempts: 1,
    });
    expect(await after.membership.alive()).toEqual(["gw-fixed"]);
  });

  it("stores a claimed queued run `running` in the claim's own statement when asked to start it", async () => {
    const { coordination, lanes } = await instance("gw-start");
    const store = await openPostgresStore({
      url: TEST_PG_URL,
      schema: coordination.schema,
      pool: { max: 2 },
    });
    cluster.cleanup(() => store.close());
    const fresh = sampleRun({ runId: "run-fresh", sessionKey: "agent:w:one", agentId: "w" });
    // Reassigned after a lost instance: counted again, its first start kept.
    const again = sampleRun({
      runId: "run-again",
      sessionKey: "agent:w:two",
      agentId: "w",
      attempts: 1,
      startedAt: 1000,
    });
    const ended = sampleRun({
      runId: "run-ended",
      sessionKey: "agent:w:three",
      agentId: "w",
      status: "ok",
      attempts: 1,
      endedAt: 1_700_000_000_500,
    });
    for (const run of [fresh, again, ended]) {
      await store.runs.put(run);
      await lanes.enqueue(`${run.sessionKey}|main`, run.runId, { agentId: "w" });
    }
    // Its session's row comes with the claim (a session deleted since: none).
    const session = sampleSession({ key: "agent:w:one", agentId: "w", sessionId: fresh.sessionId });
    await store.sessions.put(session);
    const claims = new Map<string, Awaited<ReturnType<typeof lanes.claimNext>>>();
    for (let n = 0; n < 3; n++) {
      const claim = await lanes.claimNext(["w"], { startAt: 7777 });
      claims.set(claim!.runId, claim);
    }
    const started = { ...fresh, status: "running", startedAt: 7777, attempts: 1 };
    expect(claims.get("run-fresh")).toMatchObject({ started: true, record: started, session });
    expect(claims.get("run-again")!.session).toBeUndefined();
    expect(await store.runs.get("run-fresh")).toEqual(started);
    expect(claims.get("run-again")).toMatchObject({
      started: true,
      record: { startedAt: 1000, attempts: 2 },
    });
    // An ended run is claimed as it is (the claimer releases it) and left unchanged.
    expect(claims.get("run-ended")!.started).toBeUndefined();
    expect(claims.get("run-ended")!.record).toEqual(ended);
    expect(await store.runs.get("run-ended")).toEqual(ended);
    // The status column the registry lists by moves with the record.
    const running = await store.runs.list({ statuses: ["running"] });
    expect(running.map((run) => run.runId).sort()).toEqual(["run-again", "run-fresh"]);
    // Without `startAt` the claim writes no record.
    const plain = sampleRun({ runId: "run-plain", sessionKey: "agent:w:four", agentId: "w" });
    await store.runs.put(plain);
    await lanes.enqueue("agent:w:four|main", plain.runId, { agentId: "w" });
    expect(await lanes.claimNext(["w"])).toMatchObject({ runId: "run-plain", record: plain });
    expect(await store.runs.get("run-plain")).toEqual(plain);
  });

  it("names the queued run in its wake-up, and claims a named run only if it heads its free lane", async () => {
    const { coordination, lanes } = await instance("gw-named");
    const listener = await coordination.connect("test listener");
    cluster.cleanup(() => listener.end());
    const heard: string[] = [];
    listener.on("notification", (message) => heard.push(message.payload ?? ""));
    await listener.query("LISTEN sb_test_runs");
    await lanes.enqueue("agent:w:a|main", "a-1", { agentId: "w", notify: "sb_test_runs" });
    await lanes.enqueue("agent:w:a|main", "a-2", { agentId: "w", notify: "sb_test_runs" });
    await lanes.enqueue("agent:w:b|main", "b-1", { agentId: "w", notify: "sb_test_runs" });
    await eventually(() => heard.length === 3, 5000, "three wake-ups");
    expect(heard).toEqual(["a-1", "a-2", "b-1"]);
    // Behind a-1 in its lane: not claimed by name (the lane's order holds).
    expect(await lanes.claimNext(["w"], { runId: "a-2" })).toBeUndefined();
    // Another agent's run is not claimed for this one's free worker.
    expect(await lanes.claimNext(["x"], { runId: "b-1" })).toBeUndefined();
    expect(await lanes.claimNext(["w"], { runId: "b-1" })).toMatchObject({
      runId: "b-1",
      laneKey: "agent:w:b|main",
    });
    expect(await lanes.claimNext(["w"], { runId: "a-1" })).toMatchObject({ runId: "a-1" });
    // a-2 heads its lane now, but the lane is held by a-1 until it ends.
    expect(await lanes.claimNext(["w"], { runId: "a-2" })).toBeUndefined();
    await lanes.release("agent:w:a|main", "a-1");
    expect(await lanes.claimNext(["w"], { runId: "a-2" })).toMatchObject({ runId: "a-2" });
  });

  it("creates a run once per idempotency key across two store instances", async () => {
    const coordination = await cluster.open();
    const stores = await Promise.all(
      [1, 2].map(() =>
        openPostgresStore({ url: TEST_PG_URL, schema: coordination.schema, pool: { max: 2 } }),
      ),
    );
    cluster.cleanup(() => Promise.all(stores.map((store) => store.close())));
    const base = sampleRun({ idempotencyKey: "key-1" });
    const results = await Promise.all(
      stores.map((store, n) => createRunOnce(store.runs, { ...base, runId: `run-${n}` })),
    );
    expect(results.filter((result) => result.created)).toHaveLength(1);
    expect(results[0]!.record.runId).toBe(results[1]!.record.runId);
    const again = await createRunOnce(stores[1]!.runs, { ...base, runId: "run-late" });
    expect(again).toEqual({ record: results[0]!.record, created: false });
  });
});
