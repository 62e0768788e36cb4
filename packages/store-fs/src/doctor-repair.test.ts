import fs from "node:fs";
import path from "node:path";
import { resetSessionTranscript, type SessionEntry } from "@switchboard/core";
import { sampleMessage, sampleRun, sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../test/helpers";
import { checkDataDir, type DoctorIssue } from "./doctor";
import { repairDataDir } from "./doctor-repair";
import { type FileStore, openFileStore } from "./file-store";
import { setFaultHook } from "./fs-io";

/**
 * Every damage case the doctor must report as an error with the file and the fix, and what
 * `--repair` makes of it: afterwards the doctor is happy and the store opens with the data.
 */

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  setFaultHook(undefined);
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function freshDir(): Promise<string> {
  const { dir, cleanup } = await tempDir("sb-repair-");
  cleanups.push(cleanup);
  return path.join(dir, "data");
}

async function open(dataDir: string): Promise<FileStore> {
  return openFileStore({ dataDir, fsyncMode: "none" });
}

/** A session with a transcript holding messages and, optionally, a taint rise. */
async function session(
  store: FileStore,
  overrides: Partial<SessionEntry> = {},
  taint?: SessionEntry["taint"],
) {
  const row = sampleSession({ taint: taint ?? "PUBLIC", clearance: "RESTRICTED", ...overrides });
  await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: row.createdAt });
  await store.transcripts.append(row.sessionId, [sampleMessage("one"), sampleMessage("two")]);
  if (taint && taint !== "PUBLIC") {
    await store.transcripts.append(row.sessionId, [
      { type: "taint", label: taint, taint: { from: "PUBLIC", to: taint, reason: "test", source: "test" } },
    ]);
  }
  await store.sessions.put(row);
  return row;
}

function errors(issues: DoctorIssue[]) {
  return issues.filter((issue) => issue.severity === "error");
}

function expectErrorWithFileAndFix(issues: DoctorIssue[], code: string, file: string | RegExp): DoctorIssue {
  const matches = (at: string | undefined) =>
    at !== undefined && (typeof file === "string" ? at === file : file.test(at));
  const issue = errors(issues).find((candidate) => candidate.code === code && matches(candidate.path));
  expect(issue, `an error ${code} for ${file} in ${JSON.stringify(issues, null, 1)}`).toBeDefined();
  expect(issue!.fix).toBeTruthy();
  return issue!;
}

async function expectHealthyAfterRepair(dataDir: string) {
  const result = await repairDataDir(dataDir);
  expect(errors(result.report.issues)).toEqual([]);
  expect(result.actions.length).toBeGreaterThan(0);
  return result;
}

describe("doctor and doctor --repair", () => {
  it("a queued run whose session was reset: reported, then marked failed (the data dir starts again)", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const row = await session(store);
    const run = sampleRun({ sessionKey: row.key, sessionId: row.sessionId, status: "queued" });
    await store.runs.put(run);
    const now = Date.now();
    await resetSessionTranscript(store, row.sessionId, { ...row, sessionId: crypto.randomUUID() }, now);
    await store.close();

    const report = await checkDataDir(dataDir);
    // The gateway's start ends such a run itself: a warning, not an error that fails `doctor`.
    expect(report.ok).toBe(true);
    const issue = report.issues.find((candidate) => candidate.code === "orphan-run")!;
    expect(issue).toMatchObject({ severity: "warning", path: path.join(dataDir, "runs") });
    expect(issue.fix).toBeTruthy();
    expect(issue.runId).toBe(run.runId);
    expect(issue.message).toContain(row.sessionId);

    const result = await expectHealthyAfterRepair(dataDir);
    expect(result.actions.join("\n")).toContain(run.runId);
    const again = await open(dataDir);
    expect((await again.runs.get(run.runId))?.status).toBe("error");
    await again.close();
  });

  it("a damaged middle line of a transcript: reported, then dropped with the original archived", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const row = await session(store);
    await store.transcripts.append(row.sessionId, [sampleMessage("three")]);
    const file = store.transcripts.locate(row.sessionId);
    await store.close();
    const lines = fs.readFileSync(file, "utf8").split("\n");
    lines[2] = "{garbage";
    fs.writeFileSync(file, lines.join("\n"));

    expectErrorWithFileAndFix((await checkDataDir(dataDir)).issues, "damaged-line", file);
    await expectHealthyAfterRepair(dataDir);
    const again = await open(dataDir);
    const { entries } = await again.transcripts.read(row.sessionId, { limit: 10 });
    expect(entries.map((entry) => entry.seq)).toEqual([1, 3]);
    await again.close();
    const archived = fs.readdirSync(path.join(dataDir, "archive"));
    expect(
      archived.some((name) => name.startsWith(`${row.sessionId}.`) && name.endsWith(".damaged.jsonl")),
    ).toBe(true);
  });

  it("a deleted sessions snapshot: reported, start refused, rebuilt with every session and its taint", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const tainted: SessionEntry[] = [];
    for (let i = 0; i < 30; i++)
      tainted.push(await session(store, {}, i % 3 === 0 ? "CONFIDENTIAL" : "PUBLIC"));
    await store.compact();
    const late = await session(store, { label: "late" });
    await store.close();
    const dir = path.join(dataDir, "sessions");
    const snapshot = path.join(dir, fs.readdirSync(dir).find((name) => name.startsWith("snapshot-"))!);
    fs.rmSync(snapshot);

    expectErrorWithFileAndFix((await checkDataDir(dataDir)).issues, "incomplete-index", snapshot);
    await expect(open(dataDir)).rejects.toThrow(/doctor --repair/);
    await expectHealthyAfterRepair(dataDir);
    const again = await open(dataDir);
    expect(await again.sessions.count()).toBe(31);
    for (const row of tainted) {
      const rebuilt = await again.sessions.get(row.key);
      expect(rebuilt?.sessionId).toBe(row.sessionId);
      expect(rebuilt?.taint).toBe(row.taint);
    }
    // Rows the surviving journal holds keep all their settings.
    expect(await again.sessions.get(late.key)).toEqual(late);
    await again.close();
  });

  it("a sessions index deleted outright is rebuilt from the transcripts", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const row = await session(store, {}, "RESTRICTED");
    await store.close();
    fs.rmSync(path.join(dataDir, "sessions"), { recursive: true });

    expectErrorWithFileAndFix(
      (await checkDataDir(dataDir)).issues,
      "missing-index",
      path.join(dataDir, "sessions"),
    );
    await expectHealthyAfterRepair(dataDir);
    const again = await open(dataDir);
    expect(await again.sessions.get(row.key)).toMatchObject({
      sessionId: row.sessionId,
      taint: "RESTRICTED",
    });
    await again.close();
  });

  it("a snapshot edited to lower a taint: detected, and the taint comes back from the transcript", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const row = await session(store, {}, "RESTRICTED");
    await store.compact();
    await store.close();
    const dir = path.join(dataDir, "sessions");
    const snapshot = path.join(dir, fs.readdirSync(dir).find((name) => name.startsWith("snapshot-"))!);
    fs.writeFileSync(
      snapshot,
      fs.readFileSync(snapshot, "utf8").replace('"taint":"RESTRICTED"', '"taint":"PUBLIC"'),
    );

    const issue = expectErrorWithFileAndFix((await checkDataDir(dataDir)).issues, "damaged-file", snapshot);
    expect(issue.message).toMatch(/checksum/);
    await expectHealthyAfterRepair(dataDir);
    const again = await open(dataDir);
    expect((await again.sessions.get(row.key))?.taint).toBe("RESTRICTED");
    await again.close();
  });

  it("a journal edited to lower a taint: reported against the transcript's taint entries, then raised back", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const row = await session(store, {}, "CONFIDENTIAL");
    await store.close();
    const dir = path.join(dataDir, "sessions");
    const journal = path.join(dir, fs.readdirSync(dir).find((name) => name.startsWith("journal-"))!);
    fs.writeFileSync(
      journal,
      fs.readFileSync(journal, "utf8").replace('"taint":"CONFIDENTIAL"', '"taint":"PUBLIC"'),
    );

    const issue = expectErrorWithFileAndFix((await checkDataDir(dataDir)).issues, "lowered-taint", dir);
    expect(issue.key).toBe(row.key);
    await expectHealthyAfterRepair(dataDir);
    const again = await open(dataDir);
    expect((await again.sessions.get(row.key))?.taint).toBe("CONFIDENTIAL");
    await again.close();
  });

  it("a garbled transcript header: reported, then rewritten from the index row", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const row = await session(store);
    const file = store.transcripts.locate(row.sessionId);
    await store.close();
    const lines = fs.readFileSync(file, "utf8").split("\n");
    lines[0] = '{"type":"sess';
    fs.writeFileSync(file, lines.join("\n"));

    expectErrorWithFileAndFix((await checkDataDir(dataDir)).issues, "bad-header", file);
    await expectHealthyAfterRepair(dataDir);
    const again = await open(dataDir);
    expect((await again.transcripts.read(row.sessionId, { limit: 10 })).entries).toHaveLength(2);
    await again.close();
  });

  it("a row whose transcript only sits in the archive gets it back", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const row = await session(store);
    // What the old reset order left after a kill: archived, but the row not yet switched.
    await store.transcripts.archive(row.sessionId, "reset");
    await store.close();

    expectErrorWithFileAndFix(
      (await checkDataDir(dataDir)).issues,
      "missing-transcript",
      path.join(dataDir, "transcripts", `${row.sessionId}.jsonl`),
    );
    await expectHealthyAfterRepair(dataDir);
    const again = await open(dataDir);
    expect((await again.transcripts.read(row.sessionId, { limit: 10 })).entries).toHaveLength(2);
    await again.close();
  });

  it("an unwritable transcript is an error naming the file and the fix (not repaired)", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    const row = await session(store);
    const file = store.transcripts.locate(row.sessionId);
    await store.close();
    setFaultHook((op, filePath) => (op === "open" && filePath === file ? "EPERM" : undefined));
    const issue = expectErrorWithFileAndFix((await checkDataDir(dataDir)).issues, "not-writable", file);
    expect(issue.fix).toContain(`chattr -i ${file}`);
  });

  it("an unwritable sessions journal or audit log is an error naming the file", async () => {
    const dataDir = await freshDir();
    await (await open(dataDir)).close();
    const audit = path.join(dataDir, "audit", "audit.jsonl");
    setFaultHook((op, filePath) =>
      op === "open" && (filePath === audit || filePath.includes(`sessions${path.sep}journal-`))
        ? "EACCES"
        : undefined,
    );
    const issues = (await checkDataDir(dataDir)).issues;
    expectErrorWithFileAndFix(issues, "not-writable", audit);
    expectErrorWithFileAndFix(issues, "not-writable", /sessions.journal-\d+\.jsonl$/);
  });

  it("refuses to repair while a gateway holds the data dir", async () => {
    const dataDir = await freshDir();
    const store = await open(dataDir);
    await expect(repairDataDir(dataDir)).rejects.toThrow(/in use by pid/);
    await store.close();
  });
});

/** Replaces record `index` (1: the first after the header) of the journal in `dir`; returns its path. */
function replaceJournalRecord(dir: string, index: number, record: string): string {
  const file = path.join(dir, fs.readdirSync(dir).find((name) => /^journal-\d{12}\.jsonl$/.test(name))!);
  const lines = fs.readFileSync(file, "utf8").split("\n");
  lines[index] = record;
  fs.writeFileSync(file, lines.join("\n"));
  return file;
}

describe("doctor --repair of journal records that are valid JSON of the wrong shape", () => {
  // The open refuses each as a damaged record before intact ones (since session 14); the repair
  // must drop exactly what the open refuses, or the data dir stays down however often it runs.
  for (const [name, record] of [
    ["a put of null", '{"op":"put","value":null}'],
    ["an unknown op", '{"op":"bogus"}'],
    ["a row whose key is a number", '{"op":"put","value":{"key":42}}'],
    ["a row without a key", '{"op":"put","value":{"sessionId":"x"}}'],
    ["a del without a key", '{"op":"del"}'],
    ["a row the reviver cannot take", '{"op":"put","value":{"key":"k","deliveryContext":"x"}}'],
  ] as const) {
    it(`sessions, ${name}: reported, dropped (kept in the copy), and the store opens with the intact rows`, async () => {
      const dataDir = await freshDir();
      const store = await open(dataDir);
      const rows = [await session(store), await session(store), await session(store)];
      await store.close();
      // Record 1 is the first row's: lost with the damage (its transcript is archived as an orphan).
      const journal = replaceJournalRecord(path.join(dataDir, "sessions"), 1, record);
      await expect(open(dataDir)).rejects.toThrow(/doctor --repair/);
      expectErrorWithFileAndFix((await checkDataDir(dataDir)).issues, "damaged-file", journal);

      const result = await expectHealthyAfterRepair(dataDir);
      const kept = result.actions.join("\n").match(/original kept as (\S+)\)/)?.[1];
      expect(kept, result.actions.join("\n")).toBeDefined();
      expect(fs.readFileSync(kept!, "utf8").split("\n")[1]).toBe(record);
      const again = await open(dataDir);
      for (const row of rows.slice(1)) expect(await again.sessions.get(row.key)).toEqual(row);
      expect(await again.sessions.count()).toBe(2);
      await again.close();
      // Nothing is left to do: a second repair changes nothing.
      expect((await repairDataDir(dataDir)).actions).toEqual([]);
    });
  }

  for (const [map, record] of [
    ["runs", '{"op":"put","value":{"status":"ok"}}'],
    ["runs", '{"op":"put","value":{"runId":7,"status":"ok"}}'],
    ["meta", '{"op":"put","value":{"value":"v"}}'],
    ["meta", '{"op":"del","key":["x"]}'],
  ] as const) {
    it(`${map}, ${record}: dropped without rebuilding a snapshot, and the store opens with the intact records`, async () => {
      const dataDir = await freshDir();
      const store = await open(dataDir);
      const runs = [sampleRun({ status: "ok", endedAt: 5 }), sampleRun({ status: "ok", endedAt: 6 })];
      for (const run of runs) await store.runs.put(run);
      await store.meta.set("test:a", "a");
      await store.meta.set("test:b", "b");
      await store.close();
      const dir = path.join(dataDir, map);
      // The first record is replaced when the damage is a put; a del goes in as a record of its own.
      if (record.includes('"del"')) {
        const file = path.join(dir, fs.readdirSync(dir).find((name) => name.startsWith("journal-"))!);
        const lines = fs.readFileSync(file, "utf8").split("\n");
        lines.splice(1, 0, record);
        fs.writeFileSync(file, lines.join("\n"));
      } else replaceJournalRecord(dir, 1, record);
      await expect(open(dataDir)).rejects.toThrow(/doctor --repair/);
      expect((await checkDataDir(dataDir)).ok).toBe(false);

      await expectHealthyAfterRepair(dataDir);
      // Only the journal was rewritten: no snapshot holding the bad row.
      expect(fs.readdirSync(dir).filter((name) => name.startsWith("snapshot-"))).toEqual([]);
      const again = await open(dataDir);
      const keptRuns = map === "runs" ? runs.slice(1) : runs;
      expect((await again.runs.list({})).map((run) => run.runId).sort()).toEqual(
        keptRuns.map((run) => run.runId).sort(),
      );
      const a = await again.meta.get("test:a");
      expect(a).toBe(map === "meta" && !record.includes('"del"') ? undefined : "a");
      expect(await again.meta.get("test:b")).toBe("b");
      await again.close();
    });
  }
});

describe("a journaled map whose dir holds only a repair's kept copies", () => {
  // What a kill -9 between moving a journal aside and writing its replacement left (repairs before
  // the original was kept in place): an empty map would open silently, every run (or meta value) lost.
  for (const map of ["runs", "meta", "sessions"] as const) {
    it(`${map}: the start is refused and the doctor reports it; the repair puts the copy back`, async () => {
      const dataDir = await freshDir();
      const store = await open(dataDir);
      const runs = [sampleRun({ status: "ok", endedAt: 5 }), sampleRun({ status: "ok", endedAt: 6 })];
      for (const run of runs) await store.runs.put(run);
      await store.meta.set("test:a", "a");
      await store.sessions.put(sampleSession({ key: "agent:main:only-row" }));
      await store.close();
      const dir = path.join(dataDir, map);
      for (const name of fs.readdirSync(dir))
        fs.renameSync(path.join(dir, name), path.join(dir, `${name}.damaged-2020-01-01T00-00-00-000Z`));

      await expect(open(dataDir)).rejects.toThrow(
        new RegExp(`${map} (map|index) is missing: .*only 1 copy .*doctor --repair`),
      );
      expectErrorWithFileAndFix((await checkDataDir(dataDir)).issues, "incomplete-index", dir);

      const result = await repairDataDir(dataDir);
      expect(result.actions.join("\n")).toMatch(/put .*damaged-2020-01-01T00-00-00-000Z back as/);
      const again = await open(dataDir);
      expect((await again.runs.list({})).map((run) => run.runId).sort()).toEqual(
        runs.map((run) => run.runId).sort(),
      );
      expect(await again.meta.get("test:a")).toBe("a");
      expect(await again.sessions.get("agent:main:only-row")).toBeDefined();
      await again.close();
      // The kept copy stays.
      expect(fs.readdirSync(dir).some((name) => name.endsWith(".damaged-2020-01-01T00-00-00-000Z"))).toBe(
        true,
      );
    });
  }
});
