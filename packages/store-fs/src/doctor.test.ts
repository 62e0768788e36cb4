import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { sampleMessage, sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../test/helpers";
import { checkDataDir } from "./doctor";
import { openFileStore } from "./file-store";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function freshDir(): Promise<string> {
  const { dir, cleanup } = await tempDir();
  cleanups.push(cleanup);
  return path.join(dir, "data");
}

/** Everything about a tree that a write would change. */
function fingerprint(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const visit = (at: string) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const full = path.join(at, entry.name);
      const stats = fs.statSync(full);
      const content = entry.isDirectory()
        ? ""
        : createHash("sha256").update(fs.readFileSync(full)).digest("hex");
      out[path.relative(dir, full)] = `${stats.mode}:${stats.size}:${stats.mtimeMs}:${content}`;
      if (entry.isDirectory()) visit(full);
    }
  };
  visit(dir);
  return out;
}

describe("checkDataDir", () => {
  it("reports a healthy store as ok", async () => {
    const dataDir = await freshDir();
    const store = await openFileStore({ dataDir, fsyncMode: "none" });
    const row = sampleSession();
    await store.sessions.put(row);
    await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
    await store.transcripts.append(row.sessionId, [sampleMessage("hi")]);
    await store.transcripts.archive((await store.sessions.get(row.key))!.sessionId, "reset");
    await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 2 });
    await store.close();
    const report = await checkDataDir(dataDir);
    expect(report).toMatchObject({
      ok: true,
      formatVersion: 1,
      issues: [],
      counts: { sessions: 1, runs: 0, transcripts: 1, archivedTranscripts: 1, pendingCommitEntries: 0 },
    });
  });

  it("finds torn tails, orphans, missing transcripts, header mismatches and a stale lock, and changes nothing", async () => {
    const dataDir = await freshDir();
    const store = await openFileStore({ dataDir, fsyncMode: "none" });
    const healthy = sampleSession({ key: "agent:main:healthy" });
    const missing = sampleSession({ key: "agent:main:missing" });
    const torn = sampleSession({ key: "agent:main:torn" });
    const mismatched = sampleSession({ key: "agent:main:mismatched" });
    const orphan = crypto.randomUUID();
    for (const row of [healthy, missing, torn, mismatched]) await store.sessions.put(row);
    for (const [sessionId, key] of [
      [healthy.sessionId, healthy.key],
      [torn.sessionId, torn.key],
      [orphan, "agent:main:gone"],
    ] as const) {
      await store.transcripts.create({ sessionId, key, createdAt: 1 });
      await store.transcripts.append(sessionId, [sampleMessage("x")]);
    }
    await store.close();
    const transcripts = path.join(dataDir, "transcripts");
    fs.appendFileSync(path.join(transcripts, `${torn.sessionId}.jsonl`), '{"type":"message","se');
    fs.copyFileSync(
      path.join(transcripts, `${healthy.sessionId}.jsonl`),
      path.join(transcripts, `${mismatched.sessionId}.jsonl`),
    );
    fs.writeFileSync(path.join(transcripts, "notes.txt"), "not a transcript");
    const dead = Number(
      spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" })
        .stdout,
    );
    fs.writeFileSync(path.join(dataDir, "LOCK"), JSON.stringify({ pid: dead }));

    const before = fingerprint(dataDir);
    const report = await checkDataDir(dataDir);
    expect(fingerprint(dataDir)).toEqual(before);

    const found = report.issues.map((issue) => [
      issue.severity,
      issue.code,
      issue.sessionId ?? issue.key ?? "",
    ]);
    expect(found).toEqual(
      expect.arrayContaining([
        ["warning", "stale-lock", ""],
        ["warning", "torn-tail", torn.sessionId],
        ["warning", "orphan-transcript", orphan],
        ["error", "missing-transcript", missing.sessionId],
        ["error", "header-mismatch", mismatched.sessionId],
        ["warning", "invalid-file-name", ""],
      ]),
    );
    expect(report.issues).toHaveLength(6);
    expect(report.ok).toBe(false);
    expect(report.issues.find((issue) => issue.code === "missing-transcript")?.key).toBe(missing.key);
    expect(report.issues.find((issue) => issue.code === "stale-lock")?.message).toContain(`pid ${dead}`);
    expect(report.counts).toMatchObject({ sessions: 4, transcripts: 4 });
  });

  it("reports a newer format, a missing dir and a store without VERSION", async () => {
    const dataDir = await freshDir();
    expect((await checkDataDir(dataDir)).issues.map((issue) => issue.code)).toEqual(["missing-data-dir"]);
    await (await openFileStore({ dataDir, fsyncMode: "none" })).close();
    fs.writeFileSync(
      path.join(dataDir, "VERSION"),
      JSON.stringify({ format: "switchboard-file-store", version: 5 }),
    );
    const newer = await checkDataDir(dataDir);
    expect(newer).toMatchObject({ ok: false, formatVersion: 5 });
    expect(newer.issues[0]).toMatchObject({ severity: "error", code: "unsupported-version" });
    expect(newer.issues[0]!.message).toContain("newer than this Switchboard supports (1)");
    fs.rmSync(path.join(dataDir, "VERSION"));
    const unmarked = await checkDataDir(dataDir);
    expect(unmarked.issues[0]).toMatchObject({ severity: "error", code: "missing-version" });
  });

  it("counts commit-log entries an unclean shutdown left pending", async () => {
    const dataDir = await freshDir();
    const store = await openFileStore({ dataDir, fsyncMode: "none" });
    const row = sampleSession();
    await store.sessions.put(row);
    await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
    await store.transcripts.append(row.sessionId, [sampleMessage("a"), sampleMessage("b")]);
    const report = await checkDataDir(dataDir);
    expect(report.counts.pendingCommitEntries).toBe(2);
    expect(report.issues.map((issue) => issue.code).sort()).toEqual(["live-lock", "pending-commit-log"]);
    await store.close();
  });
});
