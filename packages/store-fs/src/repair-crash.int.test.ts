import fs from "node:fs";
import path from "node:path";
import { sampleRun } from "@switchboard/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleChild, runChildUntilKilled } from "../test/bundle-child";
import { tempDir } from "../test/helpers";
import { checkDataDir } from "./doctor";
import { repairDataDir } from "./doctor-repair";
import { openFileStore } from "./file-store";

/**
 * Crash test of `doctor --repair` (hostile review, finding 2): a child repairs a data dir whose runs
 * and meta maps hold a damaged record (or a damaged snapshot) and is killed with SIGKILL at each
 * file operation of replacing one of their files. After every kill the map is whole, or the open
 * refuses it and the doctor says so: never an empty or partial map opened silently. A second repair
 * then finishes the job and the store opens with every intact record.
 */

let workDir: string;
let removeWorkDir: () => Promise<void>;
let childScript: string;

beforeAll(async () => {
  ({ dir: workDir, cleanup: removeWorkDir } = await tempDir("sb-repair-crash-"));
  childScript = await bundleChild("repair-crash-child", workDir);
});

afterAll(async () => {
  await removeWorkDir?.();
});

const META = Array.from({ length: 5 }, (_, i) => [`test:value-${i}`, `v${i}`] as const);

/** Replaces line `index` of the only (or the newest) file named `prefix…` in `dir` with garbage. */
function garble(dir: string, prefix: string, index: number): void {
  const name = fs
    .readdirSync(dir)
    .filter((entry) => entry.startsWith(prefix) && entry.endsWith(".jsonl"))
    .sort()
    .at(-1)!;
  const file = path.join(dir, name);
  const lines = fs.readFileSync(file, "utf8").split("\n");
  lines[index] = "{garbage";
  fs.writeFileSync(file, lines.join("\n"));
}

/**
 * 5 ended runs and 5 meta values, each map with its 3rd record damaged (journals), or its snapshot's
 * 2nd row damaged (`snapshot`; a 6th run then sits in the journal after it). Returns the run ids
 * and meta values a repair keeps.
 */
async function damagedDataDir(dataDir: string, kind: "journal" | "snapshot") {
  const store = await openFileStore({ dataDir, fsyncMode: "none" });
  const runs = [];
  for (let i = 0; i < 5; i++) {
    const run = sampleRun({ status: "ok", endedAt: 10 + i });
    runs.push(run.runId);
    await store.runs.put(run);
  }
  for (const [name, value] of META) await store.meta.set(name, value);
  if (kind === "snapshot") {
    await store.compact();
    const last = sampleRun({ status: "ok", endedAt: 20 });
    runs.push(last.runId);
    await store.runs.put(last);
  }
  await store.close();
  if (kind === "journal") {
    garble(path.join(dataDir, "runs"), "journal-", 3);
    garble(path.join(dataDir, "meta"), "journal-", 3);
    // Line 3 holds the 3rd record (after the header).
    runs.splice(2, 1);
  } else {
    garble(path.join(dataDir, "runs"), "snapshot-", 2);
    garble(path.join(dataDir, "meta"), "snapshot-", 2);
    // Line 2 holds the snapshot's 2nd row: unreadable, so the rebuild cannot keep it.
    runs.splice(1, 1);
  }
  return { runs };
}

/** The store's runs and test meta values, or the error its open fails with. */
async function opened(
  dataDir: string,
): Promise<{ refused: string } | { runs: string[]; meta: Map<string, string> }> {
  let store: Awaited<ReturnType<typeof openFileStore>>;
  try {
    store = await openFileStore({ dataDir, fsyncMode: "none" });
  } catch (error) {
    return { refused: String(error) };
  }
  try {
    const runs = (await store.runs.list({})).map((run) => run.runId);
    const meta = new Map<string, string>();
    for (const [name] of META) {
      const value = await store.meta.get(name);
      if (value !== undefined) meta.set(name, value);
    }
    return { runs, meta };
  } finally {
    await store.close();
  }
}

const KILL_POINTS: Array<{ kind: "journal" | "snapshot"; kill: string }> = [
  // Dropping the damaged record of a journal: keeping the original, writing and syncing the
  // replacement, renaming it over the journal.
  ...["runs", "meta"].flatMap((map) =>
    ["link", "open", "write", "sync", "rename"].map((op) => ({
      kind: "journal" as const,
      kill: `${op}:${map}/journal-000000000001.jsonl:1`,
    })),
  ),
  // Rebuilding a damaged snapshot in place.
  ...["runs", "meta"].flatMap((map) =>
    ["link", "open", "sync", "rename"].map((op) => ({
      kind: "snapshot" as const,
      kill: `${op}:${map}/snapshot-000000000002.jsonl:1`,
    })),
  ),
];

describe("doctor --repair under kill -9", () => {
  for (const { kind, kill } of KILL_POINTS) {
    it(`killed at ${kill} (damaged ${kind}): the runs and meta maps are whole or refused, and a second repair finishes`, {
      timeout: 60_000,
    }, async () => {
      const dataDir = path.join(workDir, `${kind}-${kill.replace(/[^a-z0-9]+/gi, "-")}`);
      const { runs } = await damagedDataDir(dataDir, kind);
      const keptMeta = kind === "journal" ? META.filter((_, i) => i !== 2) : META.filter((_, i) => i !== 1);
      expect(await opened(dataDir)).toMatchObject({ refused: expect.stringMatching(/doctor --repair/) });

      const result = await runChildUntilKilled(childScript, [dataDir, kill], 30_000);
      expect(result.signal, `the repair was not killed at ${kill}: ${result.stdout}${result.stderr}`).toBe(
        "SIGKILL",
      );

      const report = await checkDataDir(dataDir);
      const after = await opened(dataDir);
      if ("refused" in after) {
        // Refused, pointing at the repair, and the doctor says so too.
        expect(after.refused).toMatch(/doctor --repair/);
        expect(report.ok, JSON.stringify(report.issues, null, 1)).toBe(false);
      } else {
        // Opened: then with every intact record, never fewer.
        expect(after.runs.sort()).toEqual([...runs].sort());
        for (const [name, value] of keptMeta) expect(after.meta.get(name), name).toBe(value);
      }

      const again = await repairDataDir(dataDir);
      expect(again.report.issues.filter((issue) => issue.severity === "error")).toEqual([]);
      const repaired = await opened(dataDir);
      if ("refused" in repaired) throw new Error(`still refused after a second repair: ${repaired.refused}`);
      expect(repaired.runs.sort()).toEqual([...runs].sort());
      for (const [name, value] of keptMeta) expect(repaired.meta.get(name), name).toBe(value);
    });
  }
});
