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

describe("commitTaintRise when one of its writes fails", () => {
  it("a rise whose audit write alone fails leaves none of it, also after the chain goes on and a reopen", async () => {
    const { store, dir } = await open();
    const row = await session(store);
    const records = sampleAuditRecords(0, 3);
    await store.audit.append([records[0]!]);
    // An I/O error on the audit log only (a bad sector, a file made immutable).
    setFaultHook((op, filePath) => (op === "write" && filePath.includes("/audit/") ? "EIO" : undefined));
    const rise = riseOf(row, records[1]!);
    await expect(store.commitTaintRise(rise)).rejects.toMatchObject({ code: "UNAVAILABLE" });
    setFaultHook(undefined);
    // The rejection means none, at once and for good.
    expect((await store.sessions.get(row.key))?.taint).toBe("PUBLIC");
    expect(await store.transcripts.lastSeq(row.sessionId)).toBe(1);
    expect(intents(store)).toEqual([]);
    // The gateway resyncs its chain head from the store: the next record takes the same index.
    await store.audit.append([{ ...records[1]!, hash: "f".repeat(64), kind: "delivery" }]);
    await store.close();

    const { logger, lines } = recordingLogger();
    const reopened = await openFileStore({ dataDir: dir, fsyncMode: "none", logger });
    cleanups.push(() => reopened.close());
    expect((await reopened.sessions.get(row.key))?.taint).toBe("PUBLIC");
    const { entries } = await reopened.transcripts.read(row.sessionId, { limit: 10 });
    expect(entries.map((entry) => entry.type)).toEqual(["message"]);
    expect((await reopened.audit.read()).map((record) => record.kind)).not.toContain("taint");
    expect(lines.filter((line) => /taint rise/.test(line.message))).toEqual([]);
  });

  it("a rise whose audit write fails while its intent cannot be removed is dropped at open, not half-finished", async () => {
    const { store, dir } = await open();
    const row = await session(store);
    const records = sampleAuditRecords(0, 3);
    await store.audit.append([records[0]!]);
    // The audit write fails, and so does every meta write after the intent's (the intent stays).
    let metaWrites = 0;
    setFaultHook((op, filePath) => {
      if (op !== "write") return undefined;
      if (filePath.includes("/audit/")) return "EIO";
      if (filePath.includes("/meta/") && ++metaWrites > 1) return "EIO";
      return undefined;
    });
    const rise = riseOf(row, records[1]!);
    await expect(store.commitTaintRise(rise)).rejects.toMatchObject({ code: "UNAVAILABLE" });
    setFaultHook(undefined);
    expect(intents(store)).toHaveLength(1);
    await store.audit.append([{ ...records[1]!, hash: "f".repeat(64), kind: "delivery" }]);
    await store.close();

    const { logger, lines } = recordingLogger();
    const reopened = await openFileStore({ dataDir: dir, fsyncMode: "none", logger });
    cleanups.push(() => reopened.close());
    expect((await reopened.stats()).taintRisesFinished).toBe(0);
    expect((await reopened.sessions.get(row.key))?.taint).toBe("PUBLIC");
    expect(await reopened.transcripts.lastSeq(row.sessionId)).toBe(1);
    expect((await reopened.audit.read()).map((record) => record.kind)).not.toContain("taint");
    expect(intents(reopened)).toEqual([]);
    expect(
      lines.some(
        (line) =>
          line.level === "warn" &&
          /dropped a taint rise whose audit record was never written/.test(line.message),
      ),
    ).toBe(true);
  });

  it("a rise whose entry write fails after its audit record is durable is finished at the next open", async () => {
    const { store, dir } = await open();
    const row = await session(store);
    const records = sampleAuditRecords(0, 2);
    await store.audit.append([records[0]!]);
    // The audit record is written before the entry: an I/O error on the commit log (the entry's
    // durable write) comes after the record is durable.
    setFaultHook((op, filePath) => (op === "write" && filePath.includes("commit-log") ? "EIO" : undefined));
    const rise = riseOf(row, records[1]!);
    await expect(store.commitTaintRise(rise)).rejects.toMatchObject({ code: "UNAVAILABLE" });
    setFaultHook(undefined);
    // The audit record says the rise happened: the intent stays for the open to finish it.
    expect(await store.audit.last()).toEqual(rise.audit);
    expect(intents(store)).toHaveLength(1);
    await store.close();

    const reopened = await openFileStore({ dataDir: dir, fsyncMode: "none" });
    cleanups.push(() => reopened.close());
    expect((await reopened.stats()).taintRisesFinished).toBe(1);
    expect((await reopened.sessions.get(row.key))?.taint).toBe("CONFIDENTIAL");
    const { entries } = await reopened.transcripts.read(row.sessionId, { limit: 10 });
    expect(entries.map((entry) => entry.id)).toContain(rise.entry.id);
    expect(await reopened.audit.last()).toEqual(rise.audit);
    expect(intents(reopened)).toEqual([]);
  });

  it("an intent of the version that wrote all three at once, its entry written but its index taken, is logged as an error and the row follows the entry", async () => {
    const { store, dir } = await open();
    const row = await session(store);
    const records = sampleAuditRecords(0, 3);
    await store.audit.append([records[0]!]);
    const rise = riseOf(row, records[1]!);
    const ts = Date.now();
    // What that version left: intent and entry written, the audit record refused and its index
    // taken by the next record.
    const meta = store.meta as FileMetaStore;
    await meta.setInternal(
      "store:taint-rise:000000000000001",
      JSON.stringify({ ...rise, entry: { ...rise.entry, ts }, afterSeq: 1 }),
    );
    await store.transcripts.append(row.sessionId, [{ ...rise.entry, ts } as never]);
    await store.audit.append([{ ...records[1]!, hash: "f".repeat(64), kind: "delivery" }]);
    await store.close();

    const { logger, lines } = recordingLogger();
    const reopened = await openFileStore({ dataDir: dir, fsyncMode: "none", logger });
    cleanups.push(() => reopened.close());
    expect((await reopened.sessions.get(row.key))?.taint).toBe("CONFIDENTIAL");
    expect(await reopened.transcripts.lastSeq(row.sessionId)).toBe(2);
    expect(intents(reopened)).toEqual([]);
    expect(lines.some((line) => /dropped a taint rise/.test(line.message))).toBe(false);
    expect(lines.some((line) => line.level === "error" && /audit record was lost/.test(line.message))).toBe(
      true,
    );
  });
});
