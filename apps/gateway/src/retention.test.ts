import { randomUUID } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseConfig, type Store } from "@switchboard/core";
import { sampleMessage, sampleRun } from "@switchboard/core/testing";
import { openFileStore } from "@switchboard/store-fs";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { maxEndedRuns, Retention } from "./retention";

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

  it("keeps at most maxEndedRuns ended runs, oldest out first, sparing recent, spawn and pending ones", async () => {
    const target = await fileStore();
    const now = Date.now();
    const config = parseConfig({ gateway: { retention: { maxEndedRuns: 1_000 } } });
    const ended = (runId: string, endedAt: number, more: Parameters<typeof sampleRun>[0] = {}) =>
      sampleRun({ runId, status: "ok", createdAt: endedAt - 1_000, endedAt, ...more });
    // 2 000 ended an hour or less ago (well inside runsDays), newest last.
    const chats = Array.from({ length: 2_000 }, (_, i) => ended(`chat-${i}`, now - 3_600_000 + i * 1_000));
    const spawn = ended("spawn", now - 7_200_000, { origin: "spawn" });
    const followUp = ended("follow-up", now - 7_200_000, { origin: "send", followUp: "pending" });
    const justNow = Array.from({ length: 10 }, (_, i) => ended(`just-now-${i}`, now - 1_000));
    await Promise.all([...chats, spawn, followUp, ...justNow].map((run) => target.runs.put(run)));
    expect(await target.runs.countEnded()).toBe(2_012);

    const retention = new Retention(target, config, pino({ level: "silent" }), () => now);
    const pass = await retention.runOnce();
    expect(pass.runs).toBe(1_012);
    expect(await target.runs.countEnded()).toBe(1_000);
    expect(await target.runs.get("chat-1011")).toBeUndefined();
    expect(await target.runs.get("chat-1012")).toBeDefined();
    for (const kept of ["spawn", "follow-up", "just-now-0", "chat-1999"])
      expect(await target.runs.get(kept)).toBeDefined();
  });

  it("starts a pass by itself once a tenth of the cap has ended since the last one", async () => {
    const target = await fileStore();
    const now = Date.now();
    const config = parseConfig({ gateway: { retention: { maxEndedRuns: 1_000 } } });
    const runs = Array.from({ length: 1_150 }, (_, i) =>
      sampleRun({ status: "ok", createdAt: now - 600_000, endedAt: now - 300_000 + i }),
    );
    await Promise.all(runs.map((run) => target.runs.put(run)));
    const retention = new Retention(target, config, pino({ level: "silent" }), () => now);
    for (let i = 0; i < 99; i++) retention.noteEnded();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await target.runs.countEnded()).toBe(1_150);
    retention.noteEnded();
    await retention.runOnce();
    expect(await target.runs.countEnded()).toBe(1_000);
    expect(retention.totals.runs).toBe(150);
  });

  it("has no count cap on PostgreSQL unless one is configured, and 200 000 on the file store", () => {
    expect(maxEndedRuns(parseConfig({}))).toBe(200_000);
    const postgres = { store: { kind: "postgres", url: "postgres://127.0.0.1/test" } } as const;
    expect(maxEndedRuns(parseConfig(postgres))).toBeNull();
    expect(maxEndedRuns(parseConfig({ ...postgres, gateway: { retention: { maxEndedRuns: 5_000 } } }))).toBe(
      5_000,
    );
    expect(maxEndedRuns(parseConfig({ gateway: { retention: { maxEndedRuns: null } } }))).toBeNull();
    expect(() => parseConfig({ gateway: { retention: { maxEndedRuns: 10 } } })).toThrow(/maxEndedRuns/);
  });
});
