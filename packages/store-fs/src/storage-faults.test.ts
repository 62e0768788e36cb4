import path from "node:path";
import { type SessionEntry, type Store, SwitchboardError } from "@switchboard/core";
import { sampleAuditRecords, sampleMessage, sampleRun, sampleSession } from "@switchboard/core/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { openClosedAfter, tempDir } from "../test/helpers";
import { type FileStore, type FileStoreOptions, openFileStore } from "./file-store";
import { type FaultOp, setFaultHook } from "./fs-io";

/**
 * Storage faults (disk full, too many open files, permissions) at every kind of write: the call
 * rejects with UNAVAILABLE naming the cause and the file, nothing acknowledged is lost, nothing
 * unacknowledged is served or survives a reopen, and writes work again once the fault is gone,
 * without a restart. Vitest fails the run on any unhandled rejection, so a stray background
 * failure (compaction, rotation) fails these tests too.
 */

interface Fault {
  op: FaultOp | readonly FaultOp[];
  /** Substring(s) of the paths the fault hits. */
  where: string | readonly string[];
  code: string;
}

let fault: Fault | undefined;
const hits: string[] = [];

beforeAll(() => {
  setFaultHook((op, filePath) => {
    if (!fault) return undefined;
    const ops = typeof fault.op === "string" ? [fault.op] : fault.op;
    const where = typeof fault.where === "string" ? [fault.where] : fault.where;
    if (!ops.includes(op) || !where.some((part) => filePath.includes(part))) return undefined;
    hits.push(`${op} ${filePath}`);
    return fault.code;
  });
});
afterAll(() => setFaultHook(undefined));

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  fault = undefined;
  hits.length = 0;
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function freshStore(
  options: Partial<FileStoreOptions> = {},
): Promise<{ store: FileStore; dataDir: string }> {
  const { dir, cleanup } = await tempDir("sb-faults-");
  cleanups.push(cleanup);
  const dataDir = path.join(dir, "data");
  const store = await openClosedAfter(cleanups, dataDir, options);
  return { store, dataDir };
}

async function reopen(store: FileStore, options: Partial<FileStoreOptions> = {}): Promise<FileStore> {
  await store.close();
  const again = await openFileStore({ dataDir: store.dataDir, fsyncMode: "none", ...options });
  cleanups.push(() => again.close());
  return again;
}

const MEANINGS: Record<string, RegExp> = {
  ENOSPC: /disk full \(ENOSPC\)/,
  EMFILE: /too many open files in this process \(EMFILE\)/,
  EPERM: /operation not permitted \(EPERM\)/,
};

async function expectUnavailable(promise: Promise<unknown>, code: string, dataDir: string): Promise<void> {
  const error = await promise.then(
    () => expect.fail("the write should have been refused"),
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(SwitchboardError);
  expect((error as SwitchboardError).code).toBe("UNAVAILABLE");
  const message = (error as SwitchboardError).message;
  expect(message).toMatch(MEANINGS[code]!);
  // The file is named, inside the data dir.
  expect(message).toContain(dataDir);
}

async function texts(store: Store, sessionId: string): Promise<string[]> {
  const { entries } = await store.transcripts.read(sessionId, { limit: 100 });
  return entries.map((entry) => (entry.message?.content[0] as { text?: string } | undefined)?.text ?? "");
}

async function withTranscript(store: Store): Promise<string> {
  const sessionId = crypto.randomUUID();
  await store.transcripts.create({ sessionId, key: `agent:main:${sessionId}`, createdAt: 1 });
  await store.transcripts.append(sessionId, [sampleMessage("one"), sampleMessage("two")]);
  return sessionId;
}

const CODES = ["ENOSPC", "EMFILE", "EPERM"] as const;

describe.each(CODES)("%s", (code) => {
  it("transcript append failing on the transcript file", async () => {
    const { store, dataDir } = await freshStore();
    const sessionId = await withTranscript(store);
    fault = { op: "write", where: `transcripts${path.sep}${sessionId}`, code };
    await expectUnavailable(store.transcripts.append(sessionId, [sampleMessage("lost")]), code, dataDir);
    expect(hits.length).toBeGreaterThan(0);
    expect(await texts(store, sessionId)).toEqual(["one", "two"]);
    fault = undefined;
    const [written] = await store.transcripts.append(sessionId, [sampleMessage("three")]);
    expect(written!.seq).toBe(3);
    const again = await reopen(store);
    expect(await texts(again, sessionId)).toEqual(["one", "two", "three"]);
  });

  it("transcript append failing on the commit log: the entry is taken back out", async () => {
    const { store, dataDir } = await freshStore();
    const sessionId = await withTranscript(store);
    fault = { op: "write", where: "commit-log", code };
    const concurrent = Promise.allSettled([
      store.transcripts.append(sessionId, [sampleMessage("lost-1")]),
      store.transcripts.append(sessionId, [sampleMessage("lost-2"), sampleMessage("lost-3")]),
    ]);
    await expectUnavailable(store.transcripts.append(sessionId, [sampleMessage("lost-4")]), code, dataDir);
    expect((await concurrent).map((result) => result.status)).toEqual(["rejected", "rejected"]);
    // Not served, and the seqs are free again.
    expect(await texts(store, sessionId)).toEqual(["one", "two"]);
    expect(await store.transcripts.lastSeq(sessionId)).toBe(2);
    fault = undefined;
    const [written] = await store.transcripts.append(sessionId, [sampleMessage("three")]);
    expect(written!.seq).toBe(3);
    const again = await reopen(store);
    expect(await texts(again, sessionId)).toEqual(["one", "two", "three"]);
  });

  it("sessions journal: the row stays as it was, list and lookups included", async () => {
    const { store, dataDir } = await freshStore();
    const before = sampleSession({ label: "before" });
    const version = await store.sessions.put(before);
    fault = { op: "write", where: `sessions${path.sep}journal`, code };
    const changed: SessionEntry = {
      ...before,
      sessionId: crypto.randomUUID(),
      label: "lost",
      updatedAt: 2e12,
    };
    await expectUnavailable(store.sessions.put(changed), code, dataDir);
    const fresh = sampleSession();
    await expectUnavailable(store.sessions.put(fresh), code, dataDir);
    await expectUnavailable(store.sessions.delete(before.key), code, dataDir);
    expect(await store.sessions.get(before.key)).toEqual(before);
    expect(await store.sessions.get(fresh.key)).toBeUndefined();
    expect(await store.sessions.keysForSessionId(changed.sessionId)).toEqual([]);
    expect(await store.sessions.keysForSessionId(before.sessionId)).toEqual([before.key]);
    expect((await store.sessions.list({ limit: 10 })).entries).toEqual([before]);
    expect(await store.sessions.count()).toBe(1);
    // The failed writes took their versions back: a compare-and-set on the durable row succeeds.
    expect(await store.sessions.getVersioned(before.key)).toEqual({ row: before, version });
    fault = undefined;
    const after = { ...before, label: "after" };
    await store.sessions.put(after, { expectedVersion: version });
    const again = await reopen(store);
    expect(await again.sessions.get(before.key)).toEqual(after);
    expect(await again.sessions.count()).toBe(1);
  });

  it("runs journal", async () => {
    const { store, dataDir } = await freshStore();
    const run = sampleRun({ idempotencyKey: "idem-1" });
    const version = await store.runs.put(run);
    fault = { op: "write", where: `runs${path.sep}journal`, code };
    await expectUnavailable(
      store.runs.put({ ...run, status: "running", idempotencyKey: "idem-2" }),
      code,
      dataDir,
    );
    expect((await store.runs.get(run.runId))?.status).toBe("queued");
    expect((await store.runs.getByIdempotencyKey("idem-1"))?.runId).toBe(run.runId);
    expect(await store.runs.getByIdempotencyKey("idem-2")).toBeUndefined();
    expect((await store.runs.getVersioned(run.runId))?.version).toBe(version);
    fault = undefined;
    // The key the failed write took is free again.
    await store.runs.put(sampleRun({ idempotencyKey: "idem-2" }));
    await store.runs.put({ ...run, status: "ok" }, { expectedVersion: version });
    const again = await reopen(store);
    expect((await again.runs.get(run.runId))?.status).toBe("ok");
  });

  it("meta journal", async () => {
    const { store, dataDir } = await freshStore();
    await store.meta.set("eventSeq", "1");
    fault = { op: "write", where: `meta${path.sep}journal`, code };
    await expectUnavailable(store.meta.set("eventSeq", "2"), code, dataDir);
    expect(await store.meta.get("eventSeq")).toBe("1");
    fault = undefined;
    await store.meta.set("eventSeq", "3");
    expect(await (await reopen(store)).meta.get("eventSeq")).toBe("3");
  });

  it("audit log: the chain continues from the last durable record", async () => {
    const { store, dataDir } = await freshStore();
    const records = sampleAuditRecords(0, 6);
    await store.audit.append(records.slice(0, 2));
    fault = { op: "write", where: "audit.jsonl", code };
    await expectUnavailable(store.audit.append(records.slice(2, 4)), code, dataDir);
    expect((await store.audit.last())?.index).toBe(1);
    expect(await store.audit.count()).toBe(2);
    fault = undefined;
    await store.audit.append(records.slice(2, 6));
    expect((await store.audit.read()).map((record) => record.index)).toEqual([0, 1, 2, 3, 4, 5]);
    const again = await reopen(store);
    expect((await again.audit.read()).map((record) => record.index)).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it("snapshot: compaction fails, the journals keep the state, the next one succeeds", async () => {
    const { store, dataDir } = await freshStore();
    const rows = Array.from({ length: 5 }, () => sampleSession());
    for (const row of rows) await store.sessions.put(row);
    fault = { op: ["open", "write"], where: "snapshot-", code };
    await expectUnavailable(store.compact(), code, dataDir);
    await store.sessions.put({ ...rows[0]!, label: "later" });
    const interim = await reopen(store);
    expect(await interim.sessions.count()).toBe(5);
    expect((await interim.sessions.get(rows[0]!.key))?.label).toBe("later");
    fault = undefined;
    await interim.compact();
    const again = await reopen(interim);
    expect(await again.sessions.count()).toBe(5);
    expect((await again.sessions.get(rows[0]!.key))?.label).toBe("later");
  });

  it("archive: the transcript stays readable where it was, and archives later", async () => {
    const { store, dataDir } = await freshStore();
    const sessionId = await withTranscript(store);
    fault = { op: "rename", where: "archive", code };
    await expectUnavailable(store.transcripts.archive(sessionId, "reset"), code, dataDir);
    expect(await texts(store, sessionId)).toEqual(["one", "two"]);
    await store.transcripts.append(sessionId, [sampleMessage("three")]);
    fault = undefined;
    await store.transcripts.archive(sessionId, "reset");
    expect(await store.transcripts.exists(sessionId)).toBe(false);
  });

  it("transcript create", async () => {
    const { store, dataDir } = await freshStore();
    const sessionId = crypto.randomUUID();
    fault = { op: "open", where: `tmp${path.sep}${sessionId}`, code };
    await expectUnavailable(
      store.transcripts.create({ sessionId, key: "agent:main:x", createdAt: 1 }),
      code,
      dataDir,
    );
    expect(await store.transcripts.exists(sessionId)).toBe(false);
    fault = undefined;
    await store.transcripts.create({ sessionId, key: "agent:main:x", createdAt: 1 });
    expect(await store.transcripts.lastSeq(sessionId)).toBe(0);
  });
});

describe("opening a transcript", () => {
  it("out of descriptors: reads and appends answer UNAVAILABLE, then work once descriptors are back", async () => {
    const { store, dataDir } = await freshStore();
    const sessionId = await withTranscript(store);
    const again = await reopen(store);
    // Out of descriptors for every new file, the health probe's included.
    fault = { op: "open", where: [`transcripts${path.sep}${sessionId}`, "health-probe"], code: "EMFILE" };
    await expectUnavailable(again.transcripts.read(sessionId, { limit: 5 }), "EMFILE", dataDir);
    await expectUnavailable(again.transcripts.append(sessionId, [sampleMessage("no")]), "EMFILE", dataDir);
    expect((await again.health()).ok).toBe(false);
    fault = undefined;
    expect(await texts(again, sessionId)).toEqual(["one", "two"]);
    expect(await again.health()).toEqual({ ok: true });
  });
});

describe("durable mode", () => {
  it("a failed fsync is not acknowledged and its bytes are cut off", async () => {
    const { store, dataDir } = await freshStore({ fsyncMode: "always" });
    const before = sampleSession();
    await store.sessions.put(before);
    fault = { op: "sync", where: `sessions${path.sep}journal`, code: "EIO" };
    const error = await store.sessions.put({ ...before, label: "lost" }).catch((caught: unknown) => caught);
    expect((error as SwitchboardError).code).toBe("UNAVAILABLE");
    expect((error as SwitchboardError).message).toMatch(/I\/O error \(EIO\)/);
    fault = undefined;
    const again = await reopen(store, { fsyncMode: "always" });
    expect(await again.sessions.get(before.key)).toEqual(before);
    expect(dataDir).toBe(again.dataDir);
  });
});

describe("health", () => {
  it("reports the failing part and its cause, then ok again once space is back, without a write", async () => {
    const { store } = await freshStore();
    expect(await store.health()).toEqual({ ok: true });
    fault = { op: ["write", "open"], where: path.sep, code: "ENOSPC" };
    await store.sessions.put(sampleSession()).catch(() => undefined);
    const degraded = await store.health();
    expect(degraded.ok).toBe(false);
    expect(degraded.degraded?.["sessions journal"]?.cause).toMatch(/disk full \(ENOSPC\) writing .*journal/);
    expect(Date.parse(degraded.degraded!["sessions journal"]!.since)).not.toBeNaN();
    fault = undefined;
    expect(await store.health()).toEqual({ ok: true });
    await store.sessions.put(sampleSession());
  });

  it("keeps a permission problem of one file until that part writes again", async () => {
    const { store } = await freshStore();
    fault = { op: "write", where: "audit.jsonl", code: "EPERM" };
    await store.audit.append(sampleAuditRecords(0, 1)).catch(() => undefined);
    fault = undefined;
    expect((await store.health()).degraded?.["audit log"]?.cause).toMatch(/EPERM/);
    await store.audit.append(sampleAuditRecords(0, 1));
    expect(await store.health()).toEqual({ ok: true });
  });

  it("background compaction failing under a full disk is reported, not thrown", async () => {
    const { store } = await freshStore({ snapshotEvery: 3 });
    // The disk is full for new files (snapshots, the health probe); journal appends still fit.
    fault = { op: ["open", "write"], where: ["snapshot-", "health-probe"], code: "ENOSPC" };
    for (let i = 0; i < 10; i++) await store.sessions.put(sampleSession());
    // Joins the background compaction still running, or fails the same way again.
    await expect(store.compact()).rejects.toThrow(/ENOSPC/);
    const report = await store.health();
    expect(report.degraded?.["sessions snapshot"]?.cause).toMatch(/ENOSPC/);
    fault = undefined;
    expect(await store.health()).toEqual({ ok: true });
    await store.compact();
    expect(await (await reopen(store)).sessions.count()).toBe(10);
  });
});
