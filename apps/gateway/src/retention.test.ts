import { randomUUID } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseConfig, type Store } from "@switchboard/core";
import { sampleMessage, sampleRun } from "@switchboard/core/testing";
import { openFileStore } from "@switchboard/store-fs";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { Retention } from "./retention";

const DAY = 86_400_000;
let store: Store | undefined;
let dir: string | undefined;
afterEach(async () => {
  await store?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
  store = undefined;
  dir = undefined;
});

async function fileStore(): Promise<Store> {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "retention-"));
  store = await openFileStore({ dataDir: dir, logger: pino({ level: "silent" }), fsyncMode: "none" });
  return store;
}

async function archivedTranscript(target: Store): Promise<string> {
  const sessionId = randomUUID();
  await target.transcripts.create({ sessionId, key: `agent:main:${sessionId}`, createdAt: 1 });
  await target.transcripts.append(sessionId, [sampleMessage("old news")]);
  await target.transcripts.archive(sessionId, "reset");
  return sessionId;
}

describe("retention", () => {
  it("prunes ended runs past runsDays and archives past archiveDays, keeping the rest", async () => {
    const target = await fileStore();
    const now = Date.now();
    const config = parseConfig({ gateway: { retention: { runsDays: 7, archiveDays: 30 } } });
    const old = Array.from({ length: 1_200 }, () =>
      sampleRun({ status: "ok", createdAt: now - 9 * DAY, endedAt: now - 8 * DAY }),
    );
    const recent = sampleRun({ runId: "recent", status: "ok", endedAt: now - 6 * DAY });
    const running = sampleRun({ runId: "running", status: "running", createdAt: now - 20 * DAY });
    const pendingAnnounce = sampleRun({
      runId: "pending-announce",
      status: "ok",
      endedAt: now - 20 * DAY,
      spawn: {
        requesterKey: "agent:main:main",
        childKey: "agent:main:subagent:x",
        childSessionId: randomUUID(),
        task: "t",
        cleanup: "keep",
        announce: { status: "pending", attempts: 0, idempotencyKey: randomUUID() },
      },
    });
    await Promise.all([...old, recent, running, pendingAnnounce].map((run) => target.runs.put(run)));
    await archivedTranscript(target);
    await archivedTranscript(target);

    // Archives are 0 days old now: only runs go.
    const retention = new Retention(target, config, pino({ level: "silent" }), () => now);
    expect(await retention.runOnce()).toEqual({ runs: 1_200, archives: 0 });
    expect((await target.runs.list({})).map((run) => run.runId).sort()).toEqual(
      ["pending-announce", "recent", "running"].sort(),
    );

    // 31 days later the archives go too (and the recent run, now 37 days old).
    const later = new Retention(target, config, pino({ level: "silent" }), () => now + 31 * DAY);
    expect(await later.runOnce()).toEqual({ runs: 1, archives: 2 });
    expect(fs.readdirSync(path.join(dir!, "archive"))).toEqual([]);
    expect(later.totals).toEqual({ runs: 1, archives: 2 });
  });

  it("keeps ended runs as long as the longest sub-agent archive window, an agent's own override included", async () => {
    const target = await fileStore();
    const now = Date.now();
    // One agent archives its sub-agents only after 14 days: their spawn runs must outlive runsDays.
    const config = parseConfig({
      gateway: { retention: { runsDays: 1 } },
      agents: { list: [{ id: "main", default: true, subagents: { archiveAfterMinutes: 14 * 24 * 60 } }] },
    });
    const spawned = sampleRun({ runId: "spawned", status: "ok", endedAt: now - 3 * DAY });
    const older = sampleRun({ runId: "older", status: "ok", endedAt: now - 15 * DAY });
    await Promise.all([spawned, older].map((run) => target.runs.put(run)));
    const retention = new Retention(target, config, pino({ level: "silent" }), () => now);
    // Before, only agents.defaults' 60 minutes counted: the 3-day-old run went after 1 day.
    expect(await retention.runOnce()).toEqual({ runs: 1, archives: 0 });
    expect(await target.runs.get("spawned")).toBeDefined();
    expect(await target.runs.get("older")).toBeUndefined();
  });

  it("keeps archives for ever with archiveDays null, and survives a reopen of what it pruned", async () => {
    const target = await fileStore();
    const now = Date.now();
    const config = parseConfig({ gateway: { retention: { runsDays: 1, archiveDays: null } } });
    await target.runs.put(sampleRun({ runId: "gone", status: "error", endedAt: now - 2 * DAY }));
    await archivedTranscript(target);
    const retention = new Retention(target, config, pino({ level: "silent" }), () => now + 1000 * DAY);
    expect(await retention.runOnce()).toEqual({ runs: 1, archives: 0 });
    await target.close();
    store = await openFileStore({ dataDir: dir!, logger: pino({ level: "silent" }), fsyncMode: "none" });
    expect(await store.runs.get("gone")).toBeUndefined();
    expect(fs.readdirSync(path.join(dir!, "archive"))).toHaveLength(1);
  });
});
