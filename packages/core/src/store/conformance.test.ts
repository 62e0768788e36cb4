import { describe, expect, it } from "vitest";
import { type ConformanceCase, type StoreOpener, storeConformanceCases } from "./conformance";
import type { Store } from "./interfaces";
import { createMemoryBackend, createMemoryStore } from "./memory-store";

/** A memory store with some methods replaced, to prove the suite notices a broken contract. */
function mutant(change: (store: Store) => Store): StoreOpener {
  return async () => ({ store: change(createMemoryStore()), cleanup: async () => undefined });
}

function findCase(open: StoreOpener, name: string): ConformanceCase {
  const found = storeConformanceCases(open).find((entry) => entry.name === name);
  if (!found) throw new Error(`no conformance case named ${name}`);
  return found;
}

const noSkip = { skip: (note: string) => expect.fail(`unexpected skip: ${note}`) };

describe("store conformance suite", () => {
  it("has cases for every store area", () => {
    const cases = storeConformanceCases(mutant((store) => store));
    const groups = new Set(cases.map((entry) => entry.group));
    expect([...groups]).toEqual([
      "sessions index",
      "transcripts",
      "run registry",
      "archiving an idle session",
      "audit log",
      "taint rise",
      "meta",
      "health",
      "two instances on one backend",
      "durability across close and reopen",
    ]);
    expect(cases.length).toBeGreaterThan(25);
  });

  it("notices a list sorted the wrong way", async () => {
    const open = mutant((store) => {
      const list = store.sessions.list.bind(store.sessions);
      return {
        ...store,
        sessions: {
          ...store.sessions,
          list: async (query, options) => {
            const result = await list({ ...query, limit: 1000 }, options);
            return { ...result, entries: result.entries.reverse().slice(0, query.limit) };
          },
        },
      };
    });
    await expect(
      findCase(open, "lists newest first (ties by key), up to the limit, and follows updates").run(noSkip),
    ).rejects.toThrow();
  });

  it("notices an archive that ignores a running run, and a new run let onto an archived row", async () => {
    const archivesAnyway = mutant((store) => ({
      ...store,
      archiveIdleSession: async (key, options) => {
        const row = await store.sessions.get(key);
        if (!row || row.archivedAt !== undefined || row.sessionId !== options.sessionId) return undefined;
        const archived = { ...row, archivedAt: options.at, updatedAt: Math.max(options.at, row.updatedAt) };
        await store.sessions.put(archived);
        return archived;
      },
    }));
    await expect(
      findCase(archivesAnyway, "keeps a row with a run queued or running live until that run has ended").run(
        noSkip,
      ),
    ).rejects.toThrow();
    const insertsAnyway = mutant((store) => ({
      ...store,
      runs: { ...store.runs, put: (run) => store.runs.put(run) },
    }));
    await expect(
      findCase(insertsAnyway, "refuses a new run on an archived row, and nothing else").run(noSkip),
    ).rejects.toThrow();
  });

  it("notices a taint rise that leaves its transcript entry behind when refused", async () => {
    const open = mutant((store) => ({
      ...store,
      commitTaintRise: async (rise) => {
        // Writes a part before the checks that refuse the whole.
        await store.transcripts.append(rise.row.sessionId, [rise.entry]);
        return store.commitTaintRise(rise);
      },
    }));
    await expect(
      findCase(open, "refuses a rise whose audit record does not follow the log, leaving nothing behind").run(
        noSkip,
      ),
    ).rejects.toThrow();
  });

  it("notices hidden rows that are not counted", async () => {
    const open = mutant((store) => {
      const list = store.sessions.list.bind(store.sessions);
      return {
        ...store,
        sessions: {
          ...store.sessions,
          list: async (query, options = {}) => {
            const result = await list(query, options);
            return { ...result, hidden: 0 };
          },
        },
      };
    });
    await expect(
      findCase(open, "counts rows withheld by visibility among the rows the page went through").run(noSkip),
    ).rejects.toThrow();
  });

  it("notices a batch written partly before a bad entry", async () => {
    const open = mutant((store) => {
      const append = store.transcripts.append.bind(store.transcripts);
      return {
        ...store,
        transcripts: {
          ...store.transcripts,
          append: async (sessionId, entries) => {
            const out = [];
            for (const entry of entries) out.push(...(await append(sessionId, [entry])));
            return out;
          },
        },
      };
    });
    await expect(
      findCase(open, "rejects a batch with one bad entry and writes none of it").run(noSkip),
    ).rejects.toThrow();
  });

  it("notices a read that ignores maxBytes", async () => {
    const open = mutant((store) => {
      const read = store.transcripts.read.bind(store.transcripts);
      return {
        ...store,
        transcripts: {
          ...store.transcripts,
          read: async (sessionId, { maxBytes: _ignored, ...options }) => read(sessionId, options),
        },
      };
    });
    await expect(
      findCase(open, "caps output bytes by dropping whole entries from the old end").run(noSkip),
    ).rejects.toThrow();
  });

  it("notices a put that ignores expectedVersion", async () => {
    const open = mutant((store) => {
      const put = store.sessions.put.bind(store.sessions);
      return { ...store, sessions: { ...store.sessions, put: async (entry) => put(entry) } };
    });
    await expect(
      findCase(
        open,
        "writes with compare-and-set: a stale version is refused with CONFLICT naming the key and both versions",
      ).run(noSkip),
    ).rejects.toThrow();
  });

  it("notices two runs sharing an idempotency key", async () => {
    const open = mutant((store) => {
      const put = store.runs.put.bind(store.runs);
      return {
        ...store,
        runs: {
          ...store.runs,
          // Drops the key while writing, so the store's uniqueness check never sees it.
          put: async (run, options) => {
            const { idempotencyKey: _dropped, ...rest } = run;
            return put(rest, options);
          },
          getByIdempotencyKey: async () => undefined,
        },
      };
    });
    await expect(
      findCase(open, "keeps idempotency keys unique: a run cannot take a key another run holds").run(noSkip),
    ).rejects.toThrow();
  });

  it("notices a list that ignores visibility given as data", async () => {
    const open = mutant((store) => {
      const list = store.sessions.list.bind(store.sessions);
      return { ...store, sessions: { ...store.sessions, list: async (query) => list(query) } };
    });
    await expect(
      findCase(
        open,
        "applies visibility given as data: taint, agents, sandbox, the caller's own row and a residual",
      ).run(noSkip),
    ).rejects.toThrow();
  });

  it("notices a list that ignores the mainKey", async () => {
    const open = mutant((store) => {
      const list = store.sessions.list.bind(store.sessions);
      return {
        ...store,
        sessions: {
          ...store.sessions,
          list: async ({ mainKey: _ignored, ...query }, options) => list(query, options),
        },
      };
    });
    await expect(
      findCase(open, "classifies kinds with core's key rules for the query's mainKey").run(noSkip),
    ).rejects.toThrow();
  });

  it("notices a second instance that does not share the backend", async () => {
    const open: StoreOpener = async () => ({
      store: createMemoryStore(),
      openSecond: async () => createMemoryStore(),
      cleanup: async () => undefined,
    });
    await expect(
      findCase(open, "lets only one instance create the run of an idempotency key").run(noSkip),
    ).rejects.toThrow();
    await expect(
      findCase(open, "sees the other instance's writes and refuses its stale compare-and-set").run(noSkip),
    ).rejects.toThrow();
  });

  it("skips the two-instance cases with the harness's reason when it has no second instance", async () => {
    const open: StoreOpener = async () => ({
      store: createMemoryStore(),
      singleInstance: "one process by design",
      cleanup: async () => undefined,
    });
    const notes: string[] = [];
    await findCase(open, "lets only one instance create the run of an idempotency key").run({
      skip: (note) => notes.push(note),
    });
    expect(notes).toEqual(["one process by design"]);
  });

  it("notices a store that forgets data on reopen", async () => {
    const open: StoreOpener = async () => ({
      store: createMemoryStore(),
      reopen: async () => createMemoryStore(),
      cleanup: async () => undefined,
    });
    await expect(findCase(open, "keeps everything after close + reopen").run(noSkip)).rejects.toThrow();
  });

  it("skips the reopen case when the harness cannot reopen", async () => {
    const open = mutant((store) => store);
    const notes: string[] = [];
    await findCase(open, "keeps everything after close + reopen").run({ skip: (note) => notes.push(note) });
    expect(notes).toEqual(["this store has no reopen"]);
  });

  it("passes every case against the reference memory store", async () => {
    const shared: StoreOpener = async () => {
      const backend = createMemoryBackend();
      return {
        store: createMemoryStore({ backend }),
        openSecond: async () => createMemoryStore({ backend }),
        cleanup: async () => undefined,
      };
    };
    for (const entry of storeConformanceCases(shared)) {
      if (entry.group.startsWith("durability")) continue;
      await entry.run(noSkip);
    }
  });
});
