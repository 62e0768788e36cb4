import { createServer } from "node:net";
import { expect, it } from "vitest";
import { adminQuery, describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import { openCoordination } from "./context";
import { openMembership } from "./membership";
import { openClusterRunLanes } from "./run-lanes";
import { COORDINATION_MIGRATIONS, COORDINATION_VERSION } from "./schema";
import { useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

await describeWithPg("cluster coordination: opening", () => {
  it("creates the coordination tables once when several instances open a new schema at once", async () => {
    const opened = await Promise.all([1, 2, 3].map((n) => cluster.open({ instanceId: `gw-${n}` })));
    expect(opened.map((coordination) => coordination.instanceId)).toEqual(["gw-1", "gw-2", "gw-3"]);
    const versions = await adminQuery(
      `SELECT version FROM "${cluster.schema}".coordination_migrations ORDER BY version`,
    );
    expect(versions.rows).toEqual(COORDINATION_MIGRATIONS.map(({ version }) => ({ version })));
  });

  it("refuses coordination tables newer than this build, naming both versions", async () => {
    await cluster.open();
    await adminQuery(
      `INSERT INTO "${cluster.schema}".coordination_migrations (version, name) VALUES ($1, 'future')`,
      [COORDINATION_VERSION + 1],
    );
    await expect(cluster.open()).rejects.toMatchObject({
      code: "UNAVAILABLE",
      message: expect.stringContaining(
        `at version ${COORDINATION_VERSION + 1}, newer than this Switchboard supports (${COORDINATION_VERSION})`,
      ),
    });
  });

  it("plans the lane claim once per connection, not on every call", async () => {
    // One connection, so the prepared statements seen below are the ones the claims ran on.
    const coordination = await cluster.open({ pool: { max: 1 } });
    const lanes = openClusterRunLanes(coordination);
    for (let call = 0; call < 12; call++) expect(await lanes.claimNext(["main"])).toBeUndefined();
    const prepared = await coordination.db.read<{ generic_plans: string; custom_plans: string }>(
      "reading prepared statements",
      "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%WITH head AS%'",
    );
    expect(prepared.rows).toHaveLength(1);
    // The first call runs unnamed; the named statement is planned once and reused from then on.
    expect(Number(prepared.rows[0]!.custom_plans)).toBe(0);
    expect(Number(prepared.rows[0]!.generic_plans)).toBe(11);
  });

  it("steps over the dead queue entries of earlier runs when it searches the run queue", async () => {
    // One connection: its statistics are flushed on demand below, before they are read.
    const coordination = await cluster.open({ instanceId: "gw-a", pool: { max: 1 } });
    const membership = openMembership(coordination, { leaseMs: 5000, renewMs: 1250 });
    cluster.cleanup(() => membership.stop());
    await membership.renew();
    const lanes = openClusterRunLanes(coordination);
    const RUNS = 300;
    for (let n = 0; n < RUNS; n++) {
      await lanes.enqueue(`agent:w:s${n}|main`, `run-${n}`, { agentId: "w" });
      const claim = await lanes.claimNext(["w"]);
      expect(claim?.runId).toBe(`run-${n}`);
      await lanes.release(claim!.laneKey, claim!.runId);
    }
    // No vacuum ran: the agent index still holds an entry for each of those runs.
    const entriesRead = async () => {
      await coordination.db.read("flushing statistics", "SELECT pg_stat_force_next_flush()");
      const found = await adminQuery(
        `SELECT idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = $1 AND indexrelname = 'run_queue_agent'`,
        [cluster.schema],
      );
      return Number(found.rows[0]!.idx_tup_read);
    };
    const before = await entriesRead();
    const SEARCHES = 20;
    for (let call = 0; call < SEARCHES; call++) expect(await lanes.claimNext(["w"])).toBeUndefined();
    // A bitmap index scan (the planner's choice here) marks none of them dead and reads all of
    // them on every search; a plain index scan marks them once.
    expect((await entriesRead()) - before).toBeLessThan(RUNS);
  });

  it("answers UNAVAILABLE naming the server when it cannot be reached, and names bad options", async () => {
    const port = await closedPort();
    const url = `postgres://postgres:s3cret@127.0.0.1:${port}/test`;
    const error = await openCoordination({ url, schema: "sbclu_unreachable", connectTimeoutMs: 2000 }).catch(
      (e) => e,
    );
    expect(error).toMatchObject({ code: "UNAVAILABLE", retryable: true });
    expect(error.message).toContain(`127.0.0.1:${port}/test`);
    expect(error.message).not.toContain("s3cret");
    await expect(openCoordination({ url: TEST_PG_URL, schema: "Bad-Name" })).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message: expect.stringContaining("cluster.schema: must be a schema name"),
    });
    await expect(openCoordination({ url: "mysql://x" })).rejects.toThrow(
      "cluster.url: must start with postgres://",
    );
  });
});
