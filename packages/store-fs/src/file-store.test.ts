import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { sampleAuditRecords, sampleMessage, sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it, vi } from "vitest";
import { recordingLogger, tempDir } from "../test/helpers";
import { type FileStore, type FileStoreOptions, openFileStore } from "./file-store";
import { processIdentity } from "./lock-file";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function freshDir(): Promise<string> {
  const { dir, cleanup } = await tempDir();
  cleanups.push(cleanup);
  return path.join(dir, "data");
}

async function open(dataDir: string, options: Partial<FileStoreOptions> = {}): Promise<FileStore> {
  const store = await openFileStore({ dataDir, fsyncMode: "none", ...options });
  cleanups.push(() => store.close());
  return store;
}

async function newTranscript(store: FileStore, count = 0): Promise<string> {
  const sessionId = crypto.randomUUID();
  await store.transcripts.create({ sessionId, key: `agent:main:${sessionId}`, createdAt: 1 });
  if (count > 0) {
    await store.transcripts.append(
      sessionId,
      Array.from({ length: count }, (_, i) => sampleMessage(`m${i + 1}`)),
    );
  }
  return sessionId;
}

function texts(entries: Array<{ message?: { content: Array<{ type: string; text?: string }> } }>): string[] {
  return entries.map((entry) => entry.message?.content[0]?.text ?? "");
}

function walk(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    return entry.isDirectory() ? [full, ...walk(full)] : [full];
  });
}

/** A pid that surely belongs to no running process: a child that already exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], {
    encoding: "utf8",
  });
  return Number(child.stdout);
}

/** Copies a data dir as a crash would leave it: the copy's lock names a dead process. */
async function crashCopy(from: string): Promise<string> {
  const to = `${from}-crashed`;
  await fs.promises.cp(from, to, { recursive: true });
  fs.writeFileSync(path.join(to, "LOCK"), JSON.stringify({ pid: deadPid() }));
  cleanups.push(() => fs.promises.rm(to, { recursive: true, force: true }));
  return to;
}

/** `crashCopy` without yielding to the event loop, so no timer of the open store runs meanwhile. */
function crashCopySync(from: string): string {
  const to = `${from}-crashed-now`;
  fs.cpSync(from, to, { recursive: true });
  fs.writeFileSync(path.join(to, "LOCK"), JSON.stringify({ pid: deadPid() }));
  cleanups.push(() => fs.promises.rm(to, { recursive: true, force: true }));
  return to;
}

describe("file store layout", () => {
  it("creates a versioned data dir with 0700 directories and 0600 files", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir, { fsyncMode: "always", snapshotEvery: 2 });
    const sessionId = await newTranscript(store, 2);
    await store.sessions.put(sampleSession({ sessionId }));
    await store.sessions.put(sampleSession());
    await store.audit.append(sampleAuditRecords(0, 2));
    await store.meta.set("x", "1");
    await store.compact();
    await store.transcripts.archive(await newTranscript(store, 1), "reset");

    expect(JSON.parse(fs.readFileSync(path.join(dataDir, "VERSION"), "utf8"))).toEqual({
      format: "switchboard-file-store",
      version: 1,
    });
    expect(JSON.parse(fs.readFileSync(path.join(dataDir, "LOCK"), "utf8")).pid).toBe(process.pid);
    expect(store.lockInfo.pid).toBe(process.pid);
    expect(fs.statSync(dataDir).mode & 0o777).toBe(0o700);
    const entries = walk(dataDir);
    expect(entries.length).toBeGreaterThan(10);
    for (const entry of entries) {
      const mode = fs.statSync(entry).mode & 0o777;
      expect({ entry, mode }).toEqual({ entry, mode: fs.statSync(entry).isDirectory() ? 0o700 : 0o600 });
    }
    const transcript = fs.readFileSync(store.transcripts.locate(sessionId), "utf8").split("\n");
    expect(JSON.parse(transcript[0]!)).toEqual({
      type: "session",
      version: 1,
      sessionId,
      key: `agent:main:${sessionId}`,
      createdAt: 1,
    });
    expect(transcript[1]).toMatch(
      /^\{"type":"message","seq":1,"id":"[^"]+","ts":\d+,"label":"INTERNAL","message":/,
    );
    expect(store.transcripts.locate(sessionId)).toBe(path.join(dataDir, "transcripts", `${sessionId}.jsonl`));
  });

  it("tightens an existing data dir to 0700", async () => {
    const dataDir = await freshDir();
    fs.mkdirSync(dataDir, { mode: 0o755 });
    fs.chmodSync(dataDir, 0o755);
    await open(dataDir);
    expect(fs.statSync(dataDir).mode & 0o777).toBe(0o700);
  });

  it("rejects bad options naming the field", async () => {
    await expect(openFileStore({ dataDir: "" })).rejects.toThrow(/fileStore\.dataDir/);
    await expect(openFileStore({ dataDir: "/tmp/x", fsyncMode: "sometimes" as "none" })).rejects.toThrow(
      /fsyncMode/,
    );
  });
});

describe("single writer lock", () => {
  it("refuses a second open while the first is live, and allows it after close", async () => {
    const dataDir = await freshDir();
    const first = await openFileStore({ dataDir, fsyncMode: "none" });
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toThrow(
      `data dir in use by pid ${process.pid}`,
    );
    await first.close();
    expect(fs.existsSync(path.join(dataDir, "LOCK"))).toBe(false);
    const second = await open(dataDir);
    expect(second.lockInfo.tookOverFromPid).toBeUndefined();
  });

  it("refuses a lock held by another live process", async () => {
    const dataDir = await freshDir();
    await (await openFileStore({ dataDir, fsyncMode: "none" })).close();
    const holder = spawn(process.execPath, ["-e", "setTimeout(() => {}, 30000)"], { stdio: "ignore" });
    cleanups.push(async () => {
      holder.kill("SIGKILL");
    });
    fs.writeFileSync(path.join(dataDir, "LOCK"), JSON.stringify({ pid: holder.pid }));
    const attempt = openFileStore({ dataDir, fsyncMode: "none" });
    await expect(attempt).rejects.toMatchObject({
      code: "UNAVAILABLE",
      message: expect.stringContaining(`data dir in use by pid ${holder.pid}`),
    });
  });

  // A container restarted after kill -9 runs the gateway as pid 1 again: the lock its last run left
  // names this process's pid. Before session 22 it was "in use by pid 1 (this process)" for ever.
  it("takes over a lock naming this process's pid that this process did not take", async () => {
    const dataDir = await freshDir();
    await (await openFileStore({ dataDir, fsyncMode: "none" })).close();
    fs.writeFileSync(
      path.join(dataDir, "LOCK"),
      JSON.stringify({ pid: process.pid, identity: "an-earlier-boot:1" }),
    );
    const store = await open(dataDir);
    expect(store.lockInfo.tookOverFromPid).toBe(process.pid);
  });

  it("takes over a lock whose pid is alive but another process now (a reused pid)", async () => {
    const dataDir = await freshDir();
    await (await openFileStore({ dataDir, fsyncMode: "none" })).close();
    const reused = spawn(process.execPath, ["-e", "setTimeout(() => {}, 30000)"], { stdio: "ignore" });
    cleanups.push(async () => {
      reused.kill("SIGKILL");
    });
    const identity = processIdentity(reused.pid!);
    expect(identity).toEqual(expect.any(String));
    // The same pid, started at another time: the process that wrote the lock is gone.
    const [boot, started] = identity!.split(":");
    const earlier = `${boot}:${Number(started) - 1}`;
    fs.writeFileSync(path.join(dataDir, "LOCK"), JSON.stringify({ pid: reused.pid, identity: earlier }));
    const store = await open(dataDir);
    expect(store.lockInfo.tookOverFromPid).toBe(reused.pid);
    await store.close();
    // The lock a live holder wrote, with its own identity, is still refused.
    fs.writeFileSync(path.join(dataDir, "LOCK"), JSON.stringify({ pid: reused.pid, identity }));
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toMatchObject({
      code: "UNAVAILABLE",
    });
  });

  it("takes over a lock left by a dead process and says so", async () => {
    const dataDir = await freshDir();
    await (await openFileStore({ dataDir, fsyncMode: "none" })).close();
    const dead = deadPid();
    fs.writeFileSync(path.join(dataDir, "LOCK"), JSON.stringify({ pid: dead }));
    const { logger, lines } = recordingLogger();
    const store = await open(dataDir, { logger });
    expect(store.lockInfo.tookOverFromPid).toBe(dead);
    expect(JSON.parse(fs.readFileSync(path.join(dataDir, "LOCK"), "utf8")).pid).toBe(process.pid);
    expect(lines.some((line) => line.level === "warn" && line.message.includes(`pid ${dead}`))).toBe(true);
  });
});

describe("format versions", () => {
  it("refuses a data dir written by a newer version", async () => {
    const dataDir = await freshDir();
    await (await openFileStore({ dataDir, fsyncMode: "none" })).close();
    fs.writeFileSync(
      path.join(dataDir, "VERSION"),
      JSON.stringify({ format: "switchboard-file-store", version: 2 }),
    );
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toThrow(
      /store format version 2, newer than this Switchboard supports \(1\)/,
    );
    expect(fs.existsSync(path.join(dataDir, "LOCK"))).toBe(false);
  });

  it("refuses store files without a VERSION marker instead of guessing", async () => {
    const dataDir = await freshDir();
    await (await openFileStore({ dataDir, fsyncMode: "none" })).close();
    fs.rmSync(path.join(dataDir, "VERSION"));
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toThrow(/VERSION is missing/);
  });

  it("refuses a transcript and a journal with a newer format version", async () => {
    const dataDir = await freshDir();
    let store = await open(dataDir);
    const sessionId = await newTranscript(store, 1);
    await store.close();
    const file = path.join(dataDir, "transcripts", `${sessionId}.jsonl`);
    const lines = fs.readFileSync(file, "utf8").split("\n");
    lines[0] = JSON.stringify({ ...JSON.parse(lines[0]!), version: 9 });
    fs.writeFileSync(file, lines.join("\n"));
    store = await open(dataDir);
    await expect(store.transcripts.read(sessionId, { limit: 5 })).rejects.toThrow(
      /transcript format version 9 is newer than this Switchboard supports \(1\)/,
    );
    await store.close();

    const journal = path.join(dataDir, "sessions", fs.readdirSync(path.join(dataDir, "sessions"))[0]!);
    const journalLines = fs.readFileSync(journal, "utf8").split("\n");
    journalLines[0] = JSON.stringify({ ...JSON.parse(journalLines[0]!), version: 3 });
    fs.writeFileSync(journal, journalLines.join("\n"));
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toThrow(
      /sessions journal format version 3 is newer/,
    );
  });
});

describe("input checks", () => {
  it("refuses an oversized entry with PAYLOAD_TOO_LARGE and writes nothing", async () => {
    const store = await open(await freshDir(), { maxEntryBytes: 4096 });
    const sessionId = await newTranscript(store, 1);
    const file = store.transcripts.locate(sessionId);
    const size = fs.statSync(file).size;
    await expect(
      store.transcripts.append(sessionId, [sampleMessage("fine"), sampleMessage("x".repeat(5000))]),
    ).rejects.toMatchObject({ code: "PAYLOAD_TOO_LARGE", message: expect.stringContaining("entries[1]") });
    expect(fs.statSync(file).size).toBe(size);
    expect(await store.transcripts.lastSeq(sessionId)).toBe(1);
  });

  it("never turns a bad sessionId into a path", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const before = walk(dataDir);
    for (const bad of ["../../escape", "agent:main:main", "x/../../y", `${crypto.randomUUID()}/..`]) {
      await expect(
        store.transcripts.create({ sessionId: bad, key: "agent:main:main", createdAt: 1 }),
      ).rejects.toMatchObject({
        code: "INVALID_REQUEST",
      });
      await expect(store.transcripts.archive(bad, "reset")).rejects.toMatchObject({
        code: "INVALID_REQUEST",
      });
      await expect(store.transcripts.remove(bad)).rejects.toMatchObject({ code: "INVALID_REQUEST" });
    }
    expect(walk(dataDir)).toEqual(before);
    expect(fs.existsSync(path.join(path.dirname(dataDir), "escape"))).toBe(false);
  });
});

describe("crash recovery", () => {
  it("cuts a torn last line on open, logs it, and continues the seq", async () => {
    const dataDir = await freshDir();
    let store = await open(dataDir);
    const sessionId = await newTranscript(store, 3);
    await store.close();
    const file = path.join(dataDir, "transcripts", `${sessionId}.jsonl`);
    fs.appendFileSync(file, '{"type":"message","seq":4,"id":"half-writ');

    const { logger, lines } = recordingLogger();
    store = await open(dataDir, { logger });
    const read = await store.transcripts.read(sessionId, { limit: 10 });
    expect(texts(read.entries)).toEqual(["m1", "m2", "m3"]);
    expect(lines).toContainEqual(
      expect.objectContaining({ level: "warn", message: expect.stringContaining("torn tail of 41 bytes") }),
    );
    expect((await store.stats()).tornTailsRepaired).toBe(1);
    const next = await store.transcripts.append(sessionId, [sampleMessage("m4")]);
    expect(next[0]!.seq).toBe(4);
    const onDisk = fs.readFileSync(file, "utf8");
    expect(onDisk.endsWith("\n")).toBe(true);
    expect(
      onDisk
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line).seq),
    ).toEqual([undefined, 1, 2, 3, 4]);
  });

  it("cuts complete but unreadable last lines too", async () => {
    const dataDir = await freshDir();
    let store = await open(dataDir);
    const sessionId = await newTranscript(store, 2);
    await store.close();
    const file = path.join(dataDir, "transcripts", `${sessionId}.jsonl`);
    fs.appendFileSync(file, "\u0000\u0000\u0000\n{not json}\n");
    store = await open(dataDir);
    expect(await store.transcripts.lastSeq(sessionId)).toBe(2);
    expect(texts((await store.transcripts.read(sessionId, { limit: 10 })).entries)).toEqual(["m1", "m2"]);
  });

  it("restores acknowledged entries from the commit log when the transcript lost them", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const sessionId = await newTranscript(store, 3);
    const appended = await store.transcripts.append(sessionId, [sampleMessage("m4"), sampleMessage("m5")]);
    const crashed = await crashCopy(dataDir);
    // The crash hit before the last two entries reached the transcript file.
    const file = path.join(crashed, "transcripts", `${sessionId}.jsonl`);
    const kept = fs.readFileSync(file, "utf8").split("\n").slice(0, 4).join("\n");
    fs.writeFileSync(file, `${kept}\n{"type":"message","seq":4,"i`);
    const segment = path.join(crashed, "commit-log", fs.readdirSync(path.join(crashed, "commit-log"))[0]!);
    fs.appendFileSync(segment, `${sessionId} {"type":"message","seq":6,"id":"never-acknow`);

    const { logger, lines } = recordingLogger();
    const recovered = await open(crashed, { logger });
    const read = await recovered.transcripts.read(sessionId, { limit: 10 });
    expect(texts(read.entries)).toEqual(["m1", "m2", "m3", "m4", "m5"]);
    expect(read.entries.slice(3)).toEqual(appended);
    const stats = await recovered.stats();
    expect(stats.entriesRestored).toBe(2);
    expect(stats.tornTailsRepaired).toBe(1);
    expect(lines.map((line) => line.message)).toEqual(
      expect.arrayContaining([
        expect.stringContaining("torn commit-log tail"),
        expect.stringContaining("restored 2 acknowledged entries"),
      ]),
    );
    expect(fs.readdirSync(path.join(crashed, "commit-log"))).toHaveLength(1);
    expect((await recovered.transcripts.append(sessionId, [sampleMessage("m6")]))[0]!.seq).toBe(6);
  });

  it("does not resurrect entries of an archived transcript into a new one with the same id", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const sessionId = await newTranscript(store, 4);
    await store.transcripts.archive(sessionId, "reset");
    await store.transcripts.create({ sessionId, key: "agent:main:again", createdAt: 2 });
    await store.transcripts.append(sessionId, [sampleMessage("fresh")]);
    const crashed = await crashCopy(dataDir);
    const recovered = await open(crashed);
    expect(texts((await recovered.transcripts.read(sessionId, { limit: 10 })).entries)).toEqual(["fresh"]);
  });

  it("leaves no commit-log segment after a clean close, and rotates full segments", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir, { commitLogSegmentBytes: 4096 });
    const ids = [await newTranscript(store), await newTranscript(store)];
    for (let round = 0; round < 40; round++) {
      await Promise.all(
        ids.map((id) => store.transcripts.append(id, [sampleMessage(`r${round} ${"y".repeat(200)}`)])),
      );
    }
    expect(fs.readdirSync(path.join(dataDir, "commit-log")).length).toBeLessThanOrEqual(2);
    await store.close();
    expect(fs.readdirSync(path.join(dataDir, "commit-log"))).toEqual([]);
    const again = await open(dataDir);
    for (const id of ids) expect(await again.transcripts.lastSeq(id)).toBe(40);
  });

  it("cuts a torn journal record and a torn audit record on open", async () => {
    const dataDir = await freshDir();
    let store = await open(dataDir);
    const row = sampleSession();
    await store.sessions.put(row);
    await store.audit.append(sampleAuditRecords(0, 3));
    await store.close();
    const journalDir = path.join(dataDir, "sessions");
    fs.appendFileSync(
      path.join(journalDir, fs.readdirSync(journalDir)[0]!),
      '{"op":"put","value":{"key":"agent:',
    );
    fs.appendFileSync(path.join(dataDir, "audit", "audit.jsonl"), '{"index":3,"prevH');
    const { logger, lines } = recordingLogger();
    store = await open(dataDir, { logger });
    expect(await store.sessions.get(row.key)).toEqual(row);
    expect(await store.sessions.count()).toBe(1);
    expect(await store.audit.count()).toBe(3);
    await store.audit.append(sampleAuditRecords(3, 1));
    expect((await store.audit.tail(2)).map((record) => record.index)).toEqual([2, 3]);
    expect(lines.filter((line) => line.message.includes("torn tail"))).toHaveLength(2);
  });

  it("refuses a journal damaged before intact records instead of dropping them", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    await store.sessions.put(sampleSession({ key: "agent:main:a" }));
    await store.sessions.put(sampleSession({ key: "agent:main:b" }));
    await store.close();
    const journal = path.join(dataDir, "sessions", fs.readdirSync(path.join(dataDir, "sessions"))[0]!);
    const lines = fs.readFileSync(journal, "utf8").split("\n");
    lines[1] = "{broken";
    fs.writeFileSync(journal, lines.join("\n"));
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toThrow(
      /damaged record .* before intact ones/,
    );
  });
});

describe("sessions journal and snapshots", () => {
  it("builds the kind and search indexes after open, or only once asked with deferIndexing", async () => {
    const dataDir = await freshDir();
    const first = await open(dataDir);
    for (let i = 0; i < 30; i++) await first.sessions.put(sampleSession({ key: `agent:main:cron:job-${i}` }));
    await first.close();

    const eager = await open(dataDir);
    await vi.waitFor(async () => expect((await eager.stats()).indexBuilt).toBe(true));
    await eager.close();

    const deferred = await open(dataDir, { deferIndexing: true });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await deferred.stats()).indexBuilt).toBe(false);
    deferred.startDeferredWork?.();
    await vi.waitFor(async () => expect((await deferred.stats()).indexBuilt).toBe(true));
    await deferred.close();

    // A list that needs the indexes builds them itself, asked or not.
    const listing = await open(dataDir, { deferIndexing: true });
    expect((await listing.sessions.list({ kinds: ["cron"], limit: 50 })).entries).toHaveLength(30);
    expect((await listing.stats()).indexBuilt).toBe(true);
  });

  it("gathers row touches into one journal write within 100 ms; a crash before it loses only them", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir, { fsyncMode: "always" });
    const rows = Array.from({ length: 3 }, (_, i) =>
      sampleSession({ key: `agent:main:t${i}`, updatedAt: 1000 }),
    );
    for (const row of rows) await store.sessions.put(row);
    const journalDir = path.join(dataDir, "sessions");
    const journal = path.join(
      journalDir,
      fs
        .readdirSync(journalDir)
        .filter((name) => name.startsWith("journal-"))
        .sort()
        .at(-1)!,
    );
    const linesBefore = fs.readFileSync(journal, "utf8").split("\n").length;
    for (let round = 1; round <= 4; round++)
      for (const row of rows)
        await store.sessions.touch(row.key, { sessionId: row.sessionId, at: 1000 + round, addTokens: 1 });
    // Seen at once, not written yet: a crash now keeps the rows as they were, and everything else.
    expect((await store.sessions.get(rows[0]!.key))?.updatedAt).toBe(1004);
    // Copied synchronously: the flush timer cannot fire before the copy is complete.
    const early = await open(crashCopySync(dataDir));
    expect(await early.sessions.get(rows[0]!.key)).toEqual(rows[0]);
    expect(await early.sessions.count()).toBe(3);
    // Within the interval the twelve touches go out as one line per row, without a close.
    await vi.waitFor(
      () => expect(fs.readFileSync(journal, "utf8").split("\n").length).toBe(linesBefore + 3),
      {
        timeout: 2_000,
        interval: 20,
      },
    );
    const late = await open(await crashCopy(dataDir));
    for (const row of rows)
      expect(await late.sessions.get(row.key)).toEqual({ ...row, updatedAt: 1004, totalTokens: 4 });
  });

  it("appends updates to a journal, snapshots in the background, and reloads the same index", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir, { snapshotEvery: 10 });
    const rows = Array.from({ length: 25 }, (_, i) =>
      sampleSession({ key: `agent:main:s${i}`, updatedAt: 1000 + i }),
    );
    for (const row of rows) await store.sessions.put(row);
    for (const row of rows.slice(0, 5)) await store.sessions.delete(row.key);
    await store.compact();
    const stats = await store.stats();
    expect(stats.journals.sessions.snapshots).toBeGreaterThanOrEqual(1);
    expect(stats.journals.sessions.generation).toBeGreaterThan(1);

    const dir = path.join(dataDir, "sessions");
    const files = fs.readdirSync(dir).sort();
    expect(files.filter((name) => name.startsWith("snapshot-"))).toHaveLength(1);
    const snapshot = path.join(dir, files.find((name) => name.startsWith("snapshot-"))!);
    const journal = path.join(dir, files.filter((name) => name.startsWith("journal-")).at(-1)!);
    const snapshotBefore = fs.readFileSync(snapshot, "utf8");
    const journalSize = fs.statSync(journal).size;
    await store.sessions.put({ ...rows[10]!, updatedAt: 5000 });
    // One update touches the journal only: the snapshot is not rewritten.
    expect(fs.readFileSync(snapshot, "utf8")).toBe(snapshotBefore);
    expect(fs.statSync(journal).size).toBeGreaterThan(journalSize);
    await store.close();

    const again = await open(dataDir, { snapshotEvery: 10 });
    expect(await again.sessions.count()).toBe(20);
    const listed = await again.sessions.list({ limit: 3 });
    expect(listed.entries.map((row) => row.key)).toEqual([
      "agent:main:s10",
      "agent:main:s24",
      "agent:main:s23",
    ]);
    for (const row of rows.slice(5)) {
      expect(await again.sessions.get(row.key)).toEqual(
        row.key === "agent:main:s10" ? { ...row, updatedAt: 5000 } : row,
      );
    }
  });

  it("waits for as many journal records as the last snapshot held before the next one", async () => {
    // A snapshot writes every row: at one per `snapshotEvery` changes a large map would rewrite
    // itself many times over per change.
    const dataDir = await freshDir();
    const store = await open(dataDir, { snapshotEvery: 5 });
    const rows = Array.from({ length: 40 }, (_, i) => sampleSession({ key: `agent:main:s${i}` }));
    for (const row of rows) await store.sessions.put(row);
    // Twice: the first may only await a background snapshot the puts started, of fewer rows.
    await store.compact();
    await store.compact();
    const before = (await store.stats()).journals.sessions.snapshots;
    for (let n = 1; n < 40; n++) await store.sessions.put({ ...rows[0]!, updatedAt: 2000 + n });
    expect((await store.stats()).journals.sessions.snapshots).toBe(before);
    await store.sessions.put({ ...rows[0]!, updatedAt: 3000 });
    await vi.waitFor(async () => expect((await store.stats()).journals.sessions.snapshots).toBe(before + 1));
    await store.close();
    const again = await open(dataDir, { snapshotEvery: 5 });
    expect(await again.sessions.get(rows[0]!.key)).toEqual({ ...rows[0]!, updatedAt: 3000 });
    expect(await again.sessions.count()).toBe(40);
    await again.close();
  });

  it("keeps taking snapshots of a map that only gains new keys", async () => {
    // Paced by the map's current size, a map growing by one key per change never caught up: one
    // journal held its whole history.
    const dataDir = await freshDir();
    const store = await open(dataDir, { snapshotEvery: 5 });
    for (let i = 0; i < 300; i++) await store.sessions.put(sampleSession({ key: `agent:main:g${i}` }));
    await vi.waitFor(async () => {
      const stats = (await store.stats()).journals.sessions;
      expect(stats.snapshots).toBeGreaterThanOrEqual(4);
      expect(stats.journalRecords).toBeLessThanOrEqual(160);
    });
    await store.close();
    const again = await open(dataDir);
    expect(await again.sessions.count()).toBe(300);
    await again.close();
  });

  it("recovers from a compaction interrupted before its snapshot was complete", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const rows = Array.from({ length: 5 }, (_, i) => sampleSession({ key: `agent:main:s${i}` }));
    for (const row of rows) await store.sessions.put(row);
    await store.close();
    const dir = path.join(dataDir, "sessions");
    // As left by a crash mid-compaction: the next journal exists, the snapshot is a temp file.
    fs.writeFileSync(
      path.join(dir, "journal-000000000002.jsonl"),
      `${JSON.stringify({ type: "journal", format: "sessions", version: 1, generation: 2 })}\n${JSON.stringify({ op: "del", key: "agent:main:s0" })}\n`,
    );
    fs.writeFileSync(
      path.join(dir, "snapshot-000000000002.jsonl.tmp"),
      '{"type":"snapshot","format":"sessions"',
    );
    const again = await open(dataDir);
    expect(await again.sessions.count()).toBe(4);
    expect(await again.sessions.get("agent:main:s0")).toBeUndefined();
    expect(fs.readdirSync(dir).some((name) => name.endsWith(".tmp"))).toBe(false);
    await again.sessions.put(sampleSession({ key: "agent:main:late" }));
    await again.close();
    const third = await open(dataDir);
    expect(await third.sessions.count()).toBe(5);
  });
});

describe("transcripts on disk", () => {
  it("archives on reset and delete under archive/ with a timestamp and the reason, and removes for good", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const reset = await newTranscript(store, 2);
    const deleted = await newTranscript(store, 1);
    const erased = await newTranscript(store, 1);
    const original = fs.readFileSync(store.transcripts.locate(reset), "utf8");
    await store.transcripts.archive(reset, "reset");
    await store.transcripts.archive(deleted, "delete");
    await store.transcripts.remove(erased);
    const archived = fs.readdirSync(path.join(dataDir, "archive")).sort();
    expect(archived).toHaveLength(2);
    const resetName = archived.find((name) => name.startsWith(reset))!;
    expect(resetName).toMatch(
      new RegExp(`^${reset}\\.\\d{4}-\\d\\d-\\d\\dT\\d\\d-\\d\\d-\\d\\d-\\d{3}Z\\.reset\\.jsonl$`),
    );
    expect(archived.find((name) => name.startsWith(deleted))).toMatch(/\.delete\.jsonl$/);
    expect(fs.readFileSync(path.join(dataDir, "archive", resetName), "utf8")).toBe(original);
    expect(fs.readdirSync(path.join(dataDir, "transcripts"))).toEqual([]);
  });

  it("keeps appends correct with more sessions than open files", async () => {
    const store = await open(await freshDir(), { maxOpenTranscripts: 2 });
    const ids = await Promise.all(Array.from({ length: 6 }, () => newTranscript(store)));
    for (let round = 0; round < 5; round++) {
      await Promise.all(
        ids.map((id) => store.transcripts.append(id, [sampleMessage(`${id.slice(0, 4)}-${round}`)])),
      );
    }
    for (const id of ids) {
      const read = await store.transcripts.read(id, { limit: 10 });
      expect(read.entries.map((entry) => entry.seq)).toEqual([1, 2, 3, 4, 5]);
      expect(texts(read.entries)[4]).toBe(`${id.slice(0, 4)}-4`);
    }
    expect((await store.stats()).openTranscripts).toBeLessThanOrEqual(2);
  });

  it("pages deep into a large transcript with before, in either direction", async () => {
    const store = await open(await freshDir(), { readChunkBytes: 4096 });
    const sessionId = await newTranscript(store);
    const filler = "z".repeat(400);
    for (let batch = 0; batch < 30; batch++) {
      await store.transcripts.append(
        sessionId,
        Array.from({ length: 100 }, (_, i) => sampleMessage(`n${batch * 100 + i + 1} ${filler}`)),
      );
    }
    expect(fs.statSync(store.transcripts.locate(sessionId)).size).toBeGreaterThan(1024 * 1024);
    for (const before of [2, 17, 256, 1001, 1500, 2999, 3000, 3001]) {
      const read = await store.transcripts.read(sessionId, { limit: 3, before });
      const expected = [before - 3, before - 2, before - 1].filter((seq) => seq >= 1 && seq <= 3000);
      expect(read.entries.map((entry) => entry.seq)).toEqual(expected);
      expect(texts(read.entries).map((text) => text.split(" ")[0])).toEqual(expected.map((seq) => `n${seq}`));
    }
    const seen: number[] = [];
    let cursor: number | undefined = 1200;
    while (cursor !== undefined) {
      const page = await store.transcripts.read(sessionId, { limit: 97, before: cursor });
      seen.unshift(...page.entries.map((entry) => entry.seq));
      cursor = page.nextBefore;
    }
    expect(seen).toEqual(Array.from({ length: 1199 }, (_, i) => i + 1));
  });

  it("reads audit records from the middle of a long log after reopen", async () => {
    const dataDir = await freshDir();
    let store = await open(dataDir);
    const records = sampleAuditRecords(0, 700);
    for (let at = 0; at < records.length; at += 100) await store.audit.append(records.slice(at, at + 100));
    await store.close();
    store = await open(dataDir);
    expect(await store.audit.count()).toBe(700);
    expect(await store.audit.read({ after: 511, limit: 3 })).toEqual(records.slice(512, 515));
    await store.audit.append(sampleAuditRecords(700, 300));
    expect(await store.audit.read({ after: 767, limit: 2 })).toEqual(sampleAuditRecords(768, 2));
    expect((await store.audit.read({ after: 990 })).map((record) => record.index)).toEqual(
      Array.from({ length: 9 }, (_, i) => 991 + i),
    );
    expect(await store.audit.tail(2)).toEqual(sampleAuditRecords(998, 2));
  });
});
