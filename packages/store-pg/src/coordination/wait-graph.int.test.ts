import pg from "pg";
import { expect, it } from "vitest";
import { describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import { openClusterCallBudget } from "./call-budget";
import { useClusterSchema } from "./test-helpers";
import { openClusterWaitGraph } from "./wait-graph";

const cluster = useClusterSchema();

async function instance(name: string, leaseMs = 5000) {
  const { coordination, membership } = await cluster.member(name, leaseMs);
  return { coordination, membership, graph: openClusterWaitGraph(coordination) };
}

const held = async (outcome: Awaited<ReturnType<ReturnType<typeof openClusterWaitGraph>["tryWait"]>>) => {
  if (!outcome.release) throw new Error(`refused as cycle ${outcome.cycle.join(" -> ")}`);
  return outcome.release;
};

await describeWithPg("cluster wait graph", () => {
  it("refuses a cycle closed across instances, naming the chain, and forgets ended waits", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const xy = await held(await a.graph.tryWait("X", "Y"));
    expect(await b.graph.tryWait("Y", "X")).toEqual({ cycle: ["Y", "X", "Y"] });
    const yz = await held(await b.graph.tryWait("Y", "Z"));
    expect(await a.graph.cycleFor("Z", "X")).toEqual(["Z", "X", "Y", "Z"]);
    expect(await a.graph.tryWait("Z", "X")).toEqual({ cycle: ["Z", "X", "Y", "Z"] });
    expect(await a.graph.tryWait("X", "X")).toEqual({ cycle: ["X", "X"] });
    // Two waits on one edge: ending one keeps the other.
    const xy2 = await a.graph.wait("X", "Y");
    await xy();
    await xy();
    expect(await b.graph.cycleFor("Y", "X")).toEqual(["Y", "X", "Y"]);
    await xy2();
    expect(await b.graph.cycleFor("Y", "X")).toBeUndefined();
    expect(await a.graph.cycleFor("Z", "X")).toBeUndefined();
    await yz();
    // Other sessions' loops do not make the walk run forever.
    await a.graph.wait("P", "Q");
    await b.graph.wait("Q", "P");
    expect(await a.graph.cycleFor("X", "P")).toBeUndefined();
  });

  it("lets only one half of each cycle in when two instances race", async () => {
    const a = await instance("gw-a");
    const b = await instance("gw-b");
    const outcomes = await Promise.all(
      Array.from({ length: 15 }, (_, n) => [
        a.graph.tryWait(`p${n}`, `q${n}`),
        b.graph.tryWait(`q${n}`, `p${n}`),
      ]).flat(),
    );
    for (let n = 0; n < 15; n++) {
      const pair = [outcomes[2 * n]!, outcomes[2 * n + 1]!];
      expect(pair.filter((outcome) => outcome.release).length).toBe(1);
      expect(pair.filter((outcome) => outcome.cycle).length).toBe(1);
    }
  });

  it("records a wait with an asynchronous commit, in that transaction only", async () => {
    // The wait lock is cluster-wide and held until commit: a commit waiting for its WAL flush
    // would let one send's wait check through per fsync, however many instances there are.
    const a = await instance("gw-a");
    const client = new pg.Client({ connectionString: TEST_PG_URL });
    await client.connect();
    cluster.cleanup(() => client.end());
    const setting = async () =>
      (await client.query<{ value: string }>("SELECT current_setting('synchronous_commit') AS value"))
        .rows[0]!.value;
    expect(await setting()).toBe("on");
    await client.query("BEGIN");
    const { rows } = await client.query<{ wait_id: string | null }>(
      `SELECT wait_id FROM "${cluster.schema}".try_wait($1, $2, $3, $4, $5)`,
      ["X", "Y", "gw-a", 1, `${cluster.schema}.waits`],
    );
    expect(rows[0]!.wait_id).not.toBeNull();
    expect(await setting()).toBe("off");
    await client.query("COMMIT");
    // The connection's own writes after it are synchronous again, and the wait counts at once.
    expect(await setting()).toBe("on");
    expect(await a.graph.tryWait("Y", "X")).toEqual({ cycle: ["Y", "X", "Y"] });
  });

  it("drops a dead instance's waits when it is swept", async () => {
    const a = await instance("gw-a", 300);
    const b = await instance("gw-b", 300);
    b.membership.start();
    await a.graph.wait("X", "Y");
    expect(await b.graph.cycleFor("Y", "X")).toEqual(["Y", "X", "Y"]);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const swept = await b.membership.sweep();
    expect(swept).toMatchObject({ lostInstances: ["gw-a"], waitsRemoved: 1 });
    expect(await b.graph.cycleFor("Y", "X")).toBeUndefined();
    await expect(a.graph.wait("X", "Y")).rejects.toMatchObject({ code: "UNAVAILABLE" });
  });
});

await describeWithPg("cluster call budget", () => {
  it("counts a session's calls cluster-wide: of concurrent takes on two instances, exactly the limit pass", async () => {
    const [a, b] = await Promise.all([cluster.open(), cluster.open()]);
    const budgets = [
      openClusterCallBudget(a, { windowMs: 400 }),
      openClusterCallBudget(b, { windowMs: 400 }),
    ];
    const outcomes = await Promise.all(
      Array.from({ length: 16 }, (_, n) => budgets[n % 2]!.take("agent:main:main", "send", 5)),
    );
    expect(outcomes.filter((outcome) => outcome.allowed)).toHaveLength(5);
    expect(outcomes.filter((outcome) => !outcome.allowed).every((outcome) => outcome.used === 5)).toBe(true);
    expect(await budgets[1]!.used("agent:main:main", "send")).toBe(5);
    // Kinds and sessions are separate budgets.
    expect(await budgets[0]!.used("agent:main:main", "spawn")).toBe(0);
    await budgets[0]!.record("agent:other:main", "spawn");
    expect(await budgets[1]!.used("agent:other:main", "spawn")).toBe(1);
    // The window slides: old calls stop counting and are pruned.
    await new Promise((resolve) => setTimeout(resolve, 450));
    expect(await budgets[0]!.used("agent:main:main", "send")).toBe(0);
    expect(await budgets[0]!.take("agent:main:main", "send", 5)).toEqual({ allowed: true, used: 1 });
    expect(await budgets[1]!.prune()).toBe(1);
    await expect(budgets[0]!.take("k", "send", -1)).rejects.toThrow("limit: must be an integer >= 0");
  });
});
