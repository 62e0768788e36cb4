import path from "node:path";
import { defaultSessionClassifier, type SessionEntry } from "@switchboard/core";
import { sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../test/helpers";
import { type FileStore, openFileStore } from "./file-store";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function openStore(): Promise<FileStore> {
  const { dir, cleanup } = await tempDir();
  cleanups.push(cleanup);
  const store = await openFileStore({ dataDir: path.join(dir, "data"), fsyncMode: "none" });
  cleanups.push(() => store.close());
  return store;
}

/** More rows than one list may classify at once (2000), so a full scan takes the sliced path. */
const ROWS = 5000;

const T = 1_700_000_000_000;

/** Row i: agent a<i % 3>, one cron job in 10, else direct chats; newer rows have larger i. */
function row(i: number): SessionEntry {
  const agentId = `a${i % 3}`;
  const rest = i % 10 === 0 ? `cron:job-${i}` : `telegram:dm:u${i}`;
  return sampleSession({ key: `agent:${agentId}:${rest}`, agentId, createdAt: T, updatedAt: T + 1 + i });
}

const mainRow = (agentId: string, updatedAt: number) =>
  sampleSession({ key: `agent:${agentId}:main`, agentId, createdAt: T, updatedAt });

async function filledStore(): Promise<FileStore> {
  const store = await openStore();
  await Promise.all(Array.from({ length: ROWS }, (_, i) => store.sessions.put(row(i))));
  return store;
}

/** The default classifier, counting its calls. */
function countingClassifier() {
  const counter = {
    calls: 0,
    classify: (entry: SessionEntry) => {
      counter.calls++;
      return defaultSessionClassifier(entry);
    },
  };
  return counter;
}

const keysOf = (result: { entries: SessionEntry[] }) => result.entries.map((entry) => entry.key);

describe("sessions.list kinds over many rows", () => {
  it("answers a full-scan kinds query the same as a brute-force filter", async () => {
    const store = await filledStore();
    await store.sessions.put(mainRow("a1", T));
    const { classify } = countingClassifier();
    const cron = await store.sessions.list({ kinds: ["cron"], limit: 1000 }, { classify });
    const expected = Array.from({ length: ROWS }, (_, i) => ROWS - 1 - i)
      .filter((i) => i % 10 === 0)
      .map((i) => row(i).key);
    expect(keysOf(cron)).toEqual(expected);
    const main = await store.sessions.list({ kinds: ["main"], limit: 50 }, { classify });
    expect(keysOf(main)).toEqual(["agent:a1:main"]);
  });

  it("counts rows hidden by the visibility predicate across the whole index", async () => {
    const store = await filledStore();
    const result = await store.sessions.list(
      { kinds: ["cron"], limit: 5 },
      { classify: countingClassifier().classify, visible: (entry) => !entry.key.startsWith("agent:a0:") },
    );
    const cronRows = Array.from({ length: ROWS }, (_, i) => i).filter((i) => i % 10 === 0);
    expect(result.hidden).toBe(cronRows.filter((i) => i % 3 === 0).length);
    expect(result.entries).toHaveLength(5);
    expect(result.entries.every((entry) => !entry.key.startsWith("agent:a0:"))).toBe(true);
  });

  it("lets other work run while a new classifier meets a full scan, instead of blocking for all rows", async () => {
    const store = await filledStore();
    let otherWorkRan = false;
    const listed = store.sessions
      .list({ kinds: ["main"], limit: 50 }, { classify: countingClassifier().classify })
      .then((result) => ({ result, otherWorkRanFirst: otherWorkRan }));
    setImmediate(() => {
      otherWorkRan = true;
    });
    const { result, otherWorkRanFirst } = await listed;
    expect(otherWorkRanFirst).toBe(true);
    expect(result.entries).toEqual([]);
  });

  it("classifies each row once per classifier, even for concurrent full scans", async () => {
    const store = await filledStore();
    const counter = countingClassifier();
    const query = { kinds: ["main"], limit: 50 };
    await Promise.all([
      store.sessions.list(query, { classify: counter.classify }),
      store.sessions.list(query, { classify: counter.classify }),
    ]);
    // The first scan stops at its budget; the fill then classifies only rows it has not seen.
    expect(counter.calls).toBe(ROWS);
    await store.sessions.list(query, { classify: counter.classify });
    expect(counter.calls).toBe(ROWS);
  });

  it("classifies only the rows a short scan visits", async () => {
    const store = await filledStore();
    const counter = countingClassifier();
    const result = await store.sessions.list({ kinds: ["cron"], limit: 5 }, { classify: counter.classify });
    expect(keysOf(result)).toEqual([4990, 4980, 4970, 4960, 4950].map((i) => row(i).key));
    expect(counter.calls).toBe(50);
  });

  it("sees rows written and deleted while the kinds are being filled", async () => {
    const store = await filledStore();
    const listed = store.sessions.list(
      { kinds: ["main"], limit: 50 },
      { classify: countingClassifier().classify },
    );
    // Runs between slices of the fill (after the scan that stopped, before the one that answers);
    // puts and deletes change the index at once and are durable later.
    await new Promise((resolve) => setImmediate(resolve));
    const writes = [
      store.sessions.put(mainRow("a2", T + 10_000)),
      store.sessions.put(mainRow("a0", T + 10_001)),
      store.sessions.delete("agent:a0:main"),
    ];
    expect(keysOf(await listed)).toEqual(["agent:a2:main"]);
    await Promise.all(writes);
  });
});
