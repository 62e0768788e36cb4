import { randomUUID } from "node:crypto";
import { sampleAuditRecords, sampleMessage, sampleRun, sampleSession } from "@switchboard/core/testing";
import { afterEach, expect, it } from "vitest";
import { describeWithPg, dropSchema, TEST_PG_URL, testSchemaName } from "../test/pg-harness";
import { openPostgresStore, type PostgresStore } from "./pg-store";

let store: PostgresStore | undefined;
let schema: string | undefined;
afterEach(async () => {
  await store?.close();
  if (schema) await dropSchema(schema);
  store = undefined;
  schema = undefined;
});

const open = async () => {
  schema = testSchemaName();
  store = await openPostgresStore({ url: TEST_PG_URL, schema, pool: { max: 8 } });
  return store;
};

const text = (entry: { message?: { content: { type: string; text?: string }[] } }) =>
  entry.message?.content[0]?.text ?? "";

// Callers start writes without waiting for the previous one (the audit service hands records over in
// chain order, the event bus raises its seq reservation): one instance applies them in call order,
// even though its pool has several connections.
await describeWithPg("PostgreSQL store: one instance's writes in call order", () => {
  it("appends audit records started back to back, in order, in few statements", async () => {
    const store = await open();
    const records = sampleAuditRecords(0, 40);
    await Promise.all(records.map((record) => store.audit.append([record])));
    expect(await store.audit.read()).toEqual(records);
    // A bad batch in the middle fails alone; the ones after it that still follow the log go in.
    const more = sampleAuditRecords(40, 3);
    const outcomes = await Promise.allSettled([
      store.audit.append([more[0]!]),
      store.audit.append([{ ...more[1]!, hash: "bad" }]),
      store.audit.append([more[1]!]),
      store.audit.append([more[2]!]),
    ]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual([
      "fulfilled",
      "rejected",
      "fulfilled",
      "fulfilled",
    ]);
    expect(await store.audit.count()).toBe(43);
  });

  it("orders a taint rise among back-to-back audit appends and transcript appends", async () => {
    const store = await open();
    const rows = [sampleSession(), sampleSession()];
    for (const row of rows) {
      await store.sessions.put(row);
      await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
    }
    const records = sampleAuditRecords(0, 6);
    const rise = (index: number, row = rows[0]!) => ({
      row: { ...row, taint: "CONFIDENTIAL" as const },
      entry: {
        type: "taint" as const,
        label: "CONFIDENTIAL" as const,
        taint: { from: "PUBLIC" as const, to: "CONFIDENTIAL" as const, reason: "read", source: "test" },
      },
      audit: records[index]!,
    });
    const [, risen, , appended, otherRise] = await Promise.all([
      store.audit.append([records[0]!]),
      store.commitTaintRise(rise(1)),
      store.audit.append([records[2]!]),
      store.transcripts.append(rows[0]!.sessionId, [sampleMessage("after the rise")]),
      store.commitTaintRise(rise(3, rows[1]!)),
      store.audit.append(records.slice(4)),
    ]);
    expect(risen.entry.seq).toBe(1);
    expect(appended[0]!.seq).toBe(2);
    expect(otherRise.entry.seq).toBe(1);
    expect(await store.audit.read()).toEqual(records);
    expect((await store.sessions.getVersioned(rows[1]!.key))?.version).toBe(otherRise.version);
  });

  it("lets one of two instances' rises with the same audit index win, and leaves nothing of the other", async () => {
    const first = await open();
    const second = await openPostgresStore({ url: TEST_PG_URL, schema: schema!, pool: { max: 2 } });
    try {
      const rows = [sampleSession(), sampleSession()];
      for (const row of rows) {
        await first.sessions.put(row);
        await first.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
      }
      const record = sampleAuditRecords(0, 1)[0]!;
      const rise = (row: (typeof rows)[number]) => ({
        row: { ...row, taint: "RESTRICTED" as const },
        entry: {
          type: "taint" as const,
          label: "RESTRICTED" as const,
          taint: { from: "PUBLIC" as const, to: "RESTRICTED" as const, reason: "read", source: "test" },
        },
        audit: record,
      });
      const outcomes = await Promise.allSettled([
        first.commitTaintRise(rise(rows[0]!)),
        second.commitTaintRise(rise(rows[1]!)),
      ]);
      const lost = outcomes.findIndex((outcome) => outcome.status === "rejected");
      expect(outcomes.filter((outcome) => outcome.status === "fulfilled")).toHaveLength(1);
      expect((outcomes[lost] as PromiseRejectedResult).reason).toMatchObject({ code: "CONFLICT" });
      const loser = rows[lost]!;
      expect((await first.sessions.get(loser.key))?.taint).toBe("PUBLIC");
      expect(await first.transcripts.lastSeq(loser.sessionId)).toBe(0);
      expect(await first.audit.count()).toBe(1);
    } finally {
      await second.close();
    }
  });

  it("finishes writes already started when closed, and refuses later ones", async () => {
    const first = await open();
    const sessionId = randomUUID();
    await first.transcripts.create({ sessionId, key: "agent:main:closing", createdAt: 1 });
    const started = Array.from({ length: 20 }, (_, i) =>
      first.transcripts.append(sessionId, [sampleMessage(`m${i}`)]),
    );
    const audit = sampleAuditRecords(0, 5).map((record) => first.audit.append([record]));
    const meta = first.meta.set("eventSeq", "7");
    await first.close();
    await Promise.all([...started, ...audit, meta]);
    await expect(first.meta.set("late", "x")).rejects.toMatchObject({ code: "UNAVAILABLE" });
    store = await openPostgresStore({ url: TEST_PG_URL, schema: schema!, pool: { max: 2 } });
    expect(await store.transcripts.lastSeq(sessionId)).toBe(20);
    expect(await store.audit.count()).toBe(5);
    expect(await store.meta.get("eventSeq")).toBe("7");
  });

  it("keeps the last value of a meta name written back to back", async () => {
    const store = await open();
    await Promise.all(Array.from({ length: 50 }, (_, i) => store.meta.set("eventSeq", String(i))));
    expect(await store.meta.get("eventSeq")).toBe("49");
  });

  it("gives back-to-back appends to one transcript their seqs in call order", async () => {
    const store = await open();
    const sessionId = randomUUID();
    await store.transcripts.create({ sessionId, key: "agent:main:order", createdAt: 1 });
    const appended = await Promise.all(
      Array.from({ length: 30 }, (_, i) => store.transcripts.append(sessionId, [sampleMessage(`m${i}`)])),
    );
    expect(appended.map((entries) => entries[0]!.seq)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    const read = await store.transcripts.read(sessionId, { limit: 100 });
    expect(read.entries.map(text)).toEqual(Array.from({ length: 30 }, (_, i) => `m${i}`));
  });

  it("keeps the last of back-to-back puts of one session and of one run", async () => {
    const store = await open();
    const row = sampleSession();
    await Promise.all(Array.from({ length: 20 }, (_, i) => store.sessions.put({ ...row, label: `v${i}` })));
    expect((await store.sessions.get(row.key))?.label).toBe("v19");
    const run = sampleRun();
    await Promise.all(Array.from({ length: 20 }, (_, i) => store.runs.put({ ...run, attempts: i })));
    expect((await store.runs.get(run.runId))?.attempts).toBe(19);
  });
});
