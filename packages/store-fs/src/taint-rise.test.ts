import type { AuditRecord, SessionEntry, TaintRise } from "@switchboard/core";
import { sampleAuditRecords, sampleMessage, sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { recordingLogger, tempDir } from "../test/helpers";
import { type FileStore, openFileStore } from "./file-store";
import { setFaultHook } from "./fs-io";
import type { FileMetaStore } from "./meta-store";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  setFaultHook(undefined);
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function open(dir?: string): Promise<{ store: FileStore; dir: string }> {
  let root = dir;
  if (root === undefined) {
    const temp = await tempDir();
    cleanups.push(temp.cleanup);
    root = temp.dir;
  }
  const store = await openFileStore({ dataDir: root, fsyncMode: "none" });
  cleanups.push(() => store.close());
  return { store, dir: root };
}

/** A session with a transcript holding one message. */
async function session(store: FileStore): Promise<SessionEntry> {
  const row = sampleSession({ key: `agent:main:t-${crypto.randomUUID().slice(0, 8)}` });
  await store.sessions.put(row);
  await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
  await store.transcripts.append(row.sessionId, [sampleMessage("hello")]);
  return row;
}

function riseOf(row: SessionEntry, audit: AuditRecord): TaintRise {
  return {
    row: { ...row, taint: "CONFIDENTIAL", updatedAt: row.updatedAt + 1 },
    entry: {
      type: "taint",
      id: crypto.randomUUID(),
      label: "CONFIDENTIAL",
      taint: { from: "PUBLIC", to: "CONFIDENTIAL", reason: "test", source: "unit" },
    },
    audit: { ...audit, kind: "taint", sessionKey: row.key },
  };
}

const intents = (store: FileStore) => (store.meta as FileMetaStore).withPrefix("store:taint-rise:");

describe("commitTaintRise in the file store", () => {
  it("keeps the chain order: records appended while a rise's intent is written wait behind it", async () => {
    const { store } = await open();
    const row = await session(store);
    const records = sampleAuditRecords(0, 4);
    await store.audit.append([records[0]!]);
    const rise = store.commitTaintRise(riseOf(row, records[1]!));
    const after = store.audit.append(records.slice(2));
    await Promise.all([rise, after]);
    expect((await store.audit.read()).map((record) => record.index)).toEqual([0, 1, 2, 3]);
    expect((await store.audit.read({ after: 0, limit: 1 }))[0]?.kind).toBe("taint");
    expect(intents(store)).toEqual([]);
  });

  it("refuses a rise on a missing transcript; the log goes on from where it was", async () => {
    const { store } = await open();
    const row = await session(store);
    const records = sampleAuditRecords(0, 3);
    await store.audit.append([records[0]!]);
    const missing = { ...row, sessionId: crypto.randomUUID() };
    await expect(store.commitTaintRise(riseOf(missing, records[1]!))).rejects.toMatchObject({
      code: "NOT_FOUND",
    });
    expect(await store.audit.count()).toBe(1);
    expect(intents(store)).toEqual([]);
    await store.commitTaintRise(riseOf(row, records[1]!));
    await store.audit.append([records[2]!]);
    expect(await store.audit.count()).toBe(3);
  });

  it("leaves nothing behind when the intent cannot be written (disk full)", async () => {
    const { store } = await open();
    const row = await session(store);
    const records = sampleAuditRecords(0, 2);
    await store.audit.append([records[0]!]);
    setFaultHook((op, filePath) => (op === "write" && filePath.includes("/meta/") ? "ENOSPC" : undefined));
    await expect(store.commitTaintRise(riseOf(row, records[1]!))).rejects.toMatchObject({
      code: "UNAVAILABLE",
    });
    setFaultHook(undefined);
    expect((await store.sessions.get(row.key))?.taint).toBe("PUBLIC");
    expect(await store.transcripts.lastSeq(row.sessionId)).toBe(1);
    expect(await store.audit.count()).toBe(1);
    await store.commitTaintRise(riseOf(row, records[1]!));
    expect((await store.sessions.get(row.key))?.taint).toBe("CONFIDENTIAL");
  });

  it("finishes at open a rise whose intent and audit record were durable, and drops one that could not follow the log", async () => {
    const { store, dir } = await open();
    const finished = await session(store);
    const dropped = await session(store);
    const records = sampleAuditRecords(0, 5);
    await store.audit.append(records.slice(0, 2));
    // What a crash leaves after step 1: intents durable, nothing else of the rises written.
    const meta = store.meta as FileMetaStore;
    const next = riseOf(finished, records[2]!);
    const gap = riseOf(dropped, records[4]!);
    for (const [rise, afterSeq] of [
      [next, 1],
      [gap, 1],
    ] as const) {
      const name = `store:taint-rise:${String(rise.audit.index).padStart(15, "0")}`;
      await meta.setInternal(name, JSON.stringify({ ...rise, entry: { ...rise.entry, ts: 5 }, afterSeq }));
    }
    await store.close();
    const { logger, lines } = recordingLogger();
    const reopened = await openFileStore({ dataDir: dir, fsyncMode: "none", logger });
    cleanups.push(() => reopened.close());
    expect((await reopened.stats()).taintRisesFinished).toBe(1);
    expect((await reopened.sessions.get(finished.key))?.taint).toBe("CONFIDENTIAL");
    const { entries } = await reopened.transcripts.read(finished.sessionId, { limit: 10 });
    expect(entries.map((entry) => entry.id)).toContain(next.entry.id);
    expect(await reopened.audit.last()).toEqual(next.audit);
    expect((await reopened.sessions.get(dropped.key))?.taint).toBe("PUBLIC");
    expect(await reopened.transcripts.lastSeq(dropped.sessionId)).toBe(1);
    expect(intents(reopened)).toEqual([]);
    expect(lines.some((line) => line.level === "warn" && /dropped a taint rise/.test(line.message))).toBe(
      true,
    );
    // Finishing is idempotent: a rise whose parts all made it is only forgotten.
    await reopened.close();
    const again = await openFileStore({ dataDir: dir, fsyncMode: "none" });
    cleanups.push(() => again.close());
    expect(await again.transcripts.lastSeq(finished.sessionId)).toBe(2);
    expect((await again.stats()).taintRisesFinished).toBe(0);
  });
});
