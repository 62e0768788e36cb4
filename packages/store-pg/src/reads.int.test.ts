import { randomUUID } from "node:crypto";
import { createMemoryStore, type TranscriptEntry, type TranscriptEntryInput } from "@switchboard/core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { describeWithPg, dropSchema, TEST_PG_URL, testSchemaName } from "../test/pg-harness";
import { openPostgresStore, type PostgresStore } from "./pg-store";

const schema = testSchemaName();
let store: PostgresStore;
const memory = createMemoryStore();
const sessionId = randomUUID();

/** 60 entries: mostly small, some of 20-70 kB, of every role, and taint/event entries between. */
function inputs(): TranscriptEntryInput[] {
  const roles = ["user", "assistant", "toolCall", "toolResult"] as const;
  return Array.from({ length: 60 }, (_, i) => {
    const base = { id: `e${i}`, ts: 1_000 + i, label: "INTERNAL" as const };
    if (i % 13 === 7) return { ...base, type: "event", event: { name: "reset", data: { i } } };
    if (i % 17 === 3)
      return { ...base, type: "taint", taint: { from: "PUBLIC", to: "INTERNAL", reason: "r", source: "s" } };
    const big = i % 9 === 4 ? "x".repeat(20_000 + i * 800) : "";
    return {
      ...base,
      type: "message",
      message: { role: roles[i % 4]!, content: [{ type: "text", text: `m${i} ${big}` }] },
    };
  });
}

beforeAll(async () => {
  store = await openPostgresStore({ url: TEST_PG_URL, schema, pool: { max: 2 } });
  for (const target of [store, memory]) {
    await target.transcripts.create({ sessionId, key: "agent:main:reads", createdAt: 1 });
    const all = inputs();
    // Several appends, so entries come from more than one statement.
    for (let start = 0; start < all.length; start += 7)
      await target.transcripts.append(sessionId, all.slice(start, start + 7));
  }
});

afterAll(async () => {
  await store?.close();
  await dropSchema(schema);
});

const filters: Record<string, ((entry: TranscriptEntry) => boolean) | undefined> = {
  none: undefined,
  "messages without tool results": (entry) =>
    entry.type === "message" && entry.message?.role !== "toolResult",
  "user only": (entry) => entry.message?.role === "user",
  nothing: () => false,
};

await describeWithPg("PostgreSQL store: tail reads match core's memory store", () => {
  it("returns what the memory store returns for every combination of limit, before, maxBytes and filter", async () => {
    let compared = 0;
    for (const limit of [1, 3, 10, 100])
      for (const before of [undefined, 2, 9, 31, 61, 500])
        for (const maxBytes of [undefined, 1, 300, 5_000, 30_000, 65_536, 1_000_000])
          for (const [name, filter] of Object.entries(filters)) {
            const options = {
              limit,
              ...(before === undefined ? {} : { before }),
              ...(maxBytes === undefined ? {} : { maxBytes }),
              ...(filter === undefined ? {} : { filter }),
            };
            const expected = await memory.transcripts.read(sessionId, options);
            const actual = await store.transcripts.read(sessionId, options);
            expect(actual, `limit ${limit} before ${before} maxBytes ${maxBytes} filter ${name}`).toEqual(
              expected,
            );
            compared++;
          }
    expect(compared).toBe(4 * 6 * 7 * 4);
    // 672 reads one after another: seconds on a slow machine.
  }, 60_000);
});

await describeWithPg("PostgreSQL store: session reads under load", () => {
  it("answers many concurrent reads each with its own row, and a read after a write with the write", async () => {
    const keys = Array.from({ length: 40 }, (_, i) => `agent:main:concurrent:${i}`);
    for (const key of keys)
      await store.sessions.put({
        key,
        sessionId: randomUUID(),
        agentId: "main",
        createdAt: 1,
        updatedAt: 1,
        taint: "PUBLIC",
        clearance: "PUBLIC",
      });
    // Reads asked for together share statements; each still gets its own key's row (or none).
    const rows = await Promise.all(
      [...keys, "agent:main:concurrent:none", ...keys].map((key) => store.sessions.get(key)),
    );
    expect(rows.map((row) => row?.key)).toEqual([...keys, undefined, ...keys]);
    // Reads keep flowing while one key is rewritten: a read asked for once the write resolved sees it.
    const busy = Array.from({ length: 200 }, (_, i) => store.sessions.get(keys[i % keys.length]!));
    const row = (await store.sessions.get(keys[0]!))!;
    await store.sessions.put({ ...row, updatedAt: 2 });
    expect((await store.sessions.get(keys[0]!))?.updatedAt).toBe(2);
    await Promise.all(busy);
  });
});

await describeWithPg("PostgreSQL store: session writes under load", () => {
  it("commits concurrent writes of many rows, each with its own version", async () => {
    const rows = Array.from({ length: 30 }, (_, i) => ({
      key: `agent:main:grouped:${i}`,
      sessionId: randomUUID(),
      agentId: "main",
      createdAt: 1,
      updatedAt: 10 + i,
      taint: "PUBLIC" as const,
      clearance: "PUBLIC" as const,
    }));
    const versions = await Promise.all(rows.map((row) => store.sessions.put(row)));
    expect(new Set(versions).size).toBe(rows.length);
    for (const [i, row] of rows.entries()) {
      const stored = await store.sessions.getVersioned(row.key);
      expect(stored).toEqual({ row, version: versions[i] });
    }
  });
});

await describeWithPg("PostgreSQL store: a capped read finds its transcript in the same statement", () => {
  it("answers an empty transcript with nothing, and an unknown or archived one NOT_FOUND, as the memory store does", async () => {
    const empty = randomUUID();
    const archived = randomUUID();
    for (const target of [store, memory]) {
      await target.transcripts.create({ sessionId: empty, key: "agent:main:capped-empty", createdAt: 1 });
      await target.transcripts.create({ sessionId: archived, key: "agent:main:capped-gone", createdAt: 1 });
      await target.transcripts.append(archived, inputs().slice(0, 3));
      await target.transcripts.archive(archived, "reset");
    }
    // Without a filter, and with one (a run's history: its messages).
    for (const capped of [
      { limit: 20, maxBytes: 50_000 },
      { limit: 20, maxBytes: 50_000, filter: (entry: TranscriptEntry) => entry.type === "message" },
    ]) {
      const ours = await store.transcripts.read(empty, capped);
      expect(ours).toEqual(await memory.transcripts.read(empty, capped));
      expect(ours.entries).toEqual([]);
      for (const id of [randomUUID(), archived]) {
        await expect(store.transcripts.read(id, capped)).rejects.toMatchObject({ code: "NOT_FOUND" });
        await expect(memory.transcripts.read(id, capped)).rejects.toMatchObject({ code: "NOT_FOUND" });
      }
    }
  });
});

await describeWithPg("PostgreSQL store: transcript appends under load", () => {
  it("appends to many transcripts at once, each dense from 1, and one without a transcript fails alone", async () => {
    const ids = Array.from({ length: 20 }, () => randomUUID());
    for (const [i, id] of ids.entries())
      await store.transcripts.create({ sessionId: id, key: `agent:main:appends:${i}`, createdAt: 1 });
    const entry = (text: string): TranscriptEntryInput => ({
      type: "message",
      label: "PUBLIC",
      message: { role: "user", content: [{ type: "text", text }] },
    });
    const missing = randomUUID();
    const rounds = await Promise.all(
      [0, 1, 2].map(() =>
        Promise.allSettled(
          [...ids, missing].map((id, i) => store.transcripts.append(id, [entry(`a${i}`), entry(`b${i}`)])),
        ),
      ),
    );
    for (const results of rounds) {
      expect(results.at(-1)).toMatchObject({ status: "rejected", reason: { code: "NOT_FOUND" } });
      expect(results.slice(0, -1).every((result) => result.status === "fulfilled")).toBe(true);
    }
    for (const [i, id] of ids.entries()) {
      const read = await store.transcripts.read(id, { limit: 100 });
      expect(read.entries.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(read.entries.map((e) => (e.message!.content[0] as { text: string }).text)).toEqual(
        [0, 1, 2].flatMap(() => [`a${i}`, `b${i}`]),
      );
    }
  });
});
