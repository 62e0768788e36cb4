import path from "node:path";
import {
  type SessionClassifier,
  type SessionEntry,
  type SessionVisibility,
  sessionClassifierFor,
} from "@switchboard/core";
import { sampleSession } from "@switchboard/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../test/helpers";
import { silentLogger } from "./logger";
import { FileSessionIndex } from "./session-index";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface IndexUnderTest {
  sessions: FileSessionIndex;
}

/** The sessions index alone, classifying with `classifierFor` (core's key rules by default). */
async function openStore(classifierFor?: (mainKey: string) => SessionClassifier): Promise<IndexUnderTest> {
  const { dir, cleanup } = await tempDir();
  cleanups.push(cleanup);
  const sessions = await FileSessionIndex.open({
    dir: path.join(dir, "sessions"),
    durable: false,
    snapshotEvery: 20_000,
    logger: silentLogger,
    ...(classifierFor ? { classifierFor } : {}),
  });
  cleanups.push(() => sessions.close());
  return { sessions };
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

async function filledStore(classifierFor?: (mainKey: string) => SessionClassifier): Promise<IndexUnderTest> {
  const store = await openStore(classifierFor);
  await Promise.all(Array.from({ length: ROWS }, (_, i) => store.sessions.put(row(i))));
  return store;
}

/** Core's key rules, counting their calls. */
function countingClassifier() {
  const counter = {
    calls: 0,
    classify: (entry: SessionEntry) => {
      counter.calls++;
      return sessionClassifierFor()(entry);
    },
    classifierFor: () => counter.classify,
  };
  return counter;
}

/** Visibility of every row but agent a0's (the caller's own row is none of them). */
const notA0: SessionVisibility = {
  selfKey: "agent:x:none",
  maxTaint: "RESTRICTED",
  agents: ["a1", "a2"],
  sandboxed: false,
};
const isNotA0 = (entry: SessionEntry) => !entry.key.startsWith("agent:a0:");

const keysOf = (result: { entries: SessionEntry[] }) => result.entries.map((entry) => entry.key);

describe("sessions.list kinds over many rows", () => {
  it("answers a full-scan kinds query the same as a brute-force filter", async () => {
    const store = await filledStore();
    await store.sessions.put(mainRow("a1", T));
    const cron = await store.sessions.list({ kinds: ["cron"], limit: 1000 });
    const expected = Array.from({ length: ROWS }, (_, i) => ROWS - 1 - i)
      .filter((i) => i % 10 === 0)
      .map((i) => row(i).key);
    expect(keysOf(cron)).toEqual(expected);
    const main = await store.sessions.list({ kinds: ["main"], limit: 50 });
    expect(keysOf(main)).toEqual(["agent:a1:main"]);
  });

  it("counts rows hidden by visibility over the whole index when the page is not full", async () => {
    const store = await filledStore();
    const result = await store.sessions.list({ kinds: ["cron"], limit: ROWS }, { visibility: notA0 });
    const cronRows = Array.from({ length: ROWS }, (_, i) => i).filter((i) => i % 10 === 0);
    expect(result.hidden).toBe(cronRows.filter((i) => i % 3 === 0).length);
    expect(result.entries).toHaveLength(cronRows.length - result.hidden);
    expect(result.entries.every(isNotA0)).toBe(true);
  });

  it("stops at a full page, counting only the hidden rows it passed", async () => {
    const store = await filledStore();
    let checked = 0;
    const result = await store.sessions.list(
      { kinds: ["cron"], limit: 5 },
      {
        visibility: { ...notA0, agents: "all" },
        residual: (entry) => {
          checked++;
          return isNotA0(entry);
        },
      },
    );
    expect(result.entries).toHaveLength(5);
    expect(result.hidden).toBe(checked - 5);
    expect(checked).toBeLessThan(20);
  });

  it("lets other work run while a visibility that hides everything meets a full scan", async () => {
    const store = await filledStore();
    let otherWorkRan = false;
    const listed = store.sessions
      .list({ limit: 50 }, { visibility: { ...notA0, agents: "all" }, residual: () => false })
      .then((result) => ({ result, otherWorkRanFirst: otherWorkRan }));
    setImmediate(() => {
      otherWorkRan = true;
    });
    const { result, otherWorkRanFirst } = await listed;
    expect(otherWorkRanFirst).toBe(true);
    expect(result).toEqual({ entries: [], hidden: ROWS });
  });

  it("lets other work run while a new classifier meets a full scan, instead of blocking for all rows", async () => {
    const store = await filledStore();
    let otherWorkRan = false;
    const listed = store.sessions
      .list({ kinds: ["main"], limit: 50 })
      .then((result) => ({ result, otherWorkRanFirst: otherWorkRan }));
    setImmediate(() => {
      otherWorkRan = true;
    });
    const { result, otherWorkRanFirst } = await listed;
    expect(otherWorkRanFirst).toBe(true);
    expect(result.entries).toEqual([]);
  });

  it("lets other work run during a full-scan kinds or search query once every row is classified", async () => {
    const store = await filledStore();
    await store.sessions.list({ kinds: ["main"], limit: 50 });
    for (const query of [
      { kinds: ["main"], limit: 50 },
      { search: "no-such-session", limit: 50 },
    ]) {
      let otherWorkRan = false;
      const listed = store.sessions
        .list(query)
        .then((result) => ({ result, otherWorkRanFirst: otherWorkRan }));
      setImmediate(() => {
        otherWorkRan = true;
      });
      const { result, otherWorkRanFirst } = await listed;
      expect(otherWorkRanFirst).toBe(true);
      expect(result.entries).toEqual([]);
    }
  });

  it("classifies each row once per classifier, even for concurrent full scans", async () => {
    const counter = countingClassifier();
    const store = await filledStore(counter.classifierFor);
    const query = { kinds: ["main"], limit: 50 };
    await Promise.all([store.sessions.list(query), store.sessions.list(query)]);
    // The first scan stops at its budget; the fill then classifies only rows it has not seen.
    expect(counter.calls).toBe(ROWS);
    await store.sessions.list(query);
    expect(counter.calls).toBe(ROWS);
  });

  it("classifies only the rows a short scan visits", async () => {
    const counter = countingClassifier();
    const store = await filledStore(counter.classifierFor);
    const result = await store.sessions.list({ kinds: ["cron"], limit: 5 });
    expect(keysOf(result)).toEqual([4990, 4980, 4970, 4960, 4950].map((i) => row(i).key));
    expect(counter.calls).toBe(50);
  });

  it("sees rows written and deleted while the kinds are being filled", async () => {
    const store = await filledStore();
    const listed = store.sessions.list({ kinds: ["main"], limit: 50 });
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
