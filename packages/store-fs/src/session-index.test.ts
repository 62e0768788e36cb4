import path from "node:path";
import {
  createMemoryStore,
  type SessionEntry,
  type SessionListQuery,
  type SessionVisibility,
} from "@switchboard/core";
import { sampleSession } from "@switchboard/core/testing";
import fc from "fast-check";
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

/** The sessions index alone (in `dir`, a new temporary one by default). */
async function openStore(dir?: string): Promise<IndexUnderTest> {
  let root = dir;
  if (root === undefined) {
    const temp = await tempDir();
    cleanups.push(temp.cleanup);
    root = temp.dir;
  }
  const sessions = await FileSessionIndex.open({
    dir: path.join(root, "sessions"),
    durable: false,
    snapshotEvery: 20_000,
    logger: silentLogger,
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

async function filledStore(): Promise<IndexUnderTest> {
  const store = await openStore();
  await Promise.all(Array.from({ length: ROWS }, (_, i) => store.sessions.put(row(i))));
  return store;
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
  it("answers a kinds query the same as a brute-force filter", async () => {
    const store = await filledStore();
    await store.sessions.put(mainRow("a1", T));
    const cron = await store.sessions.list({ kinds: ["cron"], limit: 1000 });
    const expected = Array.from({ length: ROWS }, (_, i) => ROWS - 1 - i)
      .filter((i) => i % 10 === 0)
      .map((i) => row(i).key);
    expect(keysOf(cron)).toEqual(expected);
    const main = await store.sessions.list({ kinds: ["main"], limit: 50 });
    expect(keysOf(main)).toEqual(["agent:a1:main"]);
    // Another gateway's mainKey makes other rows its main sessions.
    await store.sessions.put(
      sampleSession({ key: "agent:a2:home", agentId: "a2", createdAt: T, updatedAt: T }),
    );
    expect(keysOf(await store.sessions.list({ kinds: ["main"], mainKey: "home", limit: 50 }))).toEqual([
      "agent:a2:home",
    ]);
    expect(keysOf(await store.sessions.list({ kinds: ["other"], mainKey: "home", limit: ROWS }))).toContain(
      "agent:a1:main",
    );
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

  it("answers selective kinds, agent and search lists from the indexes, not by visiting every row", async () => {
    const store = await filledStore();
    let visited = 0;
    const counting = { ...notA0, agents: "all" as const };
    const residual = () => {
      visited++;
      return true;
    };
    // 500 cron rows, a third of them a1's: the agent's cron list visits only cron rows.
    const cron = await store.sessions.list(
      { kinds: ["cron"], agentId: "a1", limit: 1000 },
      { visibility: counting, residual },
    );
    expect(keysOf(cron)).toEqual(
      Array.from({ length: ROWS }, (_, i) => ROWS - 1 - i)
        .filter((i) => i % 10 === 0 && i % 3 === 1)
        .map((i) => row(i).key),
    );
    expect(visited).toBe(cron.entries.length);
    visited = 0;
    const found = await store.sessions.list(
      { search: "JOB-491", limit: 50 },
      { visibility: counting, residual },
    );
    expect(keysOf(found)).toEqual(["agent:a2:cron:job-4910"]);
    expect(visited).toBe(1);
    expect(await store.sessions.list({ search: "no-such-session", limit: 50 })).toEqual({
      entries: [],
      hidden: 0,
    });
  });

  it("keeps a touched row in place in every list: by recency, agent, kind and search", async () => {
    const { dir, cleanup } = await tempDir();
    cleanups.push(cleanup);
    const first = await openStore(dir);
    const rows = Array.from({ length: 50 }, (_, i) => row(i));
    const job = rows[20]!;
    await Promise.all(rows.map((entry) => first.sessions.put(entry)));
    await first.sessions.close();
    // Touched once before the deferred build reached the row (just reopened), once after it.
    const { sessions } = await openStore(dir);
    for (const at of [T + 1_000, T + 2_000]) {
      expect(await sessions.touch(job.key, { sessionId: job.sessionId, at, addTokens: 2 })).toBe(true);
      const expected = { ...job, updatedAt: at, totalTokens: at === T + 1_000 ? 2 : 4 };
      for (const query of [
        { limit: 1 },
        { agentId: job.agentId, limit: 1 },
        { kinds: ["cron" as const], limit: 1 },
        { search: "job-20", limit: 1 },
      ])
        expect((await sessions.list(query)).entries).toEqual([expected]);
      // The row is listed once, where its new time puts it.
      const cron = keysOf(await sessions.list({ kinds: ["cron"], limit: 50 }));
      expect(cron.filter((key) => key === job.key)).toHaveLength(1);
      expect(cron).toHaveLength(5);
    }
  });

  it("rebuilds the indexes when a store is reopened", async () => {
    const { dir, cleanup } = await tempDir();
    cleanups.push(cleanup);
    const first = await openStore(dir);
    await Promise.all(Array.from({ length: ROWS }, (_, i) => first.sessions.put(row(i))));
    await first.sessions.put({ ...row(20), updatedAt: T + 100_000, displayName: "Renamed Job" });
    await first.sessions.close();
    const reopened = await openStore(dir);
    expect(keysOf(await reopened.sessions.list({ kinds: ["cron"], limit: 2 }))).toEqual([
      row(20).key,
      row(4990).key,
    ]);
    expect(keysOf(await reopened.sessions.list({ search: "renamed", limit: 5 }))).toEqual([row(20).key]);
    const job20 = Array.from({ length: ROWS }, (_, i) => ROWS - 1 - i).filter(
      (i) => i !== 20 && i % 10 === 0 && `job-${i}`.includes("job-20"),
    );
    expect(keysOf(await reopened.sessions.list({ search: "job-20", limit: 50 }))).toEqual(
      [20, ...job20].map((i) => row(i).key),
    );
    expect(
      keysOf(await reopened.sessions.list({ agentId: "a1", kinds: ["main", "cron"], limit: 1 })),
    ).toEqual([row(4990).key]);
  });
});

/** Keys over few agents, kinds and words, so random queries and writes often meet. */
const agentIds = ["a", "b", "c"];
const rests = [
  "main",
  "home",
  "cron:x",
  "cron:y",
  "hook:z",
  "node-1",
  "subagent:s1",
  "tg:group:g1",
  "tg:dm:d1",
  "misc",
];
const words = ["Alpha", "beta", "Gamma job", "delta-x", "ÉTÉ"];

const rowArb = fc.record({
  agent: fc.constantFrom(...agentIds),
  rest: fc.constantFrom(...rests),
  keyAgent: fc.boolean(),
  updatedAt: fc.integer({ min: 0, max: 50 }),
  displayName: fc.option(fc.constantFrom(...words), { nil: undefined }),
  label: fc.option(fc.constantFrom(...words), { nil: undefined }),
  chatType: fc.option(
    fc.constantFrom("direct", "group", "channel") as fc.Arbitrary<"direct" | "group" | "channel">,
    { nil: undefined },
  ),
  archived: fc.boolean(),
  taint: fc.constantFrom("PUBLIC", "CONFIDENTIAL") as fc.Arbitrary<"PUBLIC" | "CONFIDENTIAL">,
});
type RowSpec = typeof rowArb extends fc.Arbitrary<infer R> ? R : never;

function specRow(spec: RowSpec): SessionEntry {
  const key = spec.keyAgent
    ? `agent:${spec.agent}:${spec.rest}`
    : spec.rest === "main"
      ? "global"
      : spec.rest;
  return sampleSession({
    key,
    agentId: spec.agent,
    createdAt: T,
    updatedAt: T + spec.updatedAt,
    taint: spec.taint,
    ...(spec.displayName ? { displayName: spec.displayName } : {}),
    ...(spec.label ? { label: spec.label } : {}),
    ...(spec.chatType ? { chatType: spec.chatType } : {}),
    ...(spec.archived ? { archivedAt: T } : {}),
  });
}

const opArb = fc.oneof(
  { weight: 4, arbitrary: rowArb.map((spec) => ({ op: "put" as const, spec })) },
  { weight: 1, arbitrary: rowArb.map((spec) => ({ op: "delete" as const, spec })) },
  {
    weight: 3,
    arbitrary: fc
      .tuple(rowArb, fc.integer({ min: 0, max: 60 }), fc.integer({ min: 0, max: 3 }), fc.boolean())
      .map(([spec, at, addTokens, current]) => ({ op: "touch" as const, spec, at, addTokens, current })),
  },
  { weight: 1, arbitrary: fc.constant({ op: "reopen" as const }) },
);

/** A filter present in one query in three, so queries combine a few of them and still match rows. */
const sometimes = <T>(arbitrary: fc.Arbitrary<T>) => fc.option(arbitrary, { nil: undefined, freq: 2 });
const queryArb = fc
  .record({
    agentId: sometimes(fc.constantFrom(...agentIds, "zz")),
    kinds: sometimes(
      fc.subarray(["main", "group", "cron", "hook", "node", "subagent", "other", "bogus"], { minLength: 1 }),
    ),
    mainKey: sometimes(fc.constantFrom("main", "home", "cron:x")),
    search: sometimes(
      fc.constantFrom("al", "job", "CRON:", "a:c", "été", "gamma job", "nothing-here", "x", "ta-x"),
    ),
    activeSince: sometimes(fc.integer({ min: T, max: T + 50 })),
    includeArchived: sometimes(fc.boolean()),
    limit: fc.integer({ min: 1, max: 8 }),
  })
  .map(
    (query) =>
      Object.fromEntries(
        Object.entries(query).filter(([, value]) => value !== undefined),
      ) as unknown as SessionListQuery,
  );

describe("sessions.list indexes against the plain scan (property)", () => {
  it("lists what core's memory store lists, under puts, touches, deletes and reopening", async () => {
    const { dir, cleanup } = await tempDir();
    cleanups.push(cleanup);
    let round = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(opArb, { maxLength: 40 }),
        fc.array(queryArb, { minLength: 1, maxLength: 12 }),
        fc.boolean(),
        async (ops, queries, withVisibility) => {
          const root = path.join(dir, `r${round++}`);
          let store = await openStore(root);
          const memory = createMemoryStore();
          for (const step of ops) {
            if (step.op === "reopen") {
              await store.sessions.close();
              store = await openStore(root);
            } else if (step.op === "put") {
              const entry = specRow(step.spec);
              await store.sessions.put(entry);
              await memory.sessions.put(entry);
            } else if (step.op === "touch") {
              // A touch of the row as it is (or, now and then, of an older sessionId of its key).
              const key = specRow(step.spec).key;
              const sessionId = step.current
                ? ((await memory.sessions.get(key))?.sessionId ?? crypto.randomUUID())
                : crypto.randomUUID();
              const touch = {
                sessionId,
                at: T + step.at,
                ...(step.addTokens ? { addTokens: step.addTokens } : {}),
              };
              expect(await store.sessions.touch(key, touch)).toBe(await memory.sessions.touch(key, touch));
            } else {
              const key = specRow(step.spec).key;
              expect(await store.sessions.delete(key)).toBe(await memory.sessions.delete(key));
            }
          }
          const visibility: SessionVisibility = {
            selfKey: "agent:a:main",
            maxTaint: "INTERNAL",
            agents: ["a", "b"],
            sandboxed: false,
          };
          for (const query of queries) {
            const options = withVisibility ? { visibility } : {};
            expect(await store.sessions.list(query, options)).toEqual(
              await memory.sessions.list(query, options),
            );
          }
          await store.sessions.close();
        },
      ),
      { numRuns: 100 },
    );
  });
});
