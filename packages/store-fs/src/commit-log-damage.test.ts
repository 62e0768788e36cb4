import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { sampleMessage, sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { recordingLogger, tempDir } from "../test/helpers";
import { checkDataDir } from "./doctor";
import { repairDataDir } from "./doctor-repair";
import { type FileStore, type FileStoreOptions, openFileStore } from "./file-store";

/**
 * The commit log is the only durable copy of an acknowledged append until its segment is
 * checkpointed. A torn last record was never acknowledged and may go; a damaged record with
 * intact ones after it is not a torn write, and the ones after it must not be lost with it.
 */

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function freshDir(): Promise<string> {
  const { dir, cleanup } = await tempDir("sb-commit-log-");
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

function deadPid(): number {
  const child = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], {
    encoding: "utf8",
  });
  return Number(child.stdout);
}

/**
 * A data dir as a crash leaves it after m1..m5 were acknowledged: the commit log holds all five,
 * the transcript file only m1..m<kept> (by default m4 and m5 had not reached the disk).
 */
async function crashedWithFiveAcknowledged(kept = 3): Promise<{
  dataDir: string;
  sessionId: string;
  segment: string;
  transcript: string;
}> {
  const live = await freshDir();
  const store = await open(live);
  const row = sampleSession();
  const sessionId = row.sessionId;
  await store.transcripts.create({ sessionId, key: row.key, createdAt: row.createdAt });
  await store.sessions.put(row);
  for (let i = 1; i <= 5; i++) await store.transcripts.append(sessionId, [sampleMessage(`m${i}`)]);
  const dataDir = `${live}-crashed`;
  fs.cpSync(live, dataDir, { recursive: true });
  fs.writeFileSync(path.join(dataDir, "LOCK"), JSON.stringify({ pid: deadPid() }));
  cleanups.push(() => fs.promises.rm(dataDir, { recursive: true, force: true }));
  const transcript = path.join(dataDir, "transcripts", `${sessionId}.jsonl`);
  const lines = fs
    .readFileSync(transcript, "utf8")
    .split("\n")
    .slice(0, 1 + kept);
  fs.writeFileSync(transcript, `${lines.join("\n")}\n`);
  const segments = fs.readdirSync(path.join(dataDir, "commit-log"));
  expect(segments).toHaveLength(1);
  return { dataDir, sessionId, segment: path.join(dataDir, "commit-log", segments[0]!), transcript };
}

/** Lines of a segment: 0 is the header, then one record per entry (seq N at line N). */
function segmentLines(segment: string): string[] {
  return fs.readFileSync(segment, "utf8").split("\n");
}

describe("a commit-log segment with a damaged record", () => {
  it("in the middle, before intact ones: the open is refused naming the file, offset and doctor; nothing is dropped", async () => {
    const { dataDir, segment } = await crashedWithFiveAcknowledged();
    const lines = segmentLines(segment);
    const offset = Buffer.byteLength(lines.slice(0, 3).join("\n")) + 1;
    lines[3] = `${lines[3]!.slice(0, 60)}\u0000\u0000 garbage`;
    fs.writeFileSync(segment, lines.join("\n"));
    const before = fs.readFileSync(segment);

    const error = await openFileStore({ dataDir, fsyncMode: "none" }).then(
      async (store) => {
        await store.close();
        return undefined;
      },
      (caught: unknown) => caught,
    );
    expect(error, "the open must not silently drop the acknowledged m4 and m5").toBeInstanceOf(
      SwitchboardError,
    );
    const message = (error as Error).message;
    expect(message).toContain(segment);
    expect(message).toContain(`offset ${offset}`);
    expect(message).toContain("switchboard doctor");
    // The evidence stays for a backup restore or the doctor.
    expect(fs.readFileSync(segment)).toEqual(before);
  });

  it("in the middle: doctor reports it on the segment, --repair drops it and the records after it are replayed", async () => {
    const { dataDir, sessionId, segment } = await crashedWithFiveAcknowledged();
    const lines = segmentLines(segment);
    lines[3] = "{garbage";
    fs.writeFileSync(segment, lines.join("\n"));

    const report = await checkDataDir(dataDir);
    const issue = report.issues.find((found) => found.severity === "error" && found.code === "damaged-file");
    expect(issue, JSON.stringify(report.issues, null, 1)).toBeDefined();
    expect(issue!.path).toBe(segment);
    expect(issue!.fix).toContain("switchboard doctor --repair");

    const result = await repairDataDir(dataDir);
    expect(result.report.issues.filter((found) => found.severity === "error")).toEqual([]);
    expect(result.actions.join("\n")).toContain(segment);
    expect(fs.readdirSync(path.join(dataDir, "commit-log")).some((name) => name.includes(".damaged-"))).toBe(
      true,
    );

    const store = await open(dataDir);
    const read = await store.transcripts.read(sessionId, { limit: 10 });
    expect(texts(read.entries)).toEqual(["m1", "m2", "m3", "m4", "m5"]);
  });

  it("as the last complete line (a torn write): dropped with a warning, the records before it replayed", async () => {
    const { dataDir, sessionId, segment } = await crashedWithFiveAcknowledged();
    const lines = segmentLines(segment);
    lines[5] = `${lines[5]!.slice(0, 60)}\u0000\u0000\u0000`;
    fs.writeFileSync(segment, lines.join("\n"));

    const { logger, lines: logged } = recordingLogger();
    const store = await open(dataDir, { logger });
    expect(texts((await store.transcripts.read(sessionId, { limit: 10 })).entries)).toEqual([
      "m1",
      "m2",
      "m3",
      "m4",
    ]);
    expect(logged.some((line) => line.level === "warn" && /torn commit-log tail/.test(line.message))).toBe(
      true,
    );
  });

  it("as the torn end of an older segment, before a newer segment: the newer one is replayed", async () => {
    // A rotation starts the next segment while the previous one's last batch may still be in
    // flight, so only a segment's own tail can be torn without an acknowledged write after it.
    const { dataDir, sessionId, segment } = await crashedWithFiveAcknowledged();
    const lines = segmentLines(segment);
    const number = Number(path.basename(segment, ".log"));
    const header = JSON.parse(lines[0]!) as Record<string, unknown>;
    const next = path.join(path.dirname(segment), `${String(number + 1).padStart(12, "0")}.log`);
    fs.writeFileSync(next, `${[JSON.stringify({ ...header, segment: number + 1 }), lines[5]].join("\n")}\n`);
    fs.writeFileSync(segment, `${[...lines.slice(0, 5), '{"type":"message","seq":6,"i'].join("\n")}\n`);

    const store = await open(dataDir);
    expect(texts((await store.transcripts.read(sessionId, { limit: 10 })).entries)).toEqual([
      "m1",
      "m2",
      "m3",
      "m4",
      "m5",
    ]);
  });
});

/** Zeroes `[start, end)` of a file, as a page that was never written back reads after a power cut. */
function zero(filePath: string, start: number, end: number): void {
  const fd = fs.openSync(filePath, "r+");
  try {
    fs.writeSync(fd, Buffer.alloc(end - start), 0, end - start, start);
  } finally {
    fs.closeSync(fd);
  }
}

/** Where line `index` of a file starts (0 is the header), and where its newline is. */
function lineAt(filePath: string, index: number): { start: number; end: number } {
  const lines = fs.readFileSync(filePath, "utf8").split("\n");
  const start = Buffer.byteLength(lines.slice(0, index).join("\n")) + (index > 0 ? 1 : 0);
  return { start, end: start + Buffer.byteLength(lines[index]!) };
}

describe("a transcript that lost acknowledged entries before its end (a power cut)", () => {
  // Transcripts are not fsynced before their segment's checkpoint, and writeback is not in file
  // order: any page written since may be lost, not only the last one.

  it("gets back, in place and in order, every entry the segment holds that is zeroed in its middle", async () => {
    const { dataDir, sessionId, transcript } = await crashedWithFiveAcknowledged(5);
    // m2 and m3 gone, m4 torn: one damaged line of zeros and m4's end, with m5 intact after it.
    zero(transcript, lineAt(transcript, 2).start, lineAt(transcript, 4).start + 10);
    // Before the open, the doctor tells the damage the replay will mend from an error.
    const before = await checkDataDir(dataDir);
    expect(before.issues.filter((issue) => issue.severity === "error")).toEqual([]);
    expect(before.issues.find((issue) => issue.code === "damaged-line")).toMatchObject({
      severity: "warning",
      message: expect.stringContaining("the next open puts them back"),
    });

    const store = await open(dataDir);
    const read = await store.transcripts.read(sessionId, { limit: 10 });
    expect(read.damaged).toBeUndefined();
    expect(texts(read.entries)).toEqual(["m1", "m2", "m3", "m4", "m5"]);
    expect(read.entries.map((entry) => entry.seq)).toEqual([1, 2, 3, 4, 5]);
    expect((await store.stats()).entriesRestored).toBe(3);
    const [next] = await store.transcripts.append(sessionId, [sampleMessage("m6")]);
    expect(next!.seq).toBe(6);
    await store.close();
    const report = await checkDataDir(dataDir);
    expect(report.issues.filter((issue) => issue.severity === "error")).toEqual([]);
  });

  it("keeps a damaged line the segment cannot fill for the doctor, restoring the entries it does hold", async () => {
    const { dataDir, sessionId } = await lostM2AndM4WithM3ToM5Logged();
    const damaged = (await checkDataDir(dataDir)).issues.filter((issue) => issue.code === "damaged-line");
    // m2 is lost for good (an error); m4 the replay restores (a warning).
    expect(damaged.map((issue) => `${issue.severity}: ${issue.message.split(" (")[0]}`).sort()).toEqual([
      "error: 1 damaged line(s) in the middle of the transcript",
      "warning: 1 damaged line(s) in the middle of the transcript",
    ]);

    const store = await open(dataDir);
    const read = await store.transcripts.read(sessionId, { limit: 10 });
    expect(texts(read.entries)).toEqual(["m1", "m3", "m4", "m5"]);
    expect(read.damaged).toBe(1);
  });

  it("takes a seq logged again in a later segment (a failed commit taken back) over the entries from it on", async () => {
    const { dataDir, sessionId, segment } = await crashedWithFiveAcknowledged();
    const lines = segmentLines(segment);
    const number = Number(path.basename(segment, ".log"));
    const header = JSON.parse(lines[0]!) as Record<string, unknown>;
    const next = path.join(path.dirname(segment), `${String(number + 1).padStart(12, "0")}.log`);
    fs.writeFileSync(
      next,
      `${[JSON.stringify({ ...header, segment: number + 1 }), lines[4]!.replace('"m4"', '"m4 again"')].join("\n")}\n`,
    );

    const store = await open(dataDir);
    expect(texts((await store.transcripts.read(sessionId, { limit: 10 })).entries)).toEqual([
      "m1",
      "m2",
      "m3",
      "m4 again",
    ]);
  });

  it("after a kill or a lost tail only appends what is missing: the file is not rewritten", async () => {
    const { dataDir, sessionId, transcript } = await crashedWithFiveAcknowledged();
    const inode = fs.statSync(transcript).ino;
    const store = await open(dataDir);
    const read = await store.transcripts.read(sessionId, { limit: 10 });
    expect(read.entries.map((entry) => entry.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(fs.statSync(transcript).ino).toBe(inode);
  });

  it("doctor --repair leaves a damaged line the segment can fill to the replay instead of dropping it", async () => {
    const { dataDir, sessionId, transcript } = await crashedWithFiveAcknowledged(5);
    zero(transcript, lineAt(transcript, 2).start, lineAt(transcript, 4).start + 10);

    const result = await repairDataDir(dataDir);
    const store = await open(dataDir);
    const read = await store.transcripts.read(sessionId, { limit: 10 });
    expect(texts(read.entries)).toEqual(["m1", "m2", "m3", "m4", "m5"]);
    expect(read.damaged).toBeUndefined();
    expect(result.report.issues.filter((issue) => issue.severity === "error")).toEqual([]);
    expect(result.actions.join("\n")).toContain("restored 3 acknowledged transcript entries");
  });

  it("doctor --repair still drops, after the replay, a damaged line the segment cannot fill", async () => {
    const { dataDir, sessionId } = await lostM2AndM4WithM3ToM5Logged();

    const result = await repairDataDir(dataDir);
    const store = await open(dataDir);
    const read = await store.transcripts.read(sessionId, { limit: 10 });
    expect(texts(read.entries)).toEqual(["m1", "m3", "m4", "m5"]);
    expect(read.damaged).toBeUndefined();
    expect(result.report.issues.filter((issue) => issue.severity === "error")).toEqual([]);
    expect(result.actions.join("\n")).toMatch(/dropped 1 damaged line/);
  });
});

/**
 * A crash after five acknowledged entries where m1 and m2 were checkpointed with an earlier segment
 * (the pending one holds m3..m5 only), then lines m2 and m4 zeroed: the log can restore m4, not m2.
 */
async function lostM2AndM4WithM3ToM5Logged() {
  const crashed = await crashedWithFiveAcknowledged(5);
  const records = segmentLines(crashed.segment);
  fs.writeFileSync(crashed.segment, [records[0], ...records.slice(3)].join("\n"));
  const m2 = lineAt(crashed.transcript, 2);
  const m4 = lineAt(crashed.transcript, 4);
  zero(crashed.transcript, m2.start, m2.end);
  zero(crashed.transcript, m4.start, m4.end);
  return crashed;
}
