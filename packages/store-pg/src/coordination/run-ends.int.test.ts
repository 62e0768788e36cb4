import type { RunRecord } from "@switchboard/core";
import { sampleRun } from "@switchboard/core/testing";
import { expect, it } from "vitest";
import { describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import { openPostgresStore } from "../pg-store";
import { openClusterRunEnds } from "./run-ends";
import { openClusterRunLanes } from "./run-lanes";
import { useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

async function instance(name: string, leaseMs = 5000) {
  const { coordination, membership } = await cluster.member(name, leaseMs);
  return {
    coordination,
    membership,
    lanes: openClusterRunLanes(coordination),
    ends: openClusterRunEnds(coordination),
  };
}

const ended = (run: RunRecord, status: "ok" | "error", text: string): RunRecord => ({
  ...run,
  status,
  endedAt: Date.now(),
  ...(status === "ok" ? { reply: text } : { error: text }),
});

await describeWithPg("cluster run ends (fencing)", () => {
  it("drops the late result of an instance declared lost: over the error, and over the new holder's run", async () => {
    const a = await instance("gw-a", 300);
    const b = await instance("gw-b", 5000);
    const store = await openPostgresStore({ url: TEST_PG_URL, schema: cluster.schema });
    cluster.cleanup(() => store.close());
    const lane = "agent:main:main|main";
    const first = sampleRun({ status: "running", startedAt: Date.now() });
    const second = sampleRun({ status: "running", startedAt: Date.now() });
    await store.runs.put(first);
    await store.runs.put(second);
    expect(await a.lanes.claim(lane, first.runId, "main")).toBe(true);
    expect(await a.lanes.claim("agent:main:other|main", second.runId, "main")).toBe(true);

    // A is cut off (no renewals) past its lease; B's sweep frees its claims and requeues its runs.
    await new Promise((resolve) => setTimeout(resolve, 400));
    const swept = await b.membership.sweep();
    expect(swept.lostInstances).toEqual(["gw-a"]);
    // The first run ends `error` elsewhere; B adopts the second and runs it.
    await store.runs.put(ended({ ...first, status: "running" }, "error", "gateway instance gw-a was lost"));
    await b.lanes.release(lane, first.runId);
    const adopted = await b.lanes.claimNext(["main"]);
    expect(adopted?.runId).toBe(second.runId);
    // The claim brings the run's record as stored (beside the store's tables, no read after it).
    expect(adopted?.record).toEqual(await store.runs.get(second.runId));

    // A's worker results arrive once A reaches the database again: neither is written.
    expect(await a.ends.write(ended(first, "ok", "late"))).toBe(false);
    expect(await a.ends.write(ended(second, "ok", "late"))).toBe(false);
    expect(await store.runs.get(first.runId)).toMatchObject({ status: "error" });
    // (Put back to queued by the sweep; B's dispatch would start it.)
    expect(await store.runs.get(second.runId)).toMatchObject({ status: "queued" });
    // The holder's end is written, once.
    expect(await b.ends.write(ended(second, "ok", "on time"))).toBe(true);
    expect(await store.runs.get(second.runId)).toMatchObject({ status: "ok", reply: "on time" });
    expect(await b.ends.write(ended(second, "error", "again"))).toBe(false);
  });

  it("puts a lost instance's runs back to queued with their requeue, and never an ended one", async () => {
    const a = await instance("gw-a", 300);
    const b = await instance("gw-b", 5000);
    const store = await openPostgresStore({ url: TEST_PG_URL, schema: cluster.schema });
    cluster.cleanup(() => store.close());
    const running = sampleRun({ status: "running", startedAt: Date.now() });
    const done = sampleRun({ status: "running", startedAt: Date.now(), sessionKey: "agent:main:done" });
    await store.runs.put(running);
    await store.runs.put(done);
    expect(await a.lanes.claim("agent:main:main|main", running.runId, "main")).toBe(true);
    expect(await a.lanes.claim("agent:main:done|main", done.runId, "main")).toBe(true);
    // One of them ended just before A was declared lost (its claim not released yet).
    await store.runs.put(ended(done, "ok", "finished"));
    await new Promise((resolve) => setTimeout(resolve, 400));
    const swept = await b.membership.sweep();
    expect(swept.requeued.map((run) => run.runId).sort()).toEqual([running.runId, done.runId].sort());
    // Queued as the sweep commits (before, the leader wrote it afterwards, over whatever an adopter
    // had written meanwhile); the ended run keeps its end.
    expect(await store.runs.get(running.runId)).toMatchObject({ status: "queued" });
    expect(await store.runs.get(done.runId)).toMatchObject({ status: "ok", reply: "finished" });
  });

  it("writes the end of a run never claimed (timed out in a local queue) unless it is in the cluster's queue", async () => {
    const a = await instance("gw-a");
    const store = await openPostgresStore({ url: TEST_PG_URL, schema: cluster.schema });
    cluster.cleanup(() => store.close());
    const local = sampleRun();
    const handedOff = sampleRun({ sessionKey: "agent:main:queued" });
    await store.runs.put(local);
    await store.runs.put(handedOff);
    await a.lanes.enqueue("agent:main:queued|main", handedOff.runId, { agentId: "main" });
    expect(await a.ends.write({ ...local, status: "timeout", endedAt: Date.now() })).toBe(true);
    expect(await a.ends.write({ ...handedOff, status: "timeout", endedAt: Date.now() })).toBe(false);
    expect(await store.runs.get(local.runId)).toMatchObject({ status: "timeout" });
    expect(await store.runs.get(handedOff.runId)).toMatchObject({ status: "queued" });
  });
});
