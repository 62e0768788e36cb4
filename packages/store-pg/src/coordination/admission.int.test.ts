import type { RunRecord } from "@switchboard/core";
import { expect, it } from "vitest";
import { describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import { openPostgresStore } from "../pg-store";
import { openClusterCallBudget } from "./call-budget";
import { openClusterChildSlots } from "./child-slots";
import { openMembership } from "./membership";
import { useClusterSchema } from "./test-helpers";

/**
 * The cluster's admission steps (gateway: cluster-limits.ts): a send's or spawn's count is taken
 * together with its slot, so instances deciding at the same moment see each other.
 */
const cluster = useClusterSchema();

async function member(name: string) {
  const coordination = await cluster.open({ instanceId: name });
  const membership = openMembership(coordination, { leaseMs: 5000 });
  cluster.cleanup(() => membership.stop());
  await membership.renew();
  return coordination;
}

function childRun(requesterKey: string, childKey: string, status: RunRecord["status"]): RunRecord {
  return {
    runId: `run-${childKey}`,
    sessionKey: childKey,
    sessionId: `sid-${childKey}`,
    agentId: "main",
    lane: "subagent",
    status,
    createdAt: Date.now(),
    origin: "spawn",
    message: "task",
    attempts: 0,
    spawn: {
      requesterKey,
      childKey,
      childSessionId: `sid-${childKey}`,
      task: "task",
      cleanup: "keep",
      announce: { status: "pending", attempts: 0, idempotencyKey: `announce:${childKey}` },
    },
  };
}

await describeWithPg("cluster admission", () => {
  it("reserves budget slots with distinct counts across instances; a refused call given back costs nothing", async () => {
    const [a, b] = await Promise.all([cluster.open(), cluster.open()]);
    const budgets = [openClusterCallBudget(a), openClusterCallBudget(b)];
    const reserved = await Promise.all(
      Array.from({ length: 16 }, (_, n) => budgets[n % 2]!.reserve("agent:main:main", "send")),
    );
    // Each call saw the ones before it: a limit of 5 lets exactly the five with used < 5 pass.
    expect(reserved.map((slot) => slot.used).sort((x, y) => x - y)).toEqual(
      Array.from({ length: 16 }, (_, n) => n),
    );
    await Promise.all(reserved.filter((slot) => slot.used >= 5).map((slot) => slot.release()));
    expect(await budgets[1]!.used("agent:main:main", "send")).toBe(5);
    // Given back once, however often asked.
    await reserved.find((slot) => slot.used === 7)!.release();
    expect(await budgets[0]!.used("agent:main:main", "send")).toBe(5);
    expect(await budgets[0]!.used("agent:main:main", "spawn")).toBe(0);
  });

  it("counts a requester's children (stored runs not ended, and slots taken) across instances, each once", async () => {
    const a = await member("gw-a");
    const b = await member("gw-b");
    const store = await openPostgresStore({ url: TEST_PG_URL, schema: cluster.schema });
    cluster.cleanup(() => store.close());
    const slots = [openClusterChildSlots(a), openClusterChildSlots(b)];
    const requester = "agent:main:main";
    const taken = await Promise.all(
      Array.from({ length: 6 }, (_, n) => slots[n % 2]!.take(requester, `child-${n}`)),
    );
    expect(taken.map((slot) => slot.active).sort()).toEqual([0, 1, 2, 3, 4, 5]);
    // Refused spawns give their slots back.
    await Promise.all(taken.slice(3).map((slot) => slot.settle()));
    // child-0's run is stored before its slot is settled: counted once, not twice.
    await store.runs.put(childRun(requester, "child-0", "queued"));
    expect((await slots[0]!.take(requester, "child-x")).active).toBe(3);
    await taken[0]!.settle();
    const next = await slots[1]!.take(requester, "child-y");
    expect(next.active).toBe(4); // child-0 stored, child-1, child-2, child-x pending
    // An ended child no longer counts; other requesters are apart.
    await store.runs.put({ ...childRun(requester, "child-0", "ok"), endedAt: Date.now() });
    await next.settle();
    expect((await slots[0]!.take(requester, "child-z")).active).toBe(3);
    expect((await slots[0]!.take("agent:other:main", "child-o")).active).toBe(0);
  });

  it("forgets the child slots of an instance that is gone", async () => {
    const a = await member("gw-a");
    const b = await member("gw-b");
    const store = await openPostgresStore({ url: TEST_PG_URL, schema: cluster.schema });
    cluster.cleanup(() => store.close());
    await openClusterChildSlots(a).take("agent:main:main", "child-a");
    expect((await openClusterChildSlots(b).take("agent:main:main", "child-b")).active).toBe(1);
    await openMembership(a, { leaseMs: 5000 }).leave();
    expect((await openClusterChildSlots(b).take("agent:main:main", "child-c")).active).toBe(1);
  });
});
