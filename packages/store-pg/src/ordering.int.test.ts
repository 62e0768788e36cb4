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
