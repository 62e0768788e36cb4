import { expect, describe as vitestDescribe, it as vitestIt } from "vitest";
import type { AuditRecord } from "../audit/index";
import type { SessionListOptions, SessionListQuery, Store } from "./interfaces";
import { MAX_MESSAGE_BYTES } from "./limits";
import type { RunRecord } from "./run-record";
import type { SessionEntry } from "./session-entry";
import type { SessionVisibility } from "./session-visibility";
import type { TranscriptEntry, TranscriptEntryInput } from "./transcript-entry";

/** What the conformance suite needs from an implementation: a fresh, empty store per case. */
export interface StoreHarness {
  store: Store;
  /**
   * Opens the same data again after the suite closed `store`. Give it for durable stores: the
   * suite then checks that everything survives a close and reopen.
   */
  reopen?: () => Promise<Store>;
  /**
   * Opens a second store on the same backend while `store` is open, as a second gateway instance
   * on one database would. The suite then checks that compare-and-set and unique idempotency keys
   * hold across the two.
   */
  openSecond?: () => Promise<Store>;
  /** Why this store cannot have a second instance on one backend (shown as the skip reason). */
  singleInstance?: string;
  /** Frees what the harness allocated (temp dirs). The suite closes every store itself first. */
  cleanup: () => Promise<void>;
}

export type StoreOpener = () => Promise<StoreHarness>;

const uuid = () => globalThis.crypto.randomUUID();

function hex64(seed: number): string {
  return seed.toString(16).padStart(64, "0");
}

export function sampleSession(overrides: Partial<SessionEntry> = {}): SessionEntry {
  return {
    key: `agent:main:test:dm:${uuid().slice(0, 8)}`,
    sessionId: uuid(),
    agentId: "main",
    createdAt: 1_700_000_000_000,
    updatedAt: 1_700_000_000_000,
    taint: "PUBLIC",
    clearance: "INTERNAL",
    ...overrides,
  };
}

export function sampleMessage(
  text: string,
  overrides: Partial<TranscriptEntryInput> = {},
): TranscriptEntryInput {
  return {
    type: "message",
    label: "INTERNAL",
    message: { role: "user", content: [{ type: "text", text }] },
    ...overrides,
  };
}

export function sampleRun(overrides: Partial<RunRecord> = {}): RunRecord {
  return {
    runId: uuid(),
    sessionKey: "agent:main:main",
    sessionId: uuid(),
    agentId: "main",
    lane: "main",
    status: "queued",
    createdAt: 1_700_000_000_000,
    origin: "chat",
    message: "hello",
    attempts: 0,
    ...overrides,
  };
}

/** Records shaped like core's audit chain output; stores check shape and order, not the hashes. */
export function sampleAuditRecords(firstIndex: number, count: number): AuditRecord[] {
  return Array.from({ length: count }, (_, offset) => {
    const index = firstIndex + offset;
    return {
      index,
      prevHash: hex64(index),
      hash: hex64(index + 1),
      kind: index % 2 === 0 ? "delivery" : "policy.blocked",
      at: 1_700_000_000_000 + index,
      actor: "agent:main:main",
      sessionKey: "agent:main:main",
      data: { n: index },
    };
  });
}

function text(entry: TranscriptEntry): string {
  const part = entry.message?.content[0];
  return part?.type === "text" ? part.text : "";
}

const serialisedSize = (entry: TranscriptEntry) => new TextEncoder().encode(JSON.stringify(entry)).length;

export interface ConformanceContext {
  /** Marks the case skipped (vitest's `context.skip`); throws. */
  skip: (note: string) => void;
}

/** One case of the suite, runnable on its own (the suite's own tests run cases against broken stores). */
export interface ConformanceCase {
  group: string;
  name: string;
  run: (context: ConformanceContext) => Promise<void>;
}

/**
 * Registers vitest cases that check a `Store` implementation against the contract in
 * `interfaces.ts`. Every case opens a fresh store through `open` and closes it afterwards.
 */
export function runStoreConformance(name: string, open: StoreOpener): void {
  const groups = new Map<string, ConformanceCase[]>();
  for (const entry of storeConformanceCases(open)) {
    const list = groups.get(entry.group) ?? [];
    list.push(entry);
    groups.set(entry.group, list);
  }
  vitestDescribe(`store conformance: ${name}`, () => {
    for (const [group, cases] of groups) {
      vitestDescribe(group, () => {
        for (const entry of cases) {
          vitestIt(entry.name, async (context) => {
            await entry.run({ skip: (note) => context.skip(note) });
          });
        }
      });
    }
  });
}

/** The suite's cases as plain data, in order. */
export function storeConformanceCases(open: StoreOpener): ConformanceCase[] {
  const cases: ConformanceCase[] = [];
  let group = "";
  const describe = (groupName: string, body: () => void) => {
    group = groupName;
    body();
  };
  const it = (caseName: string, run: ConformanceCase["run"]) => {
    cases.push({ group, name: caseName, run });
  };

  async function withStore(
    body: (store: Store, harness: StoreHarness & { reopened: () => Promise<Store> }) => Promise<void>,
  ): Promise<void> {
    const harness = await open();
    let current = harness.store;
    let closed = false;
    const reopened = async () => {
      if (!harness.reopen) throw new Error("this harness has no reopen");
      await current.close();
      closed = true;
      current = await harness.reopen();
      closed = false;
      return current;
    };
    try {
      await body(harness.store, { ...harness, reopened });
    } finally {
      if (!closed) await current.close().catch(() => undefined);
      await harness.cleanup();
    }
  }

  async function withTwoStores(
    context: ConformanceContext,
    body: (first: Store, second: Store) => Promise<void>,
  ): Promise<void> {
    const harness = await open();
    let second: Store | undefined;
    try {
      if (!harness.openSecond) {
        context.skip(harness.singleInstance ?? "this harness has no second instance on one backend");
        return;
      }
      second = await harness.openSecond();
      await body(harness.store, second);
    } finally {
      await second?.close().catch(() => undefined);
      await harness.store.close().catch(() => undefined);
      await harness.cleanup();
    }
  }

  const code = (value: string) => expect.objectContaining({ code: value });
  /** Runs writes at once and returns how many succeeded and the codes of the failures. */
  const settle = async (writes: Promise<unknown>[]) => {
    const results = await Promise.allSettled(writes);
    const failures = results.filter((result) => result.status === "rejected");
    return {
      succeeded: results.length - failures.length,
      codes: failures.map((result) => (result.reason as { code?: string }).code),
    };
  };
  describe("sessions index", () => {
    it("stores, replaces and deletes whole rows", async () => {
      await withStore(async (store) => {
        const row = sampleSession({ displayName: "First", label: "alpha" });
        expect(await store.sessions.get(row.key)).toBeUndefined();
        await store.sessions.put(row);
        expect(await store.sessions.get(row.key)).toEqual(row);
        expect(await store.sessions.count()).toBe(1);

        const { displayName: _dropped, ...replacement } = { ...row, updatedAt: row.updatedAt + 5 };
        await store.sessions.put(replacement);
        const stored = await store.sessions.get(row.key);
        expect(stored).toEqual(replacement);
        expect(stored?.displayName).toBeUndefined();
        expect(await store.sessions.count()).toBe(1);

        expect(await store.sessions.delete(row.key)).toBe(true);
        expect(await store.sessions.delete(row.key)).toBe(false);
        expect(await store.sessions.get(row.key)).toBeUndefined();
        expect(await store.sessions.count()).toBe(0);
      });
    });

    it("returns copies: mutating a result does not change the store", async () => {
      await withStore(async (store) => {
        const row = sampleSession();
        await store.sessions.put(row);
        const first = await store.sessions.get(row.key);
        first!.taint = "RESTRICTED";
        row.taint = "CONFIDENTIAL";
        expect((await store.sessions.get(row.key))?.taint).toBe("PUBLIC");
      });
    });

    it("rejects an invalid row naming the field, and stores nothing", async () => {
      await withStore(async (store) => {
        const bad = { ...sampleSession(), sessionId: "../../etc/passwd" };
        await expect(store.sessions.put(bad)).rejects.toEqual(code("INVALID_REQUEST"));
        await expect(store.sessions.put(bad)).rejects.toThrow(/sessionId/);
        const badLevel = { ...sampleSession(), taint: "SECRET" } as unknown as SessionEntry;
        await expect(store.sessions.put(badLevel)).rejects.toThrow(/taint/);
        expect(await store.sessions.count()).toBe(0);
        expect(await store.sessions.get(bad.key)).toBeUndefined();
      });
    });

    it("finds the keys whose current sessionId is given", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        const a = sampleSession({ key: "agent:main:a", sessionId });
        const b = sampleSession({ key: "agent:main:b", sessionId });
        await store.sessions.put(a);
        await store.sessions.put(b);
        await store.sessions.put(sampleSession({ key: "agent:main:c" }));
        expect((await store.sessions.keysForSessionId(sessionId)).sort()).toEqual([
          "agent:main:a",
          "agent:main:b",
        ]);

        await store.sessions.put({ ...a, sessionId: uuid() });
        expect(await store.sessions.keysForSessionId(sessionId)).toEqual(["agent:main:b"]);
        await store.sessions.delete(b.key);
        expect(await store.sessions.keysForSessionId(sessionId)).toEqual([]);
        expect(await store.sessions.keysForSessionId(uuid())).toEqual([]);
      });
    });

    it("lists newest first (ties by key), up to the limit, and follows updates", async () => {
      await withStore(async (store) => {
        const rows = [
          sampleSession({ key: "agent:main:b", updatedAt: 300 }),
          sampleSession({ key: "agent:main:a", updatedAt: 300 }),
          sampleSession({ key: "agent:main:c", updatedAt: 100 }),
          sampleSession({ key: "agent:main:d", updatedAt: 200 }),
        ];
        for (const row of rows) await store.sessions.put(row);
        const all = await store.sessions.list({ limit: 10 });
        expect(all.entries.map((row) => row.key)).toEqual([
          "agent:main:a",
          "agent:main:b",
          "agent:main:d",
          "agent:main:c",
        ]);
        expect(all.hidden).toBe(0);

        const two = await store.sessions.list({ limit: 2 });
        expect(two.entries.map((row) => row.key)).toEqual(["agent:main:a", "agent:main:b"]);

        await store.sessions.put({ ...rows[2]!, updatedAt: 400 });
        const after = await store.sessions.list({ limit: 2 });
        expect(after.entries.map((row) => row.key)).toEqual(["agent:main:c", "agent:main:a"]);

        await store.sessions.delete("agent:main:a");
        const afterDelete = await store.sessions.list({ limit: 10 });
        expect(afterDelete.entries.map((row) => row.key)).toEqual([
          "agent:main:c",
          "agent:main:b",
          "agent:main:d",
        ]);
      });
    });

    it("applies every list filter", async () => {
      await withStore(async (store) => {
        const parent = "agent:main:main";
        await store.sessions.put(sampleSession({ key: parent, updatedAt: 50 }));
        await store.sessions.put(
          sampleSession({
            key: "agent:research:subagent:1",
            agentId: "research",
            spawnedBy: parent,
            updatedAt: 40,
          }),
        );
        await store.sessions.put(
          sampleSession({
            key: "agent:research:cron:nightly",
            agentId: "research",
            label: "Nightly",
            updatedAt: 30,
          }),
        );
        await store.sessions.put(
          sampleSession({ key: "agent:main:discord:group:dev", displayName: "Dev Room", updatedAt: 20 }),
        );
        await store.sessions.put(
          sampleSession({ key: "agent:main:subagent:old", spawnedBy: parent, archivedAt: 25, updatedAt: 10 }),
        );
        const keys = async (query: Parameters<Store["sessions"]["list"]>[0]) =>
          (await store.sessions.list(query)).entries.map((row) => row.key);

        expect(await keys({ limit: 10 })).not.toContain("agent:main:subagent:old");
        expect(await keys({ limit: 10, includeArchived: true })).toContain("agent:main:subagent:old");
        expect(await keys({ limit: 10, agentId: "research" })).toEqual([
          "agent:research:subagent:1",
          "agent:research:cron:nightly",
        ]);
        expect(await keys({ limit: 10, activeSince: 30 })).toEqual([
          parent,
          "agent:research:subagent:1",
          "agent:research:cron:nightly",
        ]);
        expect(await keys({ limit: 10, spawnedBy: parent, includeArchived: true })).toEqual([
          "agent:research:subagent:1",
          "agent:main:subagent:old",
        ]);
        expect(await keys({ limit: 10, label: "Nightly" })).toEqual(["agent:research:cron:nightly"]);
        expect(await keys({ limit: 10, search: "dev room" })).toEqual(["agent:main:discord:group:dev"]);
        expect(await keys({ limit: 10, search: "NIGHT" })).toEqual(["agent:research:cron:nightly"]);
        expect(await keys({ limit: 10, search: "SUBAGENT:1" })).toEqual(["agent:research:subagent:1"]);
        // Kinds come from core's key rules.
        expect(await keys({ limit: 10, kinds: ["cron", "group"] })).toEqual([
          "agent:research:cron:nightly",
          "agent:main:discord:group:dev",
        ]);
        expect(await keys({ limit: 10, kinds: ["subagent"], includeArchived: true })).toEqual([
          "agent:research:subagent:1",
          "agent:main:subagent:old",
        ]);
        expect(await keys({ limit: 10, agentId: "research", activeSince: 35 })).toEqual([
          "agent:research:subagent:1",
        ]);
      });
    });

    it("counts rows withheld by visibility among the rows the page went through", async () => {
      await withStore(async (store) => {
        for (let i = 0; i < 10; i++) {
          await store.sessions.put(
            sampleSession({
              key: `agent:${i % 2 === 0 ? "main" : "other"}:s${i}`,
              agentId: i % 2 === 0 ? "main" : "other",
              updatedAt: 100 - i,
            }),
          );
        }
        // Only agent main's rows are visible; the caller's own row is none of these.
        const visible: SessionListOptions = {
          visibility: {
            selfKey: "agent:main:none",
            maxTaint: "RESTRICTED",
            agents: ["main"],
            sandboxed: false,
          },
        };
        const page = await store.sessions.list({ limit: 2 }, visible);
        expect(page.entries.map((row) => row.key)).toEqual(["agent:main:s0", "agent:main:s2"]);
        // s1 lies between the two rows returned; rows past the last one are not looked at.
        expect(page.hidden).toBe(1);
        // A page that is not full went through every matching row.
        const whole = await store.sessions.list({ limit: 10 }, visible);
        expect(whole.entries).toHaveLength(5);
        expect(whole.hidden).toBe(5);
        // Rows excluded by plain filters are not "hidden".
        const filtered = await store.sessions.list({ limit: 10, activeSince: 97 }, visible);
        expect(filtered.entries.map((row) => row.key)).toEqual(["agent:main:s0", "agent:main:s2"]);
        expect(filtered.hidden).toBe(2);
      });
    });

    it("writes with compare-and-set: a stale version is refused with CONFLICT naming the key and both versions", async () => {
      await withStore(async (store) => {
        const row = sampleSession({ key: "agent:main:cas" });
        expect(await store.sessions.getVersioned(row.key)).toBeUndefined();
        const v1 = await store.sessions.put(row, { expectedVersion: 0 });
        expect(await store.sessions.getVersioned(row.key)).toEqual({ row, version: v1 });
        await expect(store.sessions.put(row, { expectedVersion: 0 })).rejects.toEqual(code("CONFLICT"));

        const v2 = await store.sessions.put({ ...row, updatedAt: 2 }, { expectedVersion: v1 });
        expect(v2).not.toBe(v1);
        const stale = store.sessions.put({ ...row, label: "stale" }, { expectedVersion: v1 });
        await expect(stale).rejects.toEqual(code("CONFLICT"));
        await stale.catch((error: Error) => {
          expect(error.message).toContain(row.key);
          expect(error.message).toContain(String(v1));
          expect(error.message).toContain(String(v2));
        });
        expect(await store.sessions.get(row.key)).toEqual({ ...row, updatedAt: 2 });

        // A plain put still writes unconditionally, and moves the version on.
        const v3 = await store.sessions.put({ ...row, updatedAt: 3 });
        expect(new Set([v1, v2, v3]).size).toBe(3);
        await expect(store.sessions.put(row, { expectedVersion: v2 })).rejects.toEqual(code("CONFLICT"));

        // A delete can be conditional too.
        await expect(store.sessions.delete(row.key, { expectedVersion: v2 })).rejects.toEqual(
          code("CONFLICT"),
        );
        expect(await store.sessions.get(row.key)).toBeDefined();
        expect(await store.sessions.delete("agent:main:absent", { expectedVersion: 0 })).toBe(false);
        // Deleted and created again: the old versions never match again (no ABA).
        expect(await store.sessions.delete(row.key, { expectedVersion: v3 })).toBe(true);
        await expect(store.sessions.put(row, { expectedVersion: v3 })).rejects.toEqual(code("CONFLICT"));
        const v4 = await store.sessions.put(row, { expectedVersion: 0 });
        expect([v1, v2, v3]).not.toContain(v4);
        await expect(store.sessions.put(row, { expectedVersion: -1 })).rejects.toEqual(
          code("INVALID_REQUEST"),
        );
      });
    });

    it("touches a row: updatedAt never falls, tokens add up, a reset row is left alone", async () => {
      await withStore(async (store) => {
        const row = sampleSession({ key: "agent:main:touched", updatedAt: 1_000 });
        const version = await store.sessions.put(row);
        const touch = { sessionId: row.sessionId, at: 2_000 };
        expect(await store.sessions.touch(row.key, touch)).toBe(true);
        expect(await store.sessions.touch(row.key, { ...touch, at: 1_500, addTokens: 7 })).toBe(true);
        await Promise.all([
          store.sessions.touch(row.key, { ...touch, addTokens: 5 }),
          store.sessions.touch(row.key, { ...touch, addTokens: 3 }),
        ]);
        expect(await store.sessions.get(row.key)).toEqual({ ...row, updatedAt: 2_000, totalTokens: 15 });
        const listed = await store.sessions.list({ limit: 1 });
        expect(listed.entries[0]?.updatedAt).toBe(2_000);
        // The version moved on: a compare-and-set based on the read before the touches is refused.
        await expect(
          store.sessions.put({ ...row, label: "stale" }, { expectedVersion: version }),
        ).rejects.toEqual(code("CONFLICT"));
        // Another sessionId (the key was reset meanwhile) or no row: nothing is written.
        expect(await store.sessions.touch(row.key, { sessionId: uuid(), at: 9_000, addTokens: 1 })).toBe(
          false,
        );
        expect(await store.sessions.touch("agent:main:absent", { ...touch, at: 9_000 })).toBe(false);
        expect(await store.sessions.get("agent:main:absent")).toBeUndefined();
        expect((await store.sessions.get(row.key))?.updatedAt).toBe(2_000);
      });
    });

    it("rejects a bad touch naming the field, and changes nothing", async () => {
      await withStore(async (store) => {
        const row = sampleSession({ key: "agent:main:badtouch" });
        await store.sessions.put(row);
        for (const [touch, field] of [
          [{ sessionId: "../../etc", at: 1 }, "sessionId"],
          [{ sessionId: row.sessionId, at: -1 }, "at"],
          [{ sessionId: row.sessionId, at: 1, addTokens: 1.5 }, "addTokens"],
        ] as const) {
          const refused = store.sessions.touch(row.key, touch as never);
          await expect(refused).rejects.toEqual(code("INVALID_REQUEST"));
          await refused.catch((error: Error) => expect(error.message).toContain(field));
        }
        expect(await store.sessions.get(row.key)).toEqual(row);
      });
    });

    it("lets exactly one of concurrent compare-and-set writes of one version win", async () => {
      await withStore(async (store) => {
        const row = sampleSession({ key: "agent:main:race" });
        const version = await store.sessions.put(row);
        const writes = Array.from({ length: 5 }, (_, i) =>
          store.sessions.put({ ...row, label: `w${i}` }, { expectedVersion: version }),
        );
        expect(await settle(writes)).toEqual({ succeeded: 1, codes: Array(4).fill("CONFLICT") });
        const inserts = Array.from({ length: 3 }, () =>
          store.sessions.put(sampleSession({ key: "agent:main:new" }), { expectedVersion: 0 }),
        );
        expect(await settle(inserts)).toEqual({ succeeded: 1, codes: ["CONFLICT", "CONFLICT"] });
      });
    });

    it("applies visibility given as data: taint, agents, sandbox, the caller's own row and a residual", async () => {
      await withStore(async (store) => {
        const self = "agent:main:main";
        const rows = [
          sampleSession({ key: self, taint: "RESTRICTED", updatedAt: 100 }),
          sampleSession({ key: "agent:main:a", taint: "INTERNAL", updatedAt: 90 }),
          sampleSession({ key: "agent:main:b", taint: "CONFIDENTIAL", updatedAt: 80 }),
          sampleSession({ key: "agent:research:main", agentId: "research", spawnedBy: self, updatedAt: 70 }),
          sampleSession({ key: "agent:ops:main", agentId: "ops", updatedAt: 60 }),
          sampleSession({ key: "agent:main:subagent:x", spawnedBy: self, updatedAt: 50 }),
        ];
        for (const row of rows) await store.sessions.put(row);
        const keys = async (visibility: SessionVisibility, residual?: (entry: SessionEntry) => boolean) => {
          const result = await store.sessions.list(
            { limit: 10 },
            residual ? { visibility, residual } : { visibility },
          );
          return { keys: result.entries.map((row) => row.key), hidden: result.hidden };
        };
        const base = { selfKey: self, maxTaint: "INTERNAL" as const, agents: ["main"], sandboxed: false };
        expect(await keys(base)).toEqual({
          keys: [self, "agent:main:a", "agent:main:subagent:x"],
          hidden: 3,
        });
        expect((await keys({ ...base, agents: ["main", "RES*"] })).keys).toEqual([
          self,
          "agent:main:a",
          "agent:research:main",
          "agent:main:subagent:x",
        ]);
        expect((await keys({ ...base, agents: "all", sandboxed: true })).keys).toEqual([
          self,
          "agent:research:main",
          "agent:main:subagent:x",
        ]);
        expect((await keys({ ...base, agents: [] })).keys).toEqual([self]);
        const asked: string[] = [];
        const residual = (entry: SessionEntry) => {
          asked.push(entry.key);
          return entry.key !== "agent:main:a";
        };
        expect(await keys(base, residual)).toEqual({ keys: [self, "agent:main:subagent:x"], hidden: 4 });
        expect(asked).toEqual(["agent:main:a", "agent:main:subagent:x"]);
        await expect(
          store.sessions.list({ limit: 10 }, { visibility: { ...base, maxTaint: "SECRET" as never } }),
        ).rejects.toEqual(code("INVALID_REQUEST"));
      });
    });

    it("classifies kinds with core's key rules for the query's mainKey", async () => {
      await withStore(async (store) => {
        await store.sessions.put(sampleSession({ key: "agent:main:home", updatedAt: 3 }));
        await store.sessions.put(sampleSession({ key: "agent:main:main", updatedAt: 2 }));
        await store.sessions.put(sampleSession({ key: "agent:main:cron:daily", updatedAt: 1 }));
        const keys = async (query: Parameters<Store["sessions"]["list"]>[0]) =>
          (await store.sessions.list(query)).entries.map((row) => row.key);
        expect(await keys({ limit: 10, kinds: ["main"] })).toEqual(["agent:main:main"]);
        expect(await keys({ limit: 10, kinds: ["main"], mainKey: "home" })).toEqual(["agent:main:home"]);
        expect(await keys({ limit: 10, kinds: ["main", "cron"], mainKey: "home" })).toEqual([
          "agent:main:home",
          "agent:main:cron:daily",
        ]);
      });
    });

    it("pages with after: every matching row exactly once, in order, whatever the source", async () => {
      await withStore(async (store) => {
        const keys: string[] = [];
        for (let index = 0; index < 23; index++) {
          const key = `agent:${index % 2 ? "main" : "research"}:dm:${String(index).padStart(2, "0")}`;
          keys.push(key);
          // Pairs share an updatedAt, so the key decides their order.
          await store.sessions.put(sampleSession({ key, updatedAt: 1_000 + Math.floor(index / 2) }));
        }
        const pageThrough = async (query: Omit<SessionListQuery, "limit" | "after">) => {
          const seen: string[] = [];
          let after: SessionListQuery["after"];
          for (let pages = 0; pages < 30; pages++) {
            const page = await store.sessions.list({ ...query, limit: 4, ...(after ? { after } : {}) });
            seen.push(...page.entries.map((row) => row.key));
            const last = page.entries.at(-1);
            if (page.entries.length < 4 || !last) break;
            after = { updatedAt: last.updatedAt, key: last.key };
          }
          return seen;
        };
        const all = (await store.sessions.list({ limit: 100 })).entries.map((row) => row.key);
        expect(all).toHaveLength(23);
        expect(await pageThrough({})).toEqual(all);
        const mains = (await store.sessions.list({ limit: 100, agentId: "main" })).entries.map(
          (row) => row.key,
        );
        expect(await pageThrough({ agentId: "main" })).toEqual(mains);
        expect(await pageThrough({ search: "dm:1" })).toEqual(all.filter((key) => key.includes("dm:1")));
        const last = (await store.sessions.get(all.at(-1)!))!;
        expect(
          (await store.sessions.list({ limit: 10, after: { updatedAt: last.updatedAt, key: last.key } }))
            .entries,
        ).toEqual([]);
        await expect(
          store.sessions.list({
            limit: 1,
            after: { updatedAt: "x", key: 1 } as unknown as SessionListQuery["after"],
          }),
        ).rejects.toEqual(code("INVALID_REQUEST"));
      });
    });

    it("rejects a list query without a valid limit", async () => {
      await withStore(async (store) => {
        await expect(store.sessions.list({ limit: 0 })).rejects.toEqual(code("INVALID_REQUEST"));
        await expect(store.sessions.list({} as { limit: number })).rejects.toThrow(/limit/);
      });
    });
  });

  describe("transcripts", () => {
    it("creates transcripts idempotently and refuses a different key for the same sessionId", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        expect(await store.transcripts.exists(sessionId)).toBe(false);
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        expect(await store.transcripts.exists(sessionId)).toBe(true);
        expect(await store.transcripts.lastSeq(sessionId)).toBe(0);
        await expect(
          store.transcripts.create({ sessionId, key: "agent:main:other", createdAt: 1 }),
        ).rejects.toEqual(code("CONFLICT"));
        expect(typeof store.transcripts.locate(sessionId)).toBe("string");
        expect(store.transcripts.locate(sessionId)).toContain(sessionId);
      });
    });

    it("refuses sessionIds that are not UUIDs and writes nothing", async () => {
      await withStore(async (store) => {
        for (const bad of ["../../etc/passwd", "agent:main:main", "", "not-a-uuid"]) {
          await expect(
            store.transcripts.create({ sessionId: bad, key: "agent:main:main", createdAt: 1 }),
          ).rejects.toEqual(code("INVALID_REQUEST"));
          await expect(store.transcripts.append(bad, [sampleMessage("x")])).rejects.toEqual(
            code("INVALID_REQUEST"),
          );
          await expect(store.transcripts.read(bad, { limit: 5 })).rejects.toEqual(code("INVALID_REQUEST"));
          await expect(store.transcripts.exists(bad)).rejects.toEqual(code("INVALID_REQUEST"));
          expect(() => store.transcripts.locate(bad)).toThrow(/sessionId/);
        }
      });
    });

    it("answers NOT_FOUND for a transcript that does not exist", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await expect(store.transcripts.append(sessionId, [sampleMessage("x")])).rejects.toEqual(
          code("NOT_FOUND"),
        );
        await expect(store.transcripts.read(sessionId, { limit: 5 })).rejects.toEqual(code("NOT_FOUND"));
        await expect(store.transcripts.lastSeq(sessionId)).rejects.toEqual(code("NOT_FOUND"));
        expect(await store.transcripts.exists(sessionId)).toBe(false);
      });
    });

    it("assigns strictly increasing seqs and fills id and ts", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        const before = Date.now();
        const first = await store.transcripts.append(sessionId, [sampleMessage("one"), sampleMessage("two")]);
        expect(first.map((entry) => entry.seq)).toEqual([1, 2]);
        for (const entry of first) {
          expect(entry.id.length).toBeGreaterThan(0);
          expect(entry.ts).toBeGreaterThanOrEqual(before);
        }
        expect(first[0]!.id).not.toBe(first[1]!.id);
        const second = await store.transcripts.append(sessionId, [
          sampleMessage("three", { id: "custom-id", ts: 42 }),
        ]);
        expect(second).toHaveLength(1);
        expect(second[0]).toMatchObject({ seq: 3, id: "custom-id", ts: 42 });
        expect(await store.transcripts.lastSeq(sessionId)).toBe(3);
        expect(await store.transcripts.append(sessionId, [])).toEqual([]);
        expect(await store.transcripts.lastSeq(sessionId)).toBe(3);
      });
    });

    it("keeps every field of every entry kind", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        const inputs: TranscriptEntryInput[] = [
          sampleMessage("from a peer ✓ ünïcode", {
            label: "CONFIDENTIAL",
            runId: "run-1",
            provenance: {
              kind: "agent",
              fromSessionKey: "agent:b:main",
              fromRunId: "r0",
              chainId: "c1",
              hop: 2,
              step: "send",
            },
          }),
          {
            type: "message",
            label: "INTERNAL",
            message: {
              role: "toolCall",
              content: [
                {
                  type: "toolCall",
                  id: "t1",
                  name: "sessions_list",
                  args: { limit: 5, nested: { a: [1, 2] } },
                },
              ],
            },
          },
          {
            type: "message",
            label: "INTERNAL",
            message: {
              role: "toolResult",
              content: [
                { type: "toolResult", toolCallId: "t1", name: "sessions_list", result: { ok: true } },
              ],
            },
          },
          {
            type: "taint",
            label: "CONFIDENTIAL",
            taint: { from: "PUBLIC", to: "CONFIDENTIAL", reason: "read", source: "agent:b:main" },
          },
          { type: "event", label: "PUBLIC", event: { name: "reset", data: { by: "operator" } } },
        ];
        const appended = await store.transcripts.append(sessionId, inputs);
        const read = await store.transcripts.read(sessionId, { limit: 10 });
        expect(read.entries).toEqual(appended);
        appended.forEach((entry, index) => {
          expect(entry).toMatchObject(inputs[index]!);
        });
      });
    });

    it("rejects a batch with one bad entry and writes none of it", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        await store.transcripts.append(sessionId, [sampleMessage("keep")]);
        const bad = {
          type: "message",
          label: "TOP-SECRET",
          message: { role: "user", content: [] },
        } as unknown as TranscriptEntryInput;
        const attempt = store.transcripts.append(sessionId, [sampleMessage("a"), bad, sampleMessage("b")]);
        await expect(attempt).rejects.toEqual(code("INVALID_REQUEST"));
        await expect(store.transcripts.append(sessionId, [sampleMessage("a"), bad])).rejects.toThrow(
          /entries\[1\]\.label/,
        );
        await expect(
          store.transcripts.append(sessionId, [
            { ...sampleMessage("x"), type: "nonsense" } as unknown as TranscriptEntryInput,
          ]),
        ).rejects.toThrow(/entries\[0\]\.type/);
        expect(await store.transcripts.lastSeq(sessionId)).toBe(1);
        const read = await store.transcripts.read(sessionId, { limit: 10 });
        expect(read.entries.map(text)).toEqual(["keep"]);
        const next = await store.transcripts.append(sessionId, [sampleMessage("next")]);
        expect(next[0]!.seq).toBe(2);
      });
    });

    it("keeps seqs unique and ordered under concurrent appends", async () => {
      await withStore(async (store) => {
        const sessionIds = [uuid(), uuid()];
        for (const sessionId of sessionIds)
          await store.transcripts.create({ sessionId, key: `agent:main:${sessionId}`, createdAt: 1 });
        const results = await Promise.all(
          Array.from({ length: 60 }, (_, i) =>
            store.transcripts.append(sessionIds[i % 2]!, [
              sampleMessage(`m${i}-a`),
              sampleMessage(`m${i}-b`),
            ]),
          ),
        );
        for (const result of results) expect(result[1]!.seq).toBe(result[0]!.seq + 1);
        for (const sessionId of sessionIds) {
          const read = await store.transcripts.read(sessionId, { limit: 500 });
          expect(read.entries.map((entry) => entry.seq)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
          expect(new Set(read.entries.map(text)).size).toBe(60);
          expect(await store.transcripts.lastSeq(sessionId)).toBe(60);
        }
      });
    });

    it("reads the newest entries, oldest first, and pages back with before", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        for (let batch = 0; batch < 5; batch++) {
          await store.transcripts.append(
            sessionId,
            Array.from({ length: 5 }, (_, i) => sampleMessage(`m${batch * 5 + i + 1}`)),
          );
        }
        const tail = await store.transcripts.read(sessionId, { limit: 3 });
        expect(tail.entries.map((entry) => entry.seq)).toEqual([23, 24, 25]);
        expect(tail.entries.map(text)).toEqual(["m23", "m24", "m25"]);
        expect(tail.truncated).toBe(false);
        expect(tail.nextBefore).toBe(23);

        const seen: number[] = [];
        let before: number | undefined;
        for (let page = 0; page < 20; page++) {
          const result = await store.transcripts.read(sessionId, { limit: 4, ...(before ? { before } : {}) });
          seen.unshift(...result.entries.map((entry) => entry.seq));
          before = result.nextBefore;
          if (before === undefined) break;
        }
        expect(seen).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));

        const middle = await store.transcripts.read(sessionId, { limit: 3, before: 11 });
        expect(middle.entries.map((entry) => entry.seq)).toEqual([8, 9, 10]);
        const start = await store.transcripts.read(sessionId, { limit: 10, before: 3 });
        expect(start.entries.map((entry) => entry.seq)).toEqual([1, 2]);
        expect(start.nextBefore).toBeUndefined();
        const whole = await store.transcripts.read(sessionId, { limit: 100 });
        expect(whole.entries).toHaveLength(25);
        expect(whole.nextBefore).toBeUndefined();
        const beyond = await store.transcripts.read(sessionId, { limit: 2, before: 1000 });
        expect(beyond.entries.map((entry) => entry.seq)).toEqual([24, 25]);
        const none = await store.transcripts.read(sessionId, { limit: 2, before: 1 });
        expect(none.entries).toEqual([]);
        expect(none.nextBefore).toBeUndefined();
      });
    });

    it("reads an empty transcript", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        expect(await store.transcripts.read(sessionId, { limit: 10 })).toEqual({
          entries: [],
          truncated: false,
        });
      });
    });

    it("filters during the scan: the limit counts matching entries only", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        const inputs = Array.from({ length: 20 }, (_, i) =>
          i % 4 === 0
            ? sampleMessage(`user-${i}`)
            : {
                ...sampleMessage(`tool-${i}`),
                message: {
                  role: "toolResult" as const,
                  content: [{ type: "text" as const, text: `tool-${i}` }],
                },
              },
        );
        await store.transcripts.append(sessionId, inputs);
        const users = (entry: TranscriptEntry) => entry.message?.role === "user";
        const result = await store.transcripts.read(sessionId, { limit: 3, filter: users });
        expect(result.entries.map(text)).toEqual(["user-8", "user-12", "user-16"]);
        expect(result.nextBefore).toBe(9);
        const older = await store.transcripts.read(sessionId, {
          limit: 3,
          filter: users,
          before: result.nextBefore!,
        });
        expect(older.entries.map(text)).toEqual(["user-0", "user-4"]);
        expect(older.nextBefore).toBeUndefined();
      });
    });

    it("caps output bytes by dropping whole entries from the old end", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        await store.transcripts.append(
          sessionId,
          Array.from({ length: 10 }, (_, i) => sampleMessage(`${i}:${"x".repeat(100 + i * 10)}`)),
        );
        const all = (await store.transcripts.read(sessionId, { limit: 10 })).entries;
        const sizes = all.map(serialisedSize);
        const lastThree = sizes[7]! + sizes[8]! + sizes[9]!;

        const exact = await store.transcripts.read(sessionId, { limit: 10, maxBytes: lastThree });
        expect(exact.entries.map((entry) => entry.seq)).toEqual([8, 9, 10]);
        expect(exact.truncated).toBe(true);
        expect(exact.nextBefore).toBe(8);

        const almost = await store.transcripts.read(sessionId, { limit: 10, maxBytes: lastThree - 1 });
        expect(almost.entries.map((entry) => entry.seq)).toEqual([9, 10]);
        expect(almost.truncated).toBe(true);

        const roomy = await store.transcripts.read(sessionId, { limit: 3, maxBytes: lastThree + 10_000 });
        expect(roomy.entries.map((entry) => entry.seq)).toEqual([8, 9, 10]);
        expect(roomy.truncated).toBe(false);

        const everything = await store.transcripts.read(sessionId, { limit: 10, maxBytes: 1_000_000 });
        expect(everything.entries).toHaveLength(10);
        expect(everything.truncated).toBe(false);

        const paged = await store.transcripts.read(sessionId, {
          limit: 10,
          maxBytes: lastThree,
          before: exact.nextBefore!,
        });
        expect(paged.entries.map((entry) => entry.seq)).toEqual([5, 6, 7]);

        // Not even the newest entry fits: it is returned whole anyway, and paging moves on.
        const tiny = await store.transcripts.read(sessionId, { limit: 10, maxBytes: 10 });
        expect(tiny.entries.map((entry) => entry.seq)).toEqual([10]);
        expect(tiny.entries[0]).toEqual(all[9]);
        expect(tiny.truncated).toBe(true);
        expect(tiny.nextBefore).toBe(10);
      });
    });

    it("reads back a message of the largest accepted size whole, past any byte cap", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        const big = "b".repeat(MAX_MESSAGE_BYTES);
        const medium = "m".repeat(200_000);
        await store.transcripts.append(sessionId, [sampleMessage(big), sampleMessage(medium)]);
        await store.transcripts.append(sessionId, [sampleMessage("small")]);

        // A 64 KiB cap: the newest small entry fits, the 200 kB one does not and waits for the next page.
        const first = await store.transcripts.read(sessionId, { limit: 50, maxBytes: 64 * 1024 });
        expect(first.entries.map((entry) => entry.seq)).toEqual([3]);
        expect(first.truncated).toBe(true);
        expect(first.nextBefore).toBe(3);
        const second = await store.transcripts.read(sessionId, {
          limit: 50,
          maxBytes: 64 * 1024,
          before: first.nextBefore!,
        });
        expect(second.entries.map((entry) => entry.seq)).toEqual([2]);
        expect(second.entries[0]!.message!.content).toEqual([{ type: "text", text: medium }]);
        const third = await store.transcripts.read(sessionId, {
          limit: 50,
          maxBytes: 64 * 1024,
          before: second.nextBefore!,
        });
        expect(third.entries.map((entry) => entry.seq)).toEqual([1]);
        expect(third.entries[0]!.message!.content).toEqual([{ type: "text", text: big }]);
        expect(third.nextBefore).toBeUndefined();
      });
    });

    it("rejects bad read options naming the field", async () => {
      await withStore(async (store) => {
        const sessionId = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:main", createdAt: 1 });
        await expect(store.transcripts.read(sessionId, { limit: 0 })).rejects.toThrow(/limit/);
        await expect(store.transcripts.read(sessionId, { limit: 5, before: -1 })).rejects.toThrow(/before/);
        await expect(store.transcripts.read(sessionId, { limit: 5, maxBytes: 0 })).rejects.toEqual(
          code("INVALID_REQUEST"),
        );
      });
    });

    it("archives and removes transcripts", async () => {
      await withStore(async (store) => {
        const kept = uuid();
        const erased = uuid();
        for (const sessionId of [kept, erased]) {
          await store.transcripts.create({ sessionId, key: `agent:main:${sessionId}`, createdAt: 1 });
          await store.transcripts.append(sessionId, [sampleMessage("old")]);
        }
        await store.transcripts.archive(kept, "reset");
        await store.transcripts.remove(erased);
        for (const sessionId of [kept, erased]) {
          expect(await store.transcripts.exists(sessionId)).toBe(false);
          await expect(store.transcripts.read(sessionId, { limit: 1 })).rejects.toEqual(code("NOT_FOUND"));
        }
        // Both are idempotent.
        await store.transcripts.archive(kept, "delete");
        await store.transcripts.remove(erased);
        await store.transcripts.remove(uuid());

        // The sessionId can start over with a fresh transcript.
        await store.transcripts.create({ sessionId: kept, key: "agent:main:again", createdAt: 2 });
        expect(await store.transcripts.lastSeq(kept)).toBe(0);
        const fresh = await store.transcripts.append(kept, [sampleMessage("new")]);
        expect(fresh[0]!.seq).toBe(1);
        expect((await store.transcripts.read(kept, { limit: 10 })).entries.map(text)).toEqual(["new"]);
      });
    });

    it("prunes archived transcripts archived before a cutoff, never live ones", async () => {
      await withStore(async (store) => {
        const archived = [uuid(), uuid(), uuid()];
        const live = uuid();
        for (const sessionId of [...archived, live]) {
          await store.transcripts.create({ sessionId, key: `agent:main:${sessionId}`, createdAt: 1 });
          await store.transcripts.append(sessionId, [sampleMessage("kept?")]);
        }
        const before = Date.now();
        for (const sessionId of archived) await store.transcripts.archive(sessionId, "archive");
        // Nothing was archived an hour ago.
        expect(await store.transcripts.pruneArchives({ archivedBefore: before - 3_600_000, limit: 10 })).toBe(
          0,
        );
        const later = Date.now() + 60_000;
        expect(await store.transcripts.pruneArchives({ archivedBefore: later, limit: 2 })).toBe(2);
        expect(await store.transcripts.pruneArchives({ archivedBefore: later, limit: 10 })).toBe(1);
        expect(await store.transcripts.pruneArchives({ archivedBefore: later, limit: 10 })).toBe(0);
        expect((await store.transcripts.read(live, { limit: 10 })).entries.map(text)).toEqual(["kept?"]);
        await expect(
          store.transcripts.pruneArchives({ archivedBefore: Number.NaN, limit: 1 }),
        ).rejects.toEqual(code("INVALID_REQUEST"));
      });
    });
  });

  describe("run registry", () => {
    it("stores, replaces and finds runs by id and idempotency key", async () => {
      await withStore(async (store) => {
        const run = sampleRun({ idempotencyKey: "idem-1" });
        expect(await store.runs.get(run.runId)).toBeUndefined();
        await store.runs.put(run);
        expect(await store.runs.get(run.runId)).toEqual(run);
        expect(await store.runs.getByIdempotencyKey("idem-1")).toEqual(run);
        expect(await store.runs.getByIdempotencyKey("idem-2")).toBeUndefined();

        const done = { ...run, status: "ok" as const, endedAt: run.createdAt + 10, reply: "done" };
        await store.runs.put(done);
        expect(await store.runs.get(run.runId)).toEqual(done);
        expect(await store.runs.getByIdempotencyKey("idem-1")).toEqual(done);

        await store.runs.put({ ...done, idempotencyKey: "idem-3" });
        expect(await store.runs.getByIdempotencyKey("idem-1")).toBeUndefined();
        expect((await store.runs.getByIdempotencyKey("idem-3"))?.runId).toBe(run.runId);
      });
    });

    it("keeps idempotency keys unique: a run cannot take a key another run holds", async () => {
      await withStore(async (store) => {
        const first = sampleRun({ idempotencyKey: "once" });
        await store.runs.put(first);
        const second = sampleRun({ idempotencyKey: "once" });
        const refused = store.runs.put(second);
        await expect(refused).rejects.toEqual(code("CONFLICT"));
        await refused.catch((error: Error) => expect(error.message).toContain(first.runId));
        expect(await store.runs.get(second.runId)).toBeUndefined();
        await store.runs.put({ ...first, status: "ok" });
        // Once the first run gives the key up, another run may take it.
        await store.runs.put({ ...first, idempotencyKey: "moved" });
        await store.runs.put(second);
        expect((await store.runs.getByIdempotencyKey("once"))?.runId).toBe(second.runId);

        const racers = Array.from({ length: 4 }, () => store.runs.put(sampleRun({ idempotencyKey: "race" })));
        expect(await settle(racers)).toEqual({ succeeded: 1, codes: ["CONFLICT", "CONFLICT", "CONFLICT"] });
      });
    });

    it("writes runs with compare-and-set (0: insert only)", async () => {
      await withStore(async (store) => {
        const run = sampleRun();
        const v1 = await store.runs.put(run, { expectedVersion: 0 });
        expect(await store.runs.getVersioned(run.runId)).toEqual({ row: run, version: v1 });
        await expect(store.runs.put(run, { expectedVersion: 0 })).rejects.toEqual(code("CONFLICT"));
        const running = { ...run, status: "running" as const, startedAt: 5 };
        const v2 = await store.runs.put(running, { expectedVersion: v1 });
        const late = store.runs.put({ ...run, status: "error" }, { expectedVersion: v1 });
        await expect(late).rejects.toEqual(code("CONFLICT"));
        await late.catch((error: Error) => expect(error.message).toContain(run.runId));
        expect(await store.runs.getVersioned(run.runId)).toEqual({ row: running, version: v2 });
        expect(await store.runs.getVersioned("missing")).toBeUndefined();
      });
    });

    it("rejects an invalid run naming the field", async () => {
      await withStore(async (store) => {
        const bad = { ...sampleRun(), status: "exploded" } as unknown as RunRecord;
        await expect(store.runs.put(bad)).rejects.toEqual(code("INVALID_REQUEST"));
        await expect(store.runs.put(bad)).rejects.toThrow(/status/);
        expect(await store.runs.get(bad.runId)).toBeUndefined();
      });
    });

    it("lists runs newest first with filters", async () => {
      await withStore(async (store) => {
        const spawn = (status: "pending" | "delivered") => ({
          requesterKey: "agent:main:main",
          childKey: "agent:main:subagent:x",
          childSessionId: uuid(),
          task: "t",
          cleanup: "keep" as const,
          announce: { status, attempts: 0, idempotencyKey: uuid() },
        });
        const runs = [
          sampleRun({ runId: "r1", status: "running", createdAt: 10, sessionKey: "agent:main:a" }),
          sampleRun({
            runId: "r2",
            status: "ok",
            createdAt: 30,
            sessionKey: "agent:main:b",
            spawn: spawn("pending"),
          }),
          sampleRun({ runId: "r3", status: "queued", createdAt: 20, sessionKey: "agent:main:a" }),
          sampleRun({
            runId: "r4",
            status: "error",
            createdAt: 40,
            sessionKey: "agent:main:a",
            spawn: spawn("delivered"),
          }),
        ];
        for (const run of runs) await store.runs.put(run);
        const ids = async (query: Parameters<Store["runs"]["list"]>[0]) =>
          (await store.runs.list(query)).map((run) => run.runId);
        expect(await ids({})).toEqual(["r4", "r2", "r3", "r1"]);
        expect(await ids({ limit: 2 })).toEqual(["r4", "r2"]);
        expect(await ids({ statuses: ["queued", "running"] })).toEqual(["r3", "r1"]);
        expect(await ids({ sessionKey: "agent:main:a" })).toEqual(["r4", "r3", "r1"]);
        expect(await ids({ pendingAnnounce: true })).toEqual(["r2"]);
        expect(await ids({ pendingAnnounce: false, sessionKey: "agent:main:a", limit: 1 })).toEqual(["r4"]);
        await store.runs.put(sampleRun({ runId: "r5", status: "ok", createdAt: 50, agentId: "research" }));
        expect(await ids({ agentId: "research" })).toEqual(["r5"]);
        await store.runs.put(sampleRun({ runId: "r6", origin: "send", createdAt: 5, followUp: "pending" }));
        await store.runs.put(sampleRun({ runId: "r7", origin: "send", createdAt: 6, followUp: "done" }));
        expect(await ids({ pendingFollowUp: true })).toEqual(["r6"]);
        expect(await ids({ origins: ["send"] })).toEqual(["r7", "r6"]);
        expect(await ids({ origins: ["send"], pendingFollowUp: false })).toEqual(["r7"]);
        expect(await ids({ origins: ["spawn", "send"], statuses: ["error"] })).toEqual([]);
        await store.runs.put(sampleRun({ runId: "r8", status: "ok", createdAt: 7, replyPost: "pending" }));
        await store.runs.put(sampleRun({ runId: "r9", status: "ok", createdAt: 8, replyPost: "done" }));
        expect(await ids({ pendingReplyPost: true })).toEqual(["r8"]);
        expect(await ids({ origins: ["chat"], statuses: ["ok"], pendingReplyPost: true })).toEqual(["r8"]);
        expect((await store.runs.get("r9"))?.replyPost).toBe("done");
        expect(await ids({ agentId: "main", statuses: ["ok", "error"], limit: 1 })).toEqual(["r4"]);
      });
    });

    it("prunes ended runs before a cutoff, oldest first, keeping pending announces and named runs", async () => {
      await withStore(async (store) => {
        const spawn = (status: "pending" | "delivered") => ({
          requesterKey: "agent:main:main",
          childKey: "agent:main:subagent:x",
          childSessionId: uuid(),
          task: "t",
          cleanup: "keep" as const,
          announce: { status, attempts: 0, idempotencyKey: uuid() },
        });
        const runs = [
          sampleRun({ runId: "old-ok", status: "ok", endedAt: 100, idempotencyKey: "idem-old" }),
          sampleRun({ runId: "old-error", status: "error", endedAt: 50 }),
          sampleRun({ runId: "old-timeout", status: "timeout", endedAt: 150 }),
          sampleRun({ runId: "old-pending", status: "ok", endedAt: 10, spawn: spawn("pending") }),
          sampleRun({ runId: "old-delivered", status: "ok", endedAt: 20, spawn: spawn("delivered") }),
          sampleRun({ runId: "old-kept", status: "ok", endedAt: 30 }),
          sampleRun({ runId: "recent", status: "ok", endedAt: 5_000 }),
          sampleRun({ runId: "running", status: "running" }),
          sampleRun({ runId: "queued", status: "queued" }),
        ];
        for (const run of runs) await store.runs.put(run);
        const keep = new Set(["old-kept"]);
        // Oldest first: a limit of 2 takes old-delivered (20) and old-error (50).
        expect(await store.runs.prune({ endedBefore: 1_000, limit: 2, keep })).toBe(2);
        expect(await store.runs.get("old-delivered")).toBeUndefined();
        expect(await store.runs.get("old-error")).toBeUndefined();
        expect(await store.runs.get("old-ok")).toBeDefined();
        expect(await store.runs.prune({ endedBefore: 1_000, limit: 100, keep })).toBe(2);
        const left = (await store.runs.list({})).map((run) => run.runId).sort();
        expect(left).toEqual(["old-kept", "old-pending", "queued", "recent", "running"]);
        expect(await store.runs.prune({ endedBefore: 1_000, limit: 100, keep })).toBe(0);
        // A pruned run's idempotency key is free again.
        expect(await store.runs.getByIdempotencyKey("idem-old")).toBeUndefined();
        await store.runs.put(sampleRun({ runId: "new-owner", idempotencyKey: "idem-old" }));
        expect((await store.runs.getByIdempotencyKey("idem-old"))?.runId).toBe("new-owner");
        await expect(store.runs.prune({ endedBefore: 1_000, limit: 0 })).rejects.toEqual(
          code("INVALID_REQUEST"),
        );
      });
    });

    it("counts ended runs, and never prunes a pending follow-up, a pending reply post or a run of an excepted origin", async () => {
      await withStore(async (store) => {
        expect(await store.runs.countEnded()).toBe(0);
        const runs = [
          sampleRun({ runId: "chat", status: "ok", endedAt: 10, origin: "chat" }),
          sampleRun({ runId: "spawn", status: "error", endedAt: 20, origin: "spawn" }),
          sampleRun({ runId: "follow", status: "ok", endedAt: 30, origin: "send", followUp: "pending" }),
          sampleRun({ runId: "done", status: "timeout", endedAt: 40, origin: "send", followUp: "done" }),
          sampleRun({ runId: "post", status: "ok", endedAt: 45, origin: "chat", replyPost: "pending" }),
          sampleRun({ runId: "posted", status: "ok", endedAt: 46, origin: "chat", replyPost: "done" }),
          sampleRun({ runId: "running", status: "running" }),
          sampleRun({ runId: "queued", status: "queued" }),
        ];
        for (const run of runs) await store.runs.put(run);
        expect(await store.runs.countEnded()).toBe(6);
        const pruned = await store.runs.prune({ endedBefore: 1_000, limit: 100, exceptOrigins: ["spawn"] });
        expect(pruned).toBe(3);
        const left = (await store.runs.list({})).map((run) => run.runId).sort();
        expect(left).toEqual(["follow", "post", "queued", "running", "spawn"]);
        expect(await store.runs.countEnded()).toBe(3);
        // A run that ends counts from its end on.
        await store.runs.put({ ...runs[6]!, status: "ok", endedAt: 50 });
        expect(await store.runs.countEnded()).toBe(4);
      });
    });
  });

  describe("archiving an idle session", () => {
    const child = (name: string) =>
      sampleSession({ key: `agent:main:subagent:${name}`, spawnedBy: "agent:main:main", spawnDepth: 1 });

    it("archives a row with no run queued or running, once, and refuses a reset, archived or missing one", async () => {
      await withStore(async (store) => {
        const row = child("idle");
        await store.sessions.put(row);
        const before = await store.sessions.getVersioned(row.key);
        expect(await store.archiveIdleSession(row.key, { sessionId: uuid(), at: 5 })).toBeUndefined();
        expect(
          await store.archiveIdleSession("agent:main:subagent:none", { sessionId: row.sessionId, at: 5 }),
        ).toBeUndefined();
        expect(await store.sessions.getVersioned(row.key)).toEqual(before);
        const ended = sampleRun({ sessionKey: row.key, sessionId: row.sessionId, status: "ok", endedAt: 2 });
        await store.runs.put(ended);
        const at = row.updatedAt + 100;
        const archived = await store.archiveIdleSession(row.key, { sessionId: row.sessionId, at });
        expect(archived).toEqual({ ...row, archivedAt: at, updatedAt: at });
        expect(await store.sessions.get(row.key)).toEqual(archived);
        // A write based on the read before the archive is refused (the row's version moved on).
        await expect(store.sessions.put(row, { expectedVersion: before!.version })).rejects.toEqual(
          code("CONFLICT"),
        );
        expect(
          await store.archiveIdleSession(row.key, { sessionId: row.sessionId, at: at + 1 }),
        ).toBeUndefined();
        expect((await store.sessions.get(row.key))?.archivedAt).toBe(at);
      });
    });

    it("refuses a time that is not one, naming the field, and leaves the row live", async () => {
      await withStore(async (store) => {
        const row = child("bad-time");
        await store.sessions.put(row);
        const refused = store.archiveIdleSession(row.key, { sessionId: row.sessionId, at: Number.NaN });
        await expect(refused).rejects.toEqual(code("INVALID_REQUEST"));
        await refused.catch((error: Error) => expect(error.message).toContain("archivedAt"));
        expect((await store.sessions.get(row.key))?.archivedAt).toBeUndefined();
      });
    });

    it("keeps a row with a run queued or running live until that run has ended", async () => {
      await withStore(async (store, harness) => {
        const row = child("busy");
        await store.sessions.put(row);
        const run = sampleRun({ sessionKey: row.key, sessionId: row.sessionId, status: "queued" });
        await store.runs.put(run, { expectedVersion: 0 });
        expect(await store.archiveIdleSession(row.key, { sessionId: row.sessionId, at: 10 })).toBeUndefined();
        await store.runs.put({ ...run, status: "running", startedAt: 2 });
        expect(await store.archiveIdleSession(row.key, { sessionId: row.sessionId, at: 10 })).toBeUndefined();
        expect((await store.sessions.get(row.key))?.archivedAt).toBeUndefined();
        // Still known after a restart (the file store rebuilds what it counts from its records).
        const current = harness.reopen ? await harness.reopened() : store;
        expect(
          await current.archiveIdleSession(row.key, { sessionId: row.sessionId, at: 10 }),
        ).toBeUndefined();
        await current.runs.put({ ...run, status: "timeout", startedAt: 2, endedAt: 3 });
        expect(await current.archiveIdleSession(row.key, { sessionId: row.sessionId, at: 10 })).toBeDefined();
      });
    });

    it("refuses a new run on an archived row, and nothing else", async () => {
      await withStore(async (store) => {
        const row = child("archived");
        await store.sessions.put(row);
        const earlier = sampleRun({
          sessionKey: row.key,
          sessionId: row.sessionId,
          status: "ok",
          endedAt: 2,
        });
        await store.runs.put(earlier, { expectedVersion: 0 });
        expect(await store.archiveIdleSession(row.key, { sessionId: row.sessionId, at: 9 })).toBeDefined();
        const late = sampleRun({ sessionKey: row.key, sessionId: row.sessionId });
        const refused = store.runs.put(late, { expectedVersion: 0 });
        await expect(refused).rejects.toEqual(code("NOT_FOUND"));
        await refused.catch((error: Error) => expect(error.message).toContain(`${row.key} (archived)`));
        expect(await store.runs.get(late.runId)).toBeUndefined();
        expect(await store.runs.list({ sessionKey: row.key })).toEqual([earlier]);
        // An existing run of it can still change; a key without a row is not checked.
        await store.runs.put({ ...earlier, reply: "noted later" });
        expect((await store.runs.get(earlier.runId))?.reply).toBe("noted later");
        const elsewhere = sampleRun({ sessionKey: "agent:main:subagent:no-row" });
        await store.runs.put(elsewhere, { expectedVersion: 0 });
        expect(await store.runs.get(elsewhere.runId)).toEqual(elsewhere);
      });
    });

    it("lets exactly one of an archive and a new run of the key through when they race", async () => {
      await withStore(async (store) => {
        const rows = Array.from({ length: 12 }, (_, i) => child(`race-${i}`));
        for (const row of rows) await store.sessions.put(row);
        for (const row of rows) {
          const run = sampleRun({ sessionKey: row.key, sessionId: row.sessionId });
          const [archived, inserted] = await Promise.allSettled([
            store.archiveIdleSession(row.key, { sessionId: row.sessionId, at: 50 }),
            store.runs.put(run, { expectedVersion: 0 }),
          ]);
          const wasArchived = archived.status === "fulfilled" && archived.value !== undefined;
          const wasInserted = inserted.status === "fulfilled";
          expect(wasArchived).not.toBe(wasInserted);
          expect((await store.runs.get(run.runId)) !== undefined).toBe(wasInserted);
        }
      });
    });
  });

  describe("audit log", () => {
    it("starts empty", async () => {
      await withStore(async (store) => {
        expect(await store.audit.last()).toBeUndefined();
        expect(await store.audit.count()).toBe(0);
        expect(await store.audit.read()).toEqual([]);
        expect(await store.audit.tail(5)).toEqual([]);
        for await (const page of store.audit.scan(10))
          expect.unreachable(`an empty log gave a page: ${page.length}`);
      });
    });

    it("appends, counts and reads records in order", async () => {
      await withStore(async (store) => {
        const records = sampleAuditRecords(0, 12);
        await store.audit.append(records.slice(0, 5));
        await store.audit.append(records.slice(5));
        expect(await store.audit.count()).toBe(12);
        expect(await store.audit.last()).toEqual(records[11]);
        expect(await store.audit.read()).toEqual(records);
        expect(await store.audit.read({ after: 3, limit: 4 })).toEqual(records.slice(4, 8));
        expect(await store.audit.read({ after: 10 })).toEqual(records.slice(11));
        expect(await store.audit.read({ after: 11 })).toEqual([]);
        expect(await store.audit.read({ limit: 2 })).toEqual(records.slice(0, 2));
        expect(await store.audit.tail(3)).toEqual(records.slice(9));
        expect(await store.audit.tail(50)).toEqual(records);
        expect(await store.audit.tail(0)).toEqual([]);
        // The whole log in the order stored, a page at a time.
        const pages: AuditRecord[][] = [];
        for await (const page of store.audit.scan(5)) pages.push(page);
        expect(pages.map((page) => page.length)).toEqual([5, 5, 2]);
        expect(pages.flat()).toEqual(records);
        const whole: AuditRecord[][] = [];
        for await (const page of store.audit.scan(100)) whole.push(page);
        expect(whole).toEqual([records]);
        await expect(store.audit.scan(0)[Symbol.asyncIterator]().next()).rejects.toThrow(/pageSize/);
      });
    });

    it("refuses a record that does not follow the last one, or a malformed one", async () => {
      await withStore(async (store) => {
        const records = sampleAuditRecords(0, 4);
        await store.audit.append(records.slice(0, 2));
        await expect(store.audit.append([records[3]!])).rejects.toEqual(code("CONFLICT"));
        await expect(store.audit.append([records[1]!])).rejects.toEqual(code("CONFLICT"));
        const malformed = { ...records[2]!, hash: "nope" };
        await expect(store.audit.append([malformed])).rejects.toEqual(code("INVALID_REQUEST"));
        await expect(store.audit.append([records[2]!, { ...records[3]!, kind: "" }])).rejects.toThrow(
          /records\[1\]\.kind/,
        );
        expect(await store.audit.count()).toBe(2);
        await store.audit.append(records.slice(2));
        expect(await store.audit.read()).toEqual(records);
      });
    });
  });

  describe("taint rise", () => {
    /** A session with its transcript and one message, and the audit log holding `records` records. */
    async function risingSession(store: Store, records: number) {
      const row = sampleSession({ key: `agent:main:rise-${uuid().slice(0, 8)}` });
      await store.sessions.put(row);
      await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
      await store.transcripts.append(row.sessionId, [sampleMessage("before")]);
      if (records > 0) await store.audit.append(sampleAuditRecords(0, records));
      const rise = {
        row: { ...row, taint: "CONFIDENTIAL" as const, updatedAt: row.updatedAt + 1 },
        entry: {
          type: "taint" as const,
          label: "CONFIDENTIAL" as const,
          taint: {
            from: "PUBLIC" as const,
            to: "CONFIDENTIAL" as const,
            reason: "test",
            source: "conformance",
          },
        },
        audit: { ...sampleAuditRecords(records, 1)[0]!, kind: "taint", sessionKey: row.key },
      };
      return { row, rise };
    }

    /** Nothing of a refused rise may be left: row, transcript and audit log as before. */
    async function expectUnchanged(store: Store, row: SessionEntry, records: number) {
      expect((await store.sessions.get(row.key))?.taint).toBe("PUBLIC");
      expect(await store.transcripts.lastSeq(row.sessionId)).toBe(1);
      expect(await store.audit.count()).toBe(records);
    }

    it("commits the transcript entry, the row and the audit record together", async () => {
      await withStore(async (store) => {
        const { row, rise } = await risingSession(store, 2);
        const result = await store.commitTaintRise(rise);
        expect(result.entry).toMatchObject({
          type: "taint",
          seq: 2,
          label: "CONFIDENTIAL",
          taint: rise.entry.taint,
        });
        expect(typeof result.entry.id).toBe("string");
        const stored = await store.sessions.getVersioned(row.key);
        expect(stored?.row.taint).toBe("CONFIDENTIAL");
        expect(stored?.version).toBe(result.version);
        const read = await store.transcripts.read(row.sessionId, { limit: 5 });
        expect(read.entries.at(-1)).toEqual(result.entry);
        expect(await store.audit.last()).toEqual(rise.audit);
        // The log goes on after the rise's record.
        await store.audit.append(sampleAuditRecords(3, 1));
        expect(await store.audit.count()).toBe(4);
      });
    });

    it("refuses a rise whose audit record does not follow the log, leaving nothing behind", async () => {
      await withStore(async (store) => {
        const { row, rise } = await risingSession(store, 2);
        await expect(store.commitTaintRise({ ...rise, audit: sampleAuditRecords(5, 1)[0]! })).rejects.toEqual(
          code("CONFLICT"),
        );
        await expectUnchanged(store, row, 2);
      });
    });

    it("refuses a rise whose expected row version is stale (another write came first), leaving nothing behind", async () => {
      await withStore(async (store) => {
        const { row, rise } = await risingSession(store, 2);
        const read = await store.sessions.getVersioned(row.key);
        // Another writer (another gateway instance) changes the row after it was read.
        await store.sessions.put({ ...read!.row, label: "renamed" });
        await expect(store.commitTaintRise({ ...rise, expectedVersion: read!.version })).rejects.toEqual(
          code("CONFLICT"),
        );
        await expectUnchanged(store, row, 2);
        const again = await store.sessions.getVersioned(row.key);
        const result = await store.commitTaintRise({
          ...rise,
          row: { ...again!.row, taint: "CONFIDENTIAL" },
          expectedVersion: again!.version,
        });
        const stored = await store.sessions.getVersioned(row.key);
        expect(stored).toEqual({
          row: expect.objectContaining({ taint: "CONFIDENTIAL", label: "renamed" }),
          version: result.version,
        });
      });
    });

    it("refuses a bad entry, row or transcript before writing anything", async () => {
      await withStore(async (store) => {
        const { row, rise } = await risingSession(store, 1);
        await expect(store.commitTaintRise({ ...rise, entry: sampleMessage("not a taint") })).rejects.toThrow(
          /entry\.type/,
        );
        await expect(
          store.commitTaintRise({ ...rise, entry: { ...rise.entry, label: "SECRET" as never } }),
        ).rejects.toEqual(code("INVALID_REQUEST"));
        await expect(store.commitTaintRise({ ...rise, row: { ...rise.row, agentId: "" } })).rejects.toEqual(
          code("INVALID_REQUEST"),
        );
        await expect(
          store.commitTaintRise({ ...rise, row: { ...rise.row, sessionId: uuid() } }),
        ).rejects.toEqual(code("NOT_FOUND"));
        await expectUnchanged(store, row, 1);
        await store.commitTaintRise(rise);
        expect((await store.sessions.get(row.key))?.taint).toBe("CONFIDENTIAL");
      });
    });
  });

  describe("meta", () => {
    it("gets and sets values", async () => {
      await withStore(async (store) => {
        expect(await store.meta.get("eventSeq")).toBeUndefined();
        await store.meta.set("eventSeq", "41");
        await store.meta.set("eventSeq", "42");
        await store.meta.set("other", "multi\nline ✓");
        expect(await store.meta.get("eventSeq")).toBe("42");
        expect(await store.meta.get("other")).toBe("multi\nline ✓");
        await expect(store.meta.set("", "x")).rejects.toEqual(code("INVALID_REQUEST"));
      });
    });
  });

  describe("health", () => {
    it("reports ok on a store that writes fine", async () => {
      await withStore(async (store) => {
        await store.meta.set("probe", "1");
        expect(await store.health()).toEqual({ ok: true });
      });
    });
  });

  describe("two instances on one backend", () => {
    it("sees the other instance's writes and refuses its stale compare-and-set", async (context) => {
      await withTwoStores(context, async (first, second) => {
        const row = sampleSession({ key: "agent:main:shared" });
        const version = await first.sessions.put(row);
        expect(await second.sessions.getVersioned(row.key)).toEqual({ row, version });
        expect((await second.sessions.list({ limit: 5 })).entries).toEqual([row]);

        await second.sessions.put({ ...row, label: "second" }, { expectedVersion: version });
        await expect(
          first.sessions.put({ ...row, label: "first" }, { expectedVersion: version }),
        ).rejects.toEqual(code("CONFLICT"));
        expect((await first.sessions.get(row.key))?.label).toBe("second");

        const race = await settle([
          first.sessions.put(sampleSession({ key: "agent:main:born" }), { expectedVersion: 0 }),
          second.sessions.put(sampleSession({ key: "agent:main:born" }), { expectedVersion: 0 }),
        ]);
        expect(race).toEqual({ succeeded: 1, codes: ["CONFLICT"] });
      });
    });

    it("lets only one instance create the run of an idempotency key", async (context) => {
      await withTwoStores(context, async (first, second) => {
        const race = await settle([
          first.runs.put(sampleRun({ idempotencyKey: "req-1" })),
          second.runs.put(sampleRun({ idempotencyKey: "req-1" })),
        ]);
        expect(race).toEqual({ succeeded: 1, codes: ["CONFLICT"] });
        const winner = await first.runs.getByIdempotencyKey("req-1");
        expect(await second.runs.getByIdempotencyKey("req-1")).toEqual(winner);
        await expect(first.runs.put(sampleRun({ idempotencyKey: "req-1" }))).rejects.toEqual(
          code("CONFLICT"),
        );

        const run = sampleRun();
        const version = await first.runs.put(run, { expectedVersion: 0 });
        await expect(second.runs.put(run, { expectedVersion: 0 })).rejects.toEqual(code("CONFLICT"));
        await second.runs.put({ ...run, status: "running" }, { expectedVersion: version });
        await expect(first.runs.put({ ...run, status: "ok" }, { expectedVersion: version })).rejects.toEqual(
          code("CONFLICT"),
        );
      });
    });
  });

  describe("durability across close and reopen", () => {
    it("keeps everything after close + reopen", async ({ skip }) => {
      const probe = await open();
      const canReopen = probe.reopen !== undefined;
      await probe.store.close();
      await probe.cleanup();
      if (!canReopen) {
        skip("this store has no reopen");
        return;
      }

      await withStore(async (store, harness) => {
        const rows = Array.from({ length: 5 }, (_, i) =>
          sampleSession({ key: `agent:main:s${i}`, updatedAt: 100 + i }),
        );
        for (const row of rows) await store.sessions.put(row);
        await store.sessions.put({ ...rows[0]!, updatedAt: 500, label: "bumped" });
        await store.sessions.delete(rows[1]!.key);
        // Touches are written by close at the latest.
        await store.sessions.touch(rows[2]!.key, { sessionId: rows[2]!.sessionId, at: 400, addTokens: 9 });

        const sessionId = uuid();
        const archived = uuid();
        await store.transcripts.create({ sessionId, key: "agent:main:s0", createdAt: 1 });
        await store.transcripts.create({ sessionId: archived, key: "agent:main:s2", createdAt: 1 });
        const appended = await store.transcripts.append(sessionId, [
          sampleMessage("one"),
          sampleMessage("two"),
        ]);
        await store.transcripts.append(archived, [sampleMessage("gone")]);
        await store.transcripts.archive(archived, "delete");

        const run = sampleRun({ idempotencyKey: "k1", status: "running" });
        await store.runs.put(run);
        await store.runs.put({ ...run, status: "ok", reply: "fine" });
        const records = sampleAuditRecords(0, 3);
        await store.audit.append(records);
        await store.meta.set("eventSeq", "7");

        const again = await harness.reopened();
        expect(await again.sessions.count()).toBe(4);
        expect(await again.sessions.get(rows[1]!.key)).toBeUndefined();
        expect(await again.sessions.get(rows[0]!.key)).toEqual({
          ...rows[0]!,
          updatedAt: 500,
          label: "bumped",
        });
        expect(await again.sessions.get(rows[2]!.key)).toEqual({
          ...rows[2]!,
          updatedAt: 400,
          totalTokens: 9,
        });
        const listed = await again.sessions.list({ limit: 2 });
        expect(listed.entries.map((row) => row.key)).toEqual(["agent:main:s0", "agent:main:s2"]);
        expect(await again.sessions.keysForSessionId(rows[3]!.sessionId)).toEqual([rows[3]!.key]);

        expect(await again.transcripts.exists(sessionId)).toBe(true);
        expect(await again.transcripts.exists(archived)).toBe(false);
        expect((await again.transcripts.read(sessionId, { limit: 10 })).entries).toEqual(appended);
        expect(await again.transcripts.lastSeq(sessionId)).toBe(2);
        const more = await again.transcripts.append(sessionId, [sampleMessage("three")]);
        expect(more[0]!.seq).toBe(3);

        expect(await again.runs.get(run.runId)).toEqual({ ...run, status: "ok", reply: "fine" });
        expect((await again.runs.getByIdempotencyKey("k1"))?.status).toBe("ok");
        expect(await again.audit.count()).toBe(3);
        expect(await again.audit.last()).toEqual(records[2]);
        expect(await again.audit.read({ after: 0 })).toEqual(records.slice(1));
        await again.audit.append(sampleAuditRecords(3, 1));
        expect(await again.audit.count()).toBe(4);
        await expect(again.audit.append(sampleAuditRecords(10, 1))).rejects.toEqual(code("CONFLICT"));
        expect(await again.meta.get("eventSeq")).toBe("7");

        const third = await harness.reopened();
        expect((await third.transcripts.read(sessionId, { limit: 10 })).entries.map(text)).toEqual([
          "one",
          "two",
          "three",
        ]);
        expect(await third.audit.tail(1)).toEqual(sampleAuditRecords(3, 1));
      });
    });
  });
  return cases;
}
