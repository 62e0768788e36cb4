import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { sampleMessage, sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { recordingLogger, tempDir } from "../test/helpers";
import { checkDataDir } from "./doctor";
import { type FileStore, type FileStoreOptions, openFileStore } from "./file-store";
import { setFaultHook } from "./fs-io";

/** Damaged or missing files are reported or refused, never hidden and never silently dropped. */

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  setFaultHook(undefined);
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function freshDir(): Promise<string> {
  const { dir, cleanup } = await tempDir("sb-damaged-");
  cleanups.push(cleanup);
  return path.join(dir, "data");
}

async function open(dataDir: string, options: Partial<FileStoreOptions> = {}): Promise<FileStore> {
  const store = await openFileStore({ dataDir, fsyncMode: "none", ...options });
  cleanups.push(() => store.close());
  return store;
}

function texts(entries: Array<{ message?: { content: Array<{ type: string; text?: string }> } }>): string[] {
  return entries.map((entry) => entry.message?.content[0]?.text ?? "");
}

async function transcriptWith(store: FileStore, count: number): Promise<string> {
  const sessionId = crypto.randomUUID();
  await store.transcripts.create({ sessionId, key: `agent:main:${sessionId}`, createdAt: 1 });
  await store.transcripts.append(
    sessionId,
    Array.from({ length: count }, (_, i) => sampleMessage(`m${i + 1}`)),
  );
  return sessionId;
}

/** Replaces line `index` (0 = header) of a file. */
function replaceLine(filePath: string, index: number, text: string): void {
  const lines = fs.readFileSync(filePath, "utf8").split("\n");
  lines[index] = text;
  fs.writeFileSync(filePath, lines.join("\n"));
}

describe("a damaged transcript line", () => {
  it("is skipped and counted; the rest of the history is served and appends go on", async () => {
    const dataDir = await freshDir();
    const first = await open(dataDir);
    const sessionId = await transcriptWith(first, 5);
    const file = first.transcripts.locate(sessionId);
    await first.close();
    replaceLine(file, 3, '{"type":"message","seq":3,"id":"x", garbage');

    const { lines, logger } = recordingLogger();
    const store = await open(dataDir, { logger });
    const read = await store.transcripts.read(sessionId, { limit: 10 });
    expect(texts(read.entries)).toEqual(["m1", "m2", "m4", "m5"]);
    expect(read.damaged).toBe(1);
    expect(lines.some((line) => line.level === "warn" && /damaged/.test(line.message))).toBe(true);
    // Pages that do not reach the damaged line say nothing about it.
    const newest = await store.transcripts.read(sessionId, { limit: 1 });
    expect(newest.damaged).toBeUndefined();
    const [next] = await store.transcripts.append(sessionId, [sampleMessage("m6")]);
    expect(next!.seq).toBe(6);
  });
});

describe("an unwritable transcript", () => {
  it("does not stop the store from opening, serves its history and refuses appends naming the cause", async () => {
    const dataDir = await freshDir();
    const first = await open(dataDir);
    const sessionId = await transcriptWith(first, 2);
    const file = first.transcripts.locate(sessionId);
    // Leave a commit log behind (as a crash would), so the next open has to visit the transcript.
    const other = await transcriptWith(first, 1);
    await first.transcripts.append(sessionId, [sampleMessage("m3")]);
    fs.cpSync(path.join(dataDir, "commit-log"), path.join(dataDir, "..", "kept-log"), { recursive: true });
    await first.close();
    fs.cpSync(path.join(dataDir, "..", "kept-log"), path.join(dataDir, "commit-log"), { recursive: true });

    setFaultHook((op, filePath) => (op === "open" && filePath === file ? "EPERM" : undefined));
    const store = await open(dataDir);
    expect(texts((await store.transcripts.read(sessionId, { limit: 10 })).entries)).toEqual([
      "m1",
      "m2",
      "m3",
    ]);
    expect(texts((await store.transcripts.read(other, { limit: 10 })).entries)).toEqual(["m1"]);
    const error = await store.transcripts.append(sessionId, [sampleMessage("no")]).catch((caught) => caught);
    expect(error).toBeInstanceOf(SwitchboardError);
    expect(error.code).toBe("UNAVAILABLE");
    expect(error.message).toContain("EPERM");
    expect(error.message).toContain(file);
    expect((await store.health()).ok).toBe(false);
    await store.transcripts.append(other, [sampleMessage("m2")]);
  });
});

/** Whether `chattr +i` works here (root on a file system with attributes); the real-file test needs it. */
function chattrWorks(): boolean {
  const probe = path.join(os.tmpdir(), `sb-chattr-${process.pid}`);
  fs.writeFileSync(probe, "");
  try {
    const set = spawnSync("chattr", ["+i", probe]);
    if (set.status !== 0) return false;
    spawnSync("chattr", ["-i", probe]);
    return true;
  } catch {
    return false;
  } finally {
    fs.rmSync(probe, { force: true });
  }
}

describe("a really immutable transcript (chattr +i)", () => {
  it.skipIf(!chattrWorks())(
    "is served read-only, refused for appends and reported by the doctor",
    async () => {
      const dataDir = await freshDir();
      const first = await open(dataDir);
      const sessionId = await transcriptWith(first, 2);
      const file = first.transcripts.locate(sessionId);
      await first.close();
      spawnSync("chattr", ["+i", file]);
      cleanups.push(async () => {
        spawnSync("chattr", ["-i", file]);
      });
      const store = await open(dataDir);
      expect(texts((await store.transcripts.read(sessionId, { limit: 10 })).entries)).toEqual(["m1", "m2"]);
      const error = await store.transcripts
        .append(sessionId, [sampleMessage("no")])
        .catch((caught) => caught);
      expect(error.code).toBe("UNAVAILABLE");
      expect(error.message).toMatch(/operation not permitted \(EPERM\)/);
      await store.close();
      const report = await checkDataDir(dataDir);
      expect(report.issues).toContainEqual(
        expect.objectContaining({ severity: "error", code: "not-writable", path: file }),
      );
    },
  );
});

/** A data dir whose sessions index has a snapshot (four rows) and a journal after it (one row). */
async function compactedIndex(): Promise<string> {
  const dataDir = await freshDir();
  const first = await open(dataDir);
  for (let i = 0; i < 4; i++) await first.sessions.put(sampleSession());
  await first.compact();
  await first.sessions.put(sampleSession());
  await first.close();
  return dataDir;
}

describe("the sessions index", () => {
  it("a deleted snapshot refuses the start naming the file and the fix", async () => {
    const dataDir = await compactedIndex();
    const snapshot = fs
      .readdirSync(path.join(dataDir, "sessions"))
      .find((name) => name.startsWith("snapshot-"))!;
    fs.rmSync(path.join(dataDir, "sessions", snapshot));
    const error = await openFileStore({ dataDir, fsyncMode: "none" }).catch((caught) => caught);
    expect(error).toBeInstanceOf(SwitchboardError);
    expect(error.message).toContain(snapshot);
    expect(error.message).toMatch(/doctor --repair/);
  });

  // Before session 22 the start went on with the snapshot's rows only: the rows of the newest
  // journal vanished and their transcripts were archived as orphans, with doctor saying all was well.
  it("a snapshot whose journal is gone refuses the start naming the journal and the fix", async () => {
    const dataDir = await compactedIndex();
    const dir = path.join(dataDir, "sessions");
    const journals = fs.readdirSync(dir).filter((name) => name.startsWith("journal-"));
    expect(journals).toHaveLength(1);
    fs.rmSync(path.join(dir, journals[0]!));
    const error = await openFileStore({ dataDir, fsyncMode: "none" }).catch((caught) => caught);
    expect(error).toBeInstanceOf(SwitchboardError);
    expect(error.message).toContain(`${journals[0]} is missing`);
    expect(error.message).toMatch(/doctor --repair/);
    const report = await checkDataDir(dataDir);
    expect(report.ok).toBe(false);
  });

  it("an index with no files at all beside existing transcripts refuses the start", async () => {
    const dataDir = await freshDir();
    const first = await open(dataDir);
    await transcriptWith(first, 1);
    await first.close();
    fs.rmSync(path.join(dataDir, "sessions"), { recursive: true });
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toThrow(/sessions index is missing/);
  });

  it("a snapshot edited after it was written is detected by its checksum", async () => {
    const dataDir = await freshDir();
    const first = await open(dataDir);
    const row = sampleSession({ taint: "RESTRICTED" });
    await first.sessions.put(row);
    await first.compact();
    await first.close();
    const dir = path.join(dataDir, "sessions");
    const snapshot = path.join(dir, fs.readdirSync(dir).find((name) => name.startsWith("snapshot-"))!);
    fs.writeFileSync(
      snapshot,
      fs.readFileSync(snapshot, "utf8").replace('"taint":"RESTRICTED"', '"taint":"PUBLIC"'),
    );
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toThrow(/checksum mismatch/);
  });

  it("verifies the checksum of a snapshot bigger than one read chunk", async () => {
    const dataDir = await freshDir();
    const first = await open(dataDir);
    const rows = Array.from({ length: 4000 }, (_, i) =>
      sampleSession({ displayName: `${i} ${"d".repeat(190)}` }),
    );
    await Promise.all(rows.map((row) => first.sessions.put(row)));
    await first.compact();
    await first.close();
    const store = await open(dataDir);
    expect(await store.sessions.count()).toBe(4000);
    await store.close();
    const dir = path.join(dataDir, "sessions");
    const snapshot = path.join(dir, fs.readdirSync(dir).find((name) => name.startsWith("snapshot-"))!);
    expect(fs.statSync(snapshot).size).toBeGreaterThan(1024 * 1024 + 200_000);
    // One byte changed past the first chunk.
    const bytes = fs.readFileSync(snapshot);
    const at = bytes.indexOf("dddd", 1024 * 1024 + 100_000);
    bytes[at] = "e".charCodeAt(0);
    fs.writeFileSync(snapshot, bytes);
    await expect(openFileStore({ dataDir, fsyncMode: "none" })).rejects.toThrow(/checksum mismatch/);
  });

  it("still reads a version 1 snapshot (no checksum)", async () => {
    const dataDir = await freshDir();
    const first = await open(dataDir);
    const row = sampleSession();
    await first.sessions.put(row);
    await first.compact();
    await first.close();
    const dir = path.join(dataDir, "sessions");
    const snapshot = path.join(dir, fs.readdirSync(dir).find((name) => name.startsWith("snapshot-"))!);
    const lines = fs.readFileSync(snapshot, "utf8").trimEnd().split("\n");
    const header = { ...JSON.parse(lines[0]!), version: 1 };
    const end = JSON.parse(lines.at(-1)!);
    fs.writeFileSync(
      snapshot,
      `${[JSON.stringify(header), ...lines.slice(1, -1), JSON.stringify({ type: "end", count: end.count })].join("\n")}\n`,
    );
    const store = await open(dataDir);
    expect(await store.sessions.get(row.key)).toEqual(row);
  });
});
