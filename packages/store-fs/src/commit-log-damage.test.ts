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
 * the transcript file only m1..m3 (m4 and m5 had not reached the disk).
 */
async function crashedWithFiveAcknowledged(): Promise<{
  dataDir: string;
  sessionId: string;
  segment: string;
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
  const kept = fs.readFileSync(transcript, "utf8").split("\n").slice(0, 4);
  fs.writeFileSync(transcript, `${kept.join("\n")}\n`);
  const segments = fs.readdirSync(path.join(dataDir, "commit-log"));
  expect(segments).toHaveLength(1);
  return { dataDir, sessionId, segment: path.join(dataDir, "commit-log", segments[0]!) };
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
