import { createHmac } from "node:crypto";
import path from "node:path";
import { type AuditRecord, LEVELS, type Level, verifyAuditRecords } from "@switchboard/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleChild, runChildUntilKilled } from "../test/bundle-child";
import { tempDir } from "../test/helpers";
import { openFileStore } from "./file-store";
import type { FileMetaStore } from "./meta-store";

/**
 * Crash test of taint rises: a child raises taints (transcript entry + row + audit record in one
 * `commitTaintRise`) while other workers append audit records and messages, and is killed with
 * SIGKILL by a timer or inside a step of a rise (writing or syncing its intent, the audit log, the
 * sessions journal, the commit log). After every kill the store opens, and each rise is there
 * whole or not at all: the audit log's taint records, the transcripts' taint entries and the rows'
 * taints tell the same story, every acknowledged rise is in it, and the chain verifies.
 */

const KILL_POINTS = [
  "timer",
  "write:meta",
  "sync:meta",
  "write:audit",
  "sync:audit",
  "write:sessions",
  "write:commit-log",
];
const ROUNDS = KILL_POINTS.length + 3;
const AUDIT_KEY = new Uint8Array(32).fill(9);
const hmac = (key: Uint8Array, message: string) => createHmac("sha256", key).update(message).digest("hex");

let workDir: string;
let removeWorkDir: () => Promise<void>;
let childScript: string;

beforeAll(async () => {
  ({ dir: workDir, cleanup: removeWorkDir } = await tempDir("sb-taint-crash-"));
  childScript = await bundleChild("taint-crash-child", workDir);
});

afterAll(async () => {
  await removeWorkDir?.();
});

function runChild(dataDir: string, seed: number, kill: string, killAfterMs: number) {
  return runChildUntilKilled(childScript, [dataDir, String(seed), kill], killAfterMs);
}

describe("taint rises under kill -9", () => {
  it(`are all or nothing through ${ROUNDS} kills, at points inside a rise`, {
    timeout: 120_000,
  }, async () => {
    const dataDir = path.join(workDir, "data");
    const acknowledged = new Map<string, { key: string; to: Level }>();
    let begun = 0;
    let finishedAtOpen = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const point = KILL_POINTS[round % KILL_POINTS.length]!;
      const kill = point === "timer" ? point : `${point}:${3 + ((round * 7) % 17)}`;
      const result = await runChild(dataDir, round + 1, kill, 700 + ((round * 131) % 500));
      expect(result.signal, `child exited by itself: ${result.stderr}`).toBe("SIGKILL");
      for (const line of result.stdout.split("\n")) {
        const [event, key, id, to] = line.split(" ");
        if (event === "RISE") acknowledged.set(id!, { key: key!, to: to as Level });
        if (event === "BEGIN") begun++;
      }

      const store = await openFileStore({ dataDir });
      try {
        finishedAtOpen += (await store.stats()).taintRisesFinished;
        const label = `round ${round} (${kill})`;
        const records = await store.audit.read();
        expect(await verifyAuditRecords(AUDIT_KEY, records, { hmac }), label).toMatchObject({ ok: true });
        const audited = new Map<string, { key: string; to: Level }>();
        for (const record of records as AuditRecord[]) {
          if (record.kind !== "taint") continue;
          audited.set(record.data.entryId as string, {
            key: record.sessionKey!,
            to: record.data.to as Level,
          });
        }
        const inTranscripts = new Map<string, { key: string; to: Level }>();
        const { entries: rows } = await store.sessions.list({ limit: 100_000 });
        for (const row of rows) {
          const { entries } = await store.transcripts.read(row.sessionId, {
            limit: 100_000,
            filter: (entry) => entry.type === "taint",
          });
          let highest: Level = "PUBLIC";
          for (const entry of entries) {
            inTranscripts.set(entry.id, { key: row.key, to: entry.taint!.to });
            if (LEVELS.indexOf(entry.taint!.to) > LEVELS.indexOf(highest)) highest = entry.taint!.to;
          }
          expect(row.taint, `${label}: ${row.key}'s row against its transcript`).toBe(highest);
        }
        expect(inTranscripts, `${label}: transcripts against the audit log`).toEqual(audited);
        for (const [id, rise] of acknowledged)
          expect(audited.get(id), `${label}: acknowledged ${id}`).toEqual(rise);
        expect(
          (store.meta as FileMetaStore).withPrefix("store:taint-rise:"),
          `${label}: intents left`,
        ).toEqual([]);
      } finally {
        await store.close();
      }
    }
    // The test means something: rises were acknowledged, and some were caught in flight.
    expect(acknowledged.size).toBeGreaterThan(ROUNDS);
    expect(begun).toBeGreaterThan(acknowledged.size);
    console.log(
      `taint crash test: ${acknowledged.size} rises acknowledged, ${finishedAtOpen} finished at open`,
    );
  });
});
