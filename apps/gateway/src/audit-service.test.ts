import { createMemoryStore } from "@switchboard/core";
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
