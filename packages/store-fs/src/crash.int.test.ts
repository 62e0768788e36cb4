import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleChild } from "../test/bundle-child";
import { tempDir } from "../test/helpers";
import { checkDataDir } from "./doctor";
import { openFileStore } from "./file-store";

/**
 * Crash test (quality bar): a child process writes under load and is killed with SIGKILL at a
 * random moment, over and over on the same data dir. After every kill the store must open and
 * hold every write the child reported as acknowledged, with nothing corrupt or duplicated.
 */

const ROUNDS = 20;

let workDir: string;
let removeWorkDir: () => Promise<void>;
let childScript: string;

beforeAll(async () => {
  ({ dir: workDir, cleanup: removeWorkDir } = await tempDir("sb-crash-"));
  childScript = await bundleChild("crash-child", workDir);
});

afterAll(async () => {
  await removeWorkDir?.();
});

interface Acknowledged {
  entries: Map<string, Map<number, string>>;
  rows: Map<string, number>;
  auditIndex: number;
  runs: string[];
}

function parseAcknowledged(output: string, into: Acknowledged): void {
  const lines = output.split("\n");
  // The last line may be cut by the kill; only newline-terminated lines count.
  lines.pop();
  for (const line of lines) {
    const [kind, a, b, c] = line.split(" ");
    if (kind === "T") {
      const bySeq = into.entries.get(a!) ?? new Map<number, string>();
      into.entries.set(a!, bySeq);
      expect(bySeq.has(Number(b)), `seq ${b} of ${a} acknowledged twice`).toBe(false);
      bySeq.set(Number(b), c!);
    } else if (kind === "S") into.rows.set(a!, Math.max(into.rows.get(a!) ?? 0, Number(b)));
    else if (kind === "A") into.auditIndex = Math.max(into.auditIndex, Number(a));
    else if (kind === "R") into.runs.push(a!);
  }
}

function runChild(dataDir: string, sessionIds: string[], seed: number, killAfterMs: number) {
  const child: ChildProcess = spawn(
    process.execPath,
    [childScript, dataDir, JSON.stringify(sessionIds), String(seed)],
    {
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
  });
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  return new Promise<{ stdout: string; stderr: string; signal: NodeJS.Signals | null; code: number | null }>(
    (resolve) => {
      const timer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
      child.on("close", (code, signal) => {
        clearTimeout(timer);
        resolve({ stdout, stderr, signal, code });
      });
    },
  );
}

describe("crash safety", () => {
  it(`keeps every acknowledged write through ${ROUNDS} kill -9 rounds`, { timeout: 120_000 }, async () => {
    const dataDir = path.join(workDir, "data");
    const sessionIds = Array.from({ length: 6 }, () => crypto.randomUUID());
    const setup = await openFileStore({ dataDir, fsyncMode: "none" });
    for (const sessionId of sessionIds) {
      await setup.transcripts.create({ sessionId, key: `agent:main:crash:${sessionId}`, createdAt: 1 });
    }
    await setup.close();

    const acknowledged: Acknowledged = { entries: new Map(), rows: new Map(), auditIndex: -1, runs: [] };
    let killsWhileWriting = 0;
    const verifiedUpTo = new Map<string, number>();
    for (let round = 0; round < ROUNDS; round++) {
      // Some kills land during start-up (lock take-over, replay), most under write load.
      const killAfterMs = 120 + Math.floor(Math.random() * 500);
      const result = await runChild(dataDir, sessionIds, round * 7919 + 17, killAfterMs);
      expect(result.signal, `child exited by itself: ${result.stderr}`).toBe("SIGKILL");
      parseAcknowledged(result.stdout, acknowledged);
      if (result.stdout.includes("ready\n")) killsWhileWriting++;

      const report = await checkDataDir(dataDir);
      expect(report.issues.filter((issue) => issue.severity === "error")).toEqual([]);

      const store = await openFileStore({ dataDir, fsyncMode: "none" });
      try {
        // A full check every few rounds; in between only what the last round can have touched
        // (appends and repairs only ever change the end of a transcript).
        const full = round % 5 === 4 || round === ROUNDS - 1;
        for (const sessionId of sessionIds) {
          const lastSeq = await store.transcripts.lastSeq(sessionId);
          const from = full ? 1 : Math.max(1, (verifiedUpTo.get(sessionId) ?? 0) - 20);
          const { entries } = await store.transcripts.read(sessionId, { limit: lastSeq - from + 1 || 1 });
          const seqs = entries.map((entry) => entry.seq);
          // Nothing lost in the middle, nothing duplicated: seqs run from..lastSeq without a gap.
          expect(seqs).toEqual(
            Array.from({ length: lastSeq - from + 1 }, (_, i) => from + i).filter((seq) => seq > 0),
          );
          expect(new Set(entries.map((entry) => entry.id)).size).toBe(entries.length);
          const stored = new Map(entries.map((entry) => [entry.seq, entry.id]));
          for (const [seq, id] of acknowledged.entries.get(sessionId) ?? []) {
            if (seq < from) continue;
            expect(stored.get(seq), `acknowledged entry ${sessionId} #${seq} after round ${round}`).toBe(id);
          }
          verifiedUpTo.set(sessionId, lastSeq);
        }
        for (const [key, updatedAt] of acknowledged.rows) {
          expect((await store.sessions.get(key))?.updatedAt ?? 0).toBeGreaterThanOrEqual(updatedAt);
        }
        const audit = await store.audit.read();
        expect(audit.map((record) => record.index)).toEqual(
          Array.from({ length: audit.length }, (_, i) => i),
        );
        expect(audit.length).toBeGreaterThan(acknowledged.auditIndex);
        for (const runId of acknowledged.runs)
          expect(await store.runs.get(runId), `run ${runId}`).toBeDefined();
      } finally {
        await store.close();
      }
    }
    const total = [...acknowledged.entries.values()].reduce((sum, bySeq) => sum + bySeq.size, 0);
    expect(killsWhileWriting).toBeGreaterThanOrEqual(ROUNDS / 2);
    expect(total).toBeGreaterThan(1000);
  });
});
