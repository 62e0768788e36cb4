import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleChild, runChildUntilKilled } from "../test/bundle-child";
import { tempDir } from "../test/helpers";
import { checkDataDir } from "./doctor";
import { openFileStore } from "./file-store";

/**
 * Crash test of resets and deletes: a child creates, writes, resets and deletes sessions and is
 * killed with SIGKILL, by a timer or at a chosen file operation inside a step (creating the new
 * transcript, writing or syncing the sessions journal, renaming into the archive, the commit log).
 * After every kill the data dir must start, every row must point at a readable and writable
 * transcript, no transcript may be left without a row, and every acknowledged message must be in
 * its transcript or, once its session was reset or deleted, in the archive.
 */

const KILL_POINTS = [
  "timer",
  "link:transcripts",
  "write:sessions",
  "sync:sessions",
  "rename:archive",
  "write:commit-log",
  "open:snapshot-",
];
const ROUNDS = 2 * KILL_POINTS.length;

let workDir: string;
let removeWorkDir: () => Promise<void>;
let childScript: string;

beforeAll(async () => {
  ({ dir: workDir, cleanup: removeWorkDir } = await tempDir("sb-lifecycle-crash-"));
  childScript = await bundleChild("lifecycle-crash-child", workDir);
});

afterAll(async () => {
  await removeWorkDir?.();
});

function runChild(dataDir: string, keys: string[][], seed: number, kill: string, killAfterMs: number) {
  return runChildUntilKilled(childScript, [dataDir, JSON.stringify(keys), String(seed), kill], killAfterMs);
}

interface Tracked {
  /** Each key's sessionId as of its last acknowledged operation (undefined: no row). */
  current: Map<string, string | undefined>;
  /** The operation each key had in flight when the child died. */
  inflight: Map<string, string>;
  messages: Array<{ key: string; sessionId: string; seq: number; id: string }>;
}

function track(output: string, tracked: Tracked): void {
  const lines = output.split("\n");
  lines.pop();
  for (const line of lines) {
    const parts = line.split(" ");
    switch (parts[0]) {
      case "BEGIN":
        tracked.inflight.set(parts[3]!, parts[2]!);
        break;
      case "NEW":
        tracked.current.set(parts[1]!, parts[2]!);
        tracked.inflight.delete(parts[1]!);
        break;
      case "M":
        tracked.messages.push({ key: parts[1]!, sessionId: parts[2]!, seq: Number(parts[3]), id: parts[4]! });
        tracked.inflight.delete(parts[1]!);
        break;
      case "RESET":
        tracked.current.set(parts[1]!, parts[3]!);
        tracked.inflight.delete(parts[1]!);
        break;
      case "DEL":
        tracked.current.set(parts[1]!, undefined);
        tracked.inflight.delete(parts[1]!);
        break;
    }
  }
}

function entryIdsIn(filePath: string): Map<number, string> {
  const ids = new Map<number, string>();
  for (const line of fs.readFileSync(filePath, "utf8").split("\n").slice(1)) {
    if (!line) continue;
    const entry = JSON.parse(line) as { seq: number; id: string };
    ids.set(entry.seq, entry.id);
  }
  return ids;
}

describe("reset and delete under kill -9", () => {
  it(`stay atomic through ${ROUNDS} kills at points inside every step`, { timeout: 120_000 }, async () => {
    const dataDir = path.join(workDir, "data");
    const keys = Array.from({ length: 4 }, (_, worker) =>
      Array.from({ length: 3 }, (_, n) => `agent:main:lifecycle-${worker}-${n}`),
    );
    const tracked: Tracked = { current: new Map(), inflight: new Map(), messages: [] };
    let resets = 0;
    let deletes = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const point = KILL_POINTS[round % KILL_POINTS.length]!;
      const kill = point === "timer" ? point : `${point}:${1 + ((round * 7) % 12)}`;
      const result = await runChild(
        dataDir,
        keys,
        round * 7919 + 3,
        kill,
        point === "timer" ? 300 + round * 20 : 4000,
      );
      expect(result.signal, `child exited by itself: ${result.stderr}`).toBe("SIGKILL");
      track(result.stdout, tracked);
      resets += result.stdout.split("\nRESET ").length - 1;
      deletes += result.stdout.split("\nDEL ").length - 1;

      // Nothing is broken before the store repairs anything.
      const report = await checkDataDir(dataDir);
      expect(
        report.issues.filter((issue) => issue.severity === "error"),
        `round ${round} (${kill})`,
      ).toEqual([]);

      const store = await openFileStore({ dataDir, fsyncMode: "none", archiveOrphanTranscripts: true });
      try {
        for (const key of keys.flat()) {
          const row = await store.sessions.get(key);
          const before = tracked.current.get(key);
          const op = tracked.inflight.get(key);
          const label = `${key} after round ${round} (${kill}), in flight: ${op ?? "nothing"}`;
          if (op === undefined || op === "append") expect(row?.sessionId, label).toBe(before);
          else if (op === "new") expect(row === undefined || before === undefined, label).toBe(true);
          else if (op === "reset") expect(row, label).toBeDefined();
          else if (op === "delete") expect(row === undefined || row.sessionId === before, label).toBe(true);
          tracked.inflight.delete(key);
          tracked.current.set(key, row?.sessionId);
          if (!row) continue;
          // The key works: history reads and a new message lands.
          await store.transcripts.read(row.sessionId, { limit: 5 });
          const [written] = await store.transcripts.append(row.sessionId, [
            {
              type: "message",
              label: "INTERNAL",
              message: { role: "user", content: [{ type: "text", text: "check" }] },
            },
          ]);
          tracked.messages.push({ key, sessionId: row.sessionId, seq: written!.seq, id: written!.id });
        }
        const live = new Set([...tracked.current.values()].filter((id) => id !== undefined));
        const files = fs.readdirSync(path.join(dataDir, "transcripts"));
        expect(
          files.filter((name) => !live.has(name.replace(/\.jsonl$/, ""))),
          "orphan transcripts",
        ).toEqual([]);
      } finally {
        await store.close();
      }

      const archived = fs.readdirSync(path.join(dataDir, "archive"));
      const cache = new Map<string, Map<number, string>>();
      for (const message of tracked.messages) {
        const live = tracked.current.get(message.key) === message.sessionId;
        let file: string;
        if (live) file = path.join(dataDir, "transcripts", `${message.sessionId}.jsonl`);
        else {
          const matches = archived.filter((name) => name.startsWith(`${message.sessionId}.`));
          expect(matches, `archive of ${message.sessionId}`).toHaveLength(1);
          file = path.join(dataDir, "archive", matches[0]!);
        }
        const ids = cache.get(file) ?? entryIdsIn(file);
        cache.set(file, ids);
        expect(ids.get(message.seq), `acknowledged ${message.key} ${message.sessionId} #${message.seq}`).toBe(
          message.id,
        );
      }
    }
    expect(resets).toBeGreaterThan(5);
    expect(deletes).toBeGreaterThan(5);
  });
});
