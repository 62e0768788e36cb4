import { createAuditChain } from "@switchboard/core";
import pg from "pg";
import { expect, it } from "vitest";
import { adminQuery, describeWithPg, TEST_PG_URL } from "../../test/pg-harness";
import { type ClusterAuditLog, nodeAuditHmac, openClusterAuditLog } from "./audit-chains";
import { useClusterSchema } from "./test-helpers";

const cluster = useClusterSchema();
const key = new Uint8Array(32).fill(5);
// After each chain's opening record, so `tail` shows these.
const base = Date.now() + 60_000;

const entry = (n: number, who: string) => ({
  kind: "delivery",
  at: base + n,
  actor: who,
  data: { n, who },
});

/** Two instances appending at once, then an anchor: the ground every tampering case starts from. */
async function twoWriters(): Promise<{
  a: ClusterAuditLog;
  b: ClusterAuditLog;
  sql: (text: string, values?: unknown[]) => Promise<unknown>;
}> {
  const a = await openClusterAuditLog(await cluster.open({ instanceId: "gw-a" }), key, { pageSize: 5 });
  const b = await openClusterAuditLog(await cluster.open({ instanceId: "gw-b" }), key, { pageSize: 5 });
  await Promise.all(
    Array.from({ length: 12 }, (_, n) => [a.append(entry(n, "a")), b.append(entry(n, "b"))]).flat(),
  );
  await a.anchor();
  const sql = (text: string, values?: unknown[]) =>
    adminQuery(text.replaceAll("$schema", `"${cluster.schema}"`), values);
  return { a, b, sql };
}

await describeWithPg("cluster audit chains", () => {
  it("verifies every instance's records after concurrent appends and anchors", async () => {
    const { a, b } = await twoWriters();
    expect(a.chainId).not.toBe(b.chainId);
    const first = await a.append(entry(99, "a"));
    expect(first).toMatchObject({ chainId: a.chainId, index: 13, kind: "delivery" });
    // 12 entries + 1 chain record each, + 1 on a after the anchor.
    expect(await b.verify()).toEqual({ ok: true, entries: 27, chains: 2, anchors: 1 });
    await b.anchor();
    expect(await a.anchored()).toEqual({
      [a.chainId]: { index: 13, hash: first.hash },
      [b.chainId]: expect.objectContaining({ index: 12 }),
    });
    expect(await a.verify()).toMatchObject({ ok: true, anchors: 2 });
    // The newest three in the cluster-wide order (the order of writing, not of the entries' `at`).
    const tail = await b.tail(3);
    expect(tail.at(-1)!.data).toMatchObject({ who: "a", n: 99 });
    const all = await b.tail(1000, -1);
    expect(all).toHaveLength(27);
    expect(tail.map((record) => record.position)).toEqual(all.slice(-3).map((record) => record.position));
  });

  it("writes no anchor while no chain moved on, however often every instance anchors", async () => {
    const { a, b } = await twoWriters();
    for (let n = 0; n < 5; n++) await Promise.all([a.anchor(), b.anchor()]);
    expect(await a.verify()).toMatchObject({ ok: true, anchors: 1 });
    const last = await b.append(entry(50, "b"));
    await a.anchor();
    await b.anchor();
    expect(await a.verify()).toMatchObject({ ok: true, anchors: 2 });
    expect((await a.anchored())[b.chainId]).toEqual({ index: last.index, hash: last.hash });
  });

  it("anchors each chain's head without reading the records below it", async () => {
    // One connection: its statistics are flushed on demand below, before they are read.
    const coordination = await cluster.open({ instanceId: "gw-a", pool: { max: 1 } });
    const a = await openClusterAuditLog(coordination, key, { pageSize: 5 });
    const b = await openClusterAuditLog(await cluster.open({ instanceId: "gw-b" }), key, { pageSize: 5 });
    const RECORDS = 200;
    for (let n = 0; n < RECORDS; n += 50)
      await Promise.all(
        Array.from({ length: 50 }, (_, k) => [
          a.append(entry(n + k, "a")),
          b.append(entry(n + k, "b")),
        ]).flat(),
      );
    const rowsRead = async () => {
      await coordination.db.read("flushing statistics", "SELECT pg_stat_force_next_flush()");
      const found = await adminQuery(
        `SELECT t.seq_tup_read + coalesce(t.idx_tup_fetch, 0) + (SELECT sum(i.idx_tup_read) FROM pg_stat_user_indexes i WHERE i.relid = t.relid) AS n
         FROM pg_stat_user_tables t WHERE t.schemaname = $1 AND t.relname = 'audit_chain_records'`,
        [cluster.schema],
      );
      return Number(found.rows[0]!.n);
    };
    const before = await rowsRead();
    await a.anchor();
    expect((await rowsRead()) - before).toBeLessThan(20);
    const last = await b.append(entry(RECORDS, "b"));
    await a.anchor();
    expect(await b.anchored()).toEqual({
      [a.chainId]: expect.objectContaining({ index: RECORDS }),
      [b.chainId]: { index: last.index, hash: last.hash },
    });
    expect(await a.verify()).toMatchObject({ ok: true, entries: 2 * RECORDS + 3, chains: 2, anchors: 2 });
  });

  it("continues without a gap after a failed insert, and after one that was stored though its answer was lost", async () => {
    const { a, sql } = await twoWriters();
    await sql(
      `ALTER TABLE $schema.audit_chain_records ADD CONSTRAINT refuse_77 CHECK ((record->'data'->>'n') IS DISTINCT FROM '77')`,
    );
    await expect(a.append(entry(77, "a"))).rejects.toMatchObject({ code: "INTERNAL" });
    expect(await a.append(entry(78, "a"))).toMatchObject({ index: 13 });
    // The database holds a record the writer never heard back about (COMMIT arrived, the answer did not).
    const last = (await a.tail(1))[0]!;
    const lost = await createAuditChain({
      key,
      hmac: nodeAuditHmac,
      last: { index: last.index, hash: last.hash },
    }).next(entry(79, "a"));
    await sql(`INSERT INTO $schema.audit_chain_records (chain_id, idx, at, record) VALUES ($1, $2, $3, $4)`, [
      a.chainId,
      lost.index,
      lost.at,
      JSON.stringify(lost),
    ]);
    expect(await a.append(entry(80, "a"))).toMatchObject({ index: 15, prevHash: lost.hash });
    expect(await a.verify()).toMatchObject({ ok: true, entries: 29 });
  });

  it("stores records appended at once in few transactions; a refused one fails alone", async () => {
    const { a, sql } = await twoWriters();
    const before = (await a.tail(1))[0]!;
    const stored = await Promise.all(Array.from({ length: 40 }, (_, n) => a.append(entry(100 + n, "a"))));
    expect(stored.map((record) => record.index)).toEqual(
      Array.from({ length: 40 }, (_, n) => before.index + 1 + n),
    );
    const groups = (await sql(
      `SELECT count(DISTINCT xid)::int AS n FROM $schema.audit_chain_records WHERE chain_id = $1 AND idx > $2`,
      [a.chainId, before.index],
    )) as { rows: Array<{ n: number }> };
    expect(groups.rows[0]!.n).toBeLessThan(10);
    // Paged by position, 7 at a time: every record once, in order, across the groups' edges.
    const paged: number[] = [];
    for (let after = before.position!; ; ) {
      const page = await a.tail(7, after);
      if (page.length === 0) break;
      paged.push(...page.filter((record) => record.chainId === a.chainId).map((record) => record.index));
      after = page.at(-1)!.position!;
    }
    expect(paged).toEqual(stored.map((record) => record.index));

    await sql(
      `ALTER TABLE $schema.audit_chain_records ADD CONSTRAINT refuse_205 CHECK ((record->'data'->>'n') IS DISTINCT FROM '205')`,
    );
    const outcomes = await Promise.allSettled(
      Array.from({ length: 10 }, (_, n) => a.append(entry(200 + n, "a"))),
    );
    expect(outcomes.map((outcome) => outcome.status)).toEqual(
      Array.from({ length: 10 }, (_, n) => (n === 5 ? "rejected" : "fulfilled")),
    );
    const last = stored.at(-1)!.index;
    expect(
      outcomes.flatMap((outcome) => (outcome.status === "fulfilled" ? [outcome.value.index] : [])),
    ).toEqual(Array.from({ length: 9 }, (_, n) => last + 1 + n));
    expect(await a.verify()).toMatchObject({ ok: true });
  });

  it("does not store a group twice when its insert committed but the answer was lost", async () => {
    const coordination = await cluster.open({ instanceId: "gw-lost" });
    const log = await openClusterAuditLog(coordination, key);
    const query = coordination.db.query.bind(coordination.db);
    let lost = 0;
    coordination.db.query = (async (action: string, ...rest: unknown[]) => {
      const result = await (query as (...args: unknown[]) => Promise<unknown>)(action, ...rest);
      if (action === "appending audit records" && lost++ === 0)
        throw new Error("connection lost after COMMIT");
      return result;
    }) as typeof coordination.db.query;
    // Appended in one tick: the six go as one group, whose answer is lost.
    const stored = await Promise.all(Array.from({ length: 6 }, (_, n) => log.append(entry(300 + n, "lost"))));
    expect(lost).toBeGreaterThan(0);
    expect(stored.map((record) => record.index)).toEqual([1, 2, 3, 4, 5, 6]);
    const rows = (await adminQuery(
      `SELECT count(*)::int AS n FROM "${cluster.schema}".audit_chain_records WHERE chain_id = $1`,
      [log.chainId],
    )) as { rows: Array<{ n: number }> };
    // The chain's opening record and the six, each once.
    expect(rows.rows[0]!.n).toBe(7);
    expect(await log.verify()).toMatchObject({ ok: true });
  });

  it("detects an edited record, naming its chain and index", async () => {
    const { a, b, sql } = await twoWriters();
    await sql(
      `UPDATE $schema.audit_chain_records SET record = jsonb_set(record::jsonb, '{data,n}', '77')::json WHERE chain_id = $1 AND idx = 4`,
      [b.chainId],
    );
    expect(await a.verify()).toMatchObject({
      ok: false,
      chainId: b.chainId,
      firstBadIndex: 4,
      reason: expect.stringMatching(/hash does not match/),
    });
  });

  it("detects reordered records", async () => {
    const { a, sql } = await twoWriters();
    await sql(`UPDATE $schema.audit_chain_records SET idx = -idx WHERE chain_id = $1 AND idx IN (5, 6)`, [
      a.chainId,
    ]);
    await sql(
      `UPDATE $schema.audit_chain_records SET idx = CASE idx WHEN -5 THEN 6 ELSE 5 END WHERE chain_id = $1 AND idx IN (-5, -6)`,
      [a.chainId],
    );
    expect(await a.verify()).toMatchObject({ ok: false, chainId: a.chainId, firstBadIndex: 5 });
  });

  it("detects a removed tail of one chain, and a removed chain, against the anchor", async () => {
    const { a, b, sql } = await twoWriters();
    await sql(`DELETE FROM $schema.audit_chain_records WHERE chain_id = $1 AND idx >= 9`, [a.chainId]);
    expect(await b.verify()).toMatchObject({
      ok: false,
      chainId: a.chainId,
      firstBadIndex: 9,
      reason: expect.stringMatching(/records missing at the end/),
    });
    await sql(`DELETE FROM $schema.audit_chain_records WHERE chain_id = $1`, [a.chainId]);
    await sql(`DELETE FROM $schema.audit_chains WHERE chain_id = $1`, [a.chainId]);
    expect(await b.verify()).toMatchObject({ ok: false, chainId: a.chainId, firstBadIndex: 0 });
  });

  it("detects a chain's records moved under another chain id", async () => {
    const { a, b, sql } = await twoWriters();
    await b.anchor();
    // A whole chain renamed, anchors rewritten to match are impossible without the key; here the
    // anchors are removed too, so only the chain's own first record can tell.
    await sql(`DELETE FROM $schema.audit_anchors`);
    await sql(`UPDATE $schema.audit_chain_records SET chain_id = 'forged' WHERE chain_id = $1`, [a.chainId]);
    await sql(`UPDATE $schema.audit_chains SET chain_id = 'forged' WHERE chain_id = $1`, [a.chainId]);
    expect(await b.verify()).toMatchObject({
      ok: false,
      chainId: "forged",
      firstBadIndex: 0,
      reason: expect.stringMatching(/does not start with its own/),
    });
  });

  it("detects a removed or edited anchor", async () => {
    const { a, b, sql } = await twoWriters();
    // Each anchor after a record, or it would be skipped (no chain moved on).
    await b.append(entry(40, "b"));
    await b.anchor();
    await a.append(entry(41, "a"));
    await a.anchor();
    await sql(`DELETE FROM $schema.audit_anchors WHERE idx = 1`);
    expect(await a.verify()).toMatchObject({ ok: false, chainId: "anchors", firstBadIndex: 1 });
    await sql(`DELETE FROM $schema.audit_anchors WHERE idx = 2`);
    expect(await a.verify()).toMatchObject({ ok: true, anchors: 1 });
    await sql(
      `UPDATE $schema.audit_anchors SET record = jsonb_set(record::jsonb, '{at}', '1')::json WHERE idx = 0`,
    );
    expect(await a.verify()).toMatchObject({ ok: false, chainId: "anchors", firstBadIndex: 0 });
  });
});

await describeWithPg("cluster audit tail after a position", () => {
  it("follows every chain in one order; a record committed late below the last position is not skipped", async () => {
    const { a, b } = await twoWriters();
    // 26 records (12 + a chain record each, and the anchor is elsewhere): read in pages of 10.
    const seen: Array<{ chainId: string; index: number; position?: number }> = [];
    let after = -1;
    for (;;) {
      const page = await a.tail(10, after);
      if (page.length === 0) break;
      seen.push(...page);
      after = page.at(-1)!.position!;
    }
    expect(seen).toHaveLength(26);
    const positions = seen.map((record) => record.position!);
    expect(positions.every((position, i) => i === 0 || position > positions[i - 1]!)).toBe(true);
    expect(new Set(seen.map((record) => `${record.chainId}#${record.index}`)).size).toBe(26);
    // Without `after`: the newest, in the same order.
    expect((await b.tail(3)).map((record) => record.position)).toEqual(positions.slice(-3));

    // A writer whose transaction began before other instances' appends commits after them.
    const slow = new pg.Client({ connectionString: TEST_PG_URL });
    await slow.connect();
    try {
      await slow.query("BEGIN");
      await slow.query(
        `INSERT INTO "${cluster.schema}".audit_chain_records (chain_id, idx, at, record) VALUES ('slow', 0, 0, '{}')`,
      );
      await a.append(entry(50, "a"));
      await b.append(entry(50, "b"));
      // Held back while the older transaction runs: a reader must not move past it.
      expect(await a.tail(10, after)).toEqual([]);
      await slow.query("COMMIT");
    } finally {
      await slow.end();
    }
    const rest = await a.tail(10, after);
    expect(rest.map((record) => record.chainId)).toEqual(["slow", a.chainId, b.chainId]);
  });
});
