import { createMemoryBackend, createMemoryStore } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { AuditService } from "./audit-service";
import type { EventLog } from "./ports/event-log";

const quietBus = { publish: () => undefined } as unknown as EventLog;
const key = new Uint8Array(32).fill(3);

describe("AuditService anchoring", () => {
  it("anchors every acknowledged record, one anchor write per group of appends", async () => {
    const store = createMemoryStore();
    const sets: string[] = [];
    const meta = {
      get: (name: string) => store.meta.get(name),
      set: async (name: string, value: string) => {
        sets.push(value);
        await new Promise((resolve) => setTimeout(resolve, 5));
        await store.meta.set(name, value);
      },
    };
    const audit = await AuditService.open(store.audit, meta, key, quietBus);
    const records = await Promise.all(
      Array.from({ length: 40 }, (_, n) => audit.append({ kind: "note", data: { n } })),
    );
    const newest = records.at(-1)!;
    expect(JSON.parse((await store.meta.get("audit.head"))!)).toEqual({
      index: newest.index,
      hash: newest.hash,
    });
    // Appends arriving while an anchor is written share the next one.
    expect(sets.length).toBeGreaterThan(0);
    expect(sets.length).toBeLessThan(10);
    // Already anchored: nothing to write.
    await audit.anchor();
    expect(sets.length).toBeLessThan(10);
    expect(await audit.verify()).toEqual({ ok: true, entries: 40 });
  });

  it("resolves an append only once its record is anchored", async () => {
    const store = createMemoryStore();
    let release: () => void = () => undefined;
    const meta = {
      get: (name: string) => store.meta.get(name),
      set: async (name: string, value: string) => {
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        await store.meta.set(name, value);
      },
    };
    const audit = await AuditService.open(store.audit, meta, key, quietBus);
    let done = false;
    const appended = audit.append({ kind: "note", data: {} }).then(() => {
      done = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await store.audit.count()).toBe(1);
    expect(done).toBe(false);
    release();
    await appended;
    expect(done).toBe(true);
  });
});

describe("AuditService verify", () => {
  it("walks the log a page at a time in the order stored, never reading it whole", async () => {
    const backend = createMemoryBackend();
    const store = createMemoryStore({ backend });
    const audit = await AuditService.open(store.audit, store.meta, key, quietBus);
    for (let n = 0; n < 1_200; n++) await audit.append({ kind: "note", data: { n } });
    const pages: number[] = [];
    const paged = {
      ...store.audit,
      // A log of millions of records does not fit in memory: a read of all of it is refused here.
      read: (options?: { after?: number; limit?: number }) =>
        options?.limit === undefined
          ? Promise.reject(new Error("read the whole log"))
          : store.audit.read(options),
      async *scan(pageSize: number) {
        for await (const page of store.audit.scan(pageSize)) {
          pages.push(page.length);
          yield page;
        }
      },
    };
    const verifier = await AuditService.open(paged, store.meta, key, quietBus);
    expect(await verifier.verify()).toEqual({ ok: true, entries: 1_200 });
    expect(pages).toEqual([500, 500, 200]);

    // A record stored again out of order (an edit of the log) is reported where it stands.
    const copied = structuredClone((await store.audit.read({ after: 9, limit: 1 }))[0]!);
    backend.auditRecords.splice(700, 0, copied);
    expect(await verifier.verify()).toMatchObject({ ok: false, firstBadIndex: 700 });
  });
});
