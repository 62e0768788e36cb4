import { sampleMessage, sampleSession } from "@switchboard/core/testing";
import { expect, it } from "vitest";
import { adminQuery, describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import { openPostgresStore } from "../pg-store";
import { nodeAuditHmac, openClusterAuditLog } from "./audit-chains";
import { useClusterSchema } from "./test-helpers";

/**
 * A taint rise in cluster mode: the audit record (this instance's chain), the transcript's `taint`
 * entry and the session row commit in one transaction — a fault at any step leaves none of them.
 */
const cluster = useClusterSchema();
const key = new Uint8Array(32).fill(9);

async function setUp() {
  const coordination = await cluster.open({ instanceId: "gw-a" });
  const store = await openPostgresStore({ url: TEST_PG_URL, schema: cluster.schema });
  cluster.cleanup(() => store.close());
  const audit = await openClusterAuditLog(coordination, key, { hmac: nodeAuditHmac });
  const row = sampleSession({ key: "agent:main:rising" });
  await store.sessions.put(row);
  await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
  await store.transcripts.append(row.sessionId, [sampleMessage("before")]);
  const rise = {
    row: { ...row, taint: "CONFIDENTIAL" as const, updatedAt: row.updatedAt + 1 },
    entry: {
      type: "taint" as const,
      label: "CONFIDENTIAL" as const,
      taint: { from: "PUBLIC" as const, to: "CONFIDENTIAL" as const, reason: "read", source: "test" },
    },
  };
  const entry = { kind: "taint", at: Date.now(), sessionKey: row.key, data: { to: "CONFIDENTIAL" } };
  const sql = (text: string) => adminQuery(text.replaceAll("$schema", `"${cluster.schema}"`));
  const chainLength = async () =>
    Number(
      (
        await adminQuery<{ n: string }>(
          `SELECT count(*) AS n FROM "${cluster.schema}".audit_chain_records WHERE chain_id = $1`,
          [audit.chainId],
        )
      ).rows[0]!.n,
    );
  return { store, audit, row, rise, entry, sql, chainLength };
}

await describeWithPg("cluster taint rise", () => {
  it("commits the audit record, the transcript entry and the row together", async () => {
    const { store, audit, row, rise, entry, chainLength } = await setUp();
    const { record, result } = await audit.commitTaintRise(entry, rise);
    expect(record).toMatchObject({ chainId: audit.chainId, index: 1, kind: "taint" });
    expect(result.entry).toMatchObject({ type: "taint", seq: 2 });
    expect((await store.sessions.get(row.key))?.taint).toBe("CONFIDENTIAL");
    expect(await store.transcripts.lastSeq(row.sessionId)).toBe(2);
    expect(await chainLength()).toBe(2);
    expect(await audit.verify()).toMatchObject({ ok: true });
  });

  for (const [step, table] of [
    ["the transcript entry", "transcript_entries"],
    ["the session row", "sessions"],
  ] as const) {
    it(`leaves nothing when writing ${step} fails inside the transaction, and the chain goes on`, async () => {
      const { store, audit, row, rise, entry, sql, chainLength } = await setUp();
      await sql(`CREATE FUNCTION $schema.refuse() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$`);
      await sql(`CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON $schema.${table}
        FOR EACH ROW EXECUTE FUNCTION $schema.refuse()`);
      await expect(audit.commitTaintRise(entry, rise)).rejects.toThrow();
      expect((await store.sessions.get(row.key))?.taint).toBe("PUBLIC");
      await sql(`DROP TRIGGER refuse ON $schema.${table}`);
      expect(await store.transcripts.lastSeq(row.sessionId)).toBe(1);
      expect(await chainLength()).toBe(1);
      // The chain continues from what the database holds: the next rise takes index 1.
      const { record } = await audit.commitTaintRise(entry, rise);
      expect(record.index).toBe(1);
      expect(await audit.verify()).toMatchObject({ ok: true });
    });
  }

  it("leaves nothing when the connection is terminated inside the transaction", async () => {
    const { store, audit, row, rise, entry, sql, chainLength } = await setUp();
    // The session write waits on a lock held here; the transaction's backend is then terminated.
    const blocker = await import("pg").then(
      ({ default: pg }) => new pg.Client({ connectionString: TEST_PG_URL }),
    );
    await blocker.connect();
    try {
      await blocker.query("BEGIN");
      await blocker.query(`SELECT 1 FROM "${cluster.schema}".sessions WHERE key = $1 FOR UPDATE`, [row.key]);
      const rising = audit.commitTaintRise(entry, rise);
      const failed = expect(rising).rejects.toThrow();
      for (;;) {
        const waiting = await sql(
          `SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity
           WHERE wait_event_type = 'Lock' AND query LIKE '%sessions%' AND pid <> pg_backend_pid()`,
        );
        if ((waiting as { rowCount: number }).rowCount > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await failed;
      await blocker.query("ROLLBACK");
    } finally {
      await blocker.end();
    }
    expect((await store.sessions.get(row.key))?.taint).toBe("PUBLIC");
    expect(await store.transcripts.lastSeq(row.sessionId)).toBe(1);
    expect(await chainLength()).toBe(1);
    expect((await audit.commitTaintRise(entry, rise)).record.index).toBe(1);
  });
});
