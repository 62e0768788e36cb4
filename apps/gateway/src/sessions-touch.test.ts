import { createMemoryStore, parseConfig, type SessionEntry, type Store } from "@switchboard/core";
import type { Logger } from "pino";
import { describe, expect, it, vi } from "vitest";
import { AuditService } from "./audit-service";
import { EventBus } from "./event-bus";
import { InProcessRecentMessages } from "./ports/recent-messages";
import { InProcessSessionLocks } from "./ports/session-locks";
import { SessionsService } from "./sessions-service";

const KEY = "agent:main:cron:touch";

/**
 * A store whose session-row writes land only when released, as on a slow or networked store: a
 * write that overtook another would show up as a lost update.
 */
function gatedRows(store: Store) {
  const held: Array<() => Promise<void>> = [];
  let failNext = false;
  const rows = store.sessions;
  const gate =
    <A extends unknown[], R>(write: (...args: A) => Promise<R>) =>
    (...args: A): Promise<R> => {
      if (failNext) {
        failNext = false;
        return Promise.reject(new Error("disk full"));
      }
      const copy = structuredClone(args);
      return new Promise<R>((resolve, reject) => {
        held.push(() => write(...copy).then(resolve, reject));
      });
    };
  const gated: Store = {
    ...store,
    sessions: Object.assign(Object.create(rows) as typeof rows, {
      put: gate(rows.put.bind(rows)),
      touch: gate(rows.touch.bind(rows)),
    }),
  };
  return {
    store: gated,
    held: () => held.length,
    /** Lands the oldest held row write. */
    async releaseOne() {
      await held.shift()?.();
    },
    failNextPut() {
      failNext = true;
    },
  };
}

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
}

async function service(store: Store) {
  const bus = await EventBus.open(store.meta);
  const audit = await AuditService.open(store.audit, store.meta, new Uint8Array(32).fill(7), bus);
  const warn = vi.fn();
  const log = { warn, error: vi.fn(), info: vi.fn(), debug: vi.fn() } as unknown as Logger;
  const sessions = new SessionsService(
    store,
    parseConfig({}),
    bus,
    audit,
    log,
    new InProcessSessionLocks(),
    new InProcessRecentMessages(),
  );
  return { sessions, warn };
}

/** A session created through a store whose row writes land only when released. */
async function gatedSession() {
  const memory = createMemoryStore();
  const gate = gatedRows(memory);
  const { sessions } = await service(gate.store);
  const ensured = sessions.ensure(KEY);
  await settle();
  await gate.releaseOne();
  const { entry } = await ensured;
  return { memory, gate, sessions, entry };
}

const message = (text: string) => ({
  type: "message" as const,
  label: "PUBLIC" as const,
  message: { role: "user" as const, content: [{ type: "text" as const, text }] },
});

describe("sessions: an append's row touch", () => {
  it("answers once the entries are durable, without waiting for the row's touch", async () => {
    const { memory, gate, sessions, entry } = await gatedSession();

    let answered = 0;
    const first = sessions.append(KEY, [message("one")]).then(() => answered++);
    const second = sessions.append(KEY, [message("two")]).then(() => answered++);
    await Promise.all([first, second]);
    // Both appends answered while no touch has landed yet. Touches are relative (updatedAt rises,
    // tokens add), so both are issued at once: no order among them is needed.
    expect(answered).toBe(2);
    expect(gate.held()).toBe(2);
    const history = await memory.transcripts.read(entry.sessionId, { limit: 10 });
    expect(history.entries.map((item) => item.message?.content[0])).toMatchObject([
      { text: "one" },
      { text: "two" },
    ]);
    await gate.releaseOne();
    await settle();
    await gate.releaseOne();
    await settle();
    expect((await memory.sessions.get(KEY))!.updatedAt).toBeGreaterThanOrEqual(entry.updatedAt);
  });

  it("keeps later row writes after the touch, so a late touch never undoes them", async () => {
    const { memory, gate, sessions } = await gatedSession();

    await sessions.append(KEY, [message("hello")], { addTokens: 5 });
    await sessions.append(KEY, [message("again")], { addTokens: 7 });
    let updated = false;
    const update = sessions
      .update(KEY, (row) => ({ ...row, label: "renamed" }), "test")
      .then(() => {
        updated = true;
      });
    await settle();
    // The update waits for both touches: it has not even issued its write.
    expect(updated).toBe(false);
    expect(gate.held()).toBe(2);
    await gate.releaseOne();
    await settle();
    await gate.releaseOne();
    await settle();
    await gate.releaseOne();
    await update;
    const row = (await memory.sessions.get(KEY))!;
    // Neither the label nor a token count was lost to a write landing out of order.
    expect(row.label).toBe("renamed");
    expect(row.totalTokens).toBe(12);
  });

  it("a failed touch is logged, the append still succeeds and the row stays writable", async () => {
    const memory = createMemoryStore();
    const { sessions, warn } = await service(memory);
    await sessions.ensure(KEY);
    const gate = gatedRows(memory);
    const { sessions: failing, warn: failingWarn } = await service(gate.store);
    gate.failNextPut();
    const written = await failing.append(KEY, [message("kept")]);
    expect(written).toHaveLength(1);
    await settle();
    expect(failingWarn).toHaveBeenCalledWith(
      expect.objectContaining({ key: KEY }),
      "could not record the session's last activity",
    );
    const entry = (await memory.sessions.get(KEY))!;
    expect((await memory.transcripts.read(entry.sessionId, { limit: 10 })).entries).toHaveLength(1);
    const update = failing.update(KEY, (row) => ({ ...row, label: "after" }), "test");
    await settle();
    await gate.releaseOne();
    await update;
    expect((await memory.sessions.get(KEY))!.label).toBe("after");
    expect(warn).not.toHaveBeenCalled();
  });
});

describe("sessions: an append built from the row (a run's end)", () => {
  it("builds the entries from the row as it is under the key's lock", async () => {
    const { gate, sessions } = await gatedSession();
    // A row write holding the key's lock (its store write not landed yet) when the run ends.
    const update = sessions.update(KEY, (row) => ({ ...row, label: "renamed" }), "test");
    await settle();
    expect(gate.held()).toBe(1);
    const appended = sessions.appendFor(KEY, (entry) => [message(`for ${entry.label ?? "no label"}`)]);
    await settle();
    await gate.releaseOne();
    await update;
    const written = await appended;
    expect(written.map((entry) => entry.message?.content[0])).toEqual([
      { type: "text", text: "for renamed" },
    ]);
  });

  it("writes nothing to a session reset since the run started, or gone", async () => {
    const memory = createMemoryStore();
    const { sessions } = await service(memory);
    const { entry: started } = await sessions.ensure(KEY);
    const reply = (entry: SessionEntry) =>
      entry.sessionId === started.sessionId ? [{ ...message("reply"), label: entry.taint }] : undefined;
    expect(await sessions.appendFor(KEY, reply)).toHaveLength(1);
    await sessions.reset(KEY);
    expect(await sessions.appendFor(KEY, reply)).toEqual([]);
    const now = (await memory.sessions.get(KEY))!;
    expect((await memory.transcripts.read(now.sessionId, { limit: 10 })).entries).toEqual([]);
    await sessions.delete(KEY, "remove");
    expect(await sessions.appendFor(KEY, reply)).toEqual([]);
  });

  it("reads the row once for an end where a read and the append's own were two", async () => {
    const memory = createMemoryStore();
    const { sessions } = await service(memory);
    const { entry: started } = await sessions.ensure(KEY);
    const reads = vi.spyOn(memory.sessions, "get");
    await sessions.appendFor(KEY, (entry) => [{ ...message("reply"), label: entry.taint }]);
    expect(reads).toHaveBeenCalledTimes(1);
    expect(reads).toHaveBeenCalledWith(KEY);
    expect((await memory.transcripts.read(started.sessionId, { limit: 10 })).entries).toHaveLength(1);
  });
});
