import { describe, expect, it } from "vitest";
import { validateAuditBatch } from "../store/store-rules";
import { createAuditChain, isChainBuiltRecord, verifyAuditRecords } from "./audit-chain";
import { computeAuditHash, generateAuditKey } from "./audit-hash";
import { type AuditEntry, type AuditRecord, GENESIS_HASH } from "./audit-schema";

const key = new Uint8Array(32).fill(7);

function entry(n: number): AuditEntry {
  return {
    kind: n % 2 === 0 ? "delivery" : "policy.blocked",
    at: 1_700_000_000_000 + n,
    actor: "agent:main:main",
    data: { n, target: `agent:research:subagent:${n}` },
  };
}

async function buildChain(count: number): Promise<AuditRecord[]> {
  const chain = createAuditChain({ key });
  const records: AuditRecord[] = [];
  for (let n = 0; n < count; n++) records.push(await chain.next(entry(n)));
  return records;
}

describe("AuditChain", () => {
  it("links each record to the previous one starting from the genesis hash", async () => {
    const records = await buildChain(3);
    expect(records.map((r) => r.index)).toEqual([0, 1, 2]);
    expect(records[0]!.prevHash).toBe(GENESIS_HASH);
    expect(records[1]!.prevHash).toBe(records[0]!.hash);
    expect(records[2]!.prevHash).toBe(records[1]!.hash);
    expect(records[0]!.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(records[0]!.hash).toBe(await computeAuditHash(key, GENESIS_HASH, entry(0)));
  });

  it("vouches only for its own records, which stay as built; a store still parses any other", async () => {
    const records = await buildChain(2);
    expect(isChainBuiltRecord(records[0])).toBe(true);
    expect(() => {
      (records[0] as Record<string, unknown>).kind = "other";
    }).toThrow(TypeError);
    expect(validateAuditBatch(records, undefined)).toEqual(records);
    // A look-alike (same fields, not built by a chain) is parsed, so a malformed one is refused.
    const lookalike = { ...records[1]!, index: 1, hash: "not a hash" };
    expect(isChainBuiltRecord(lookalike)).toBe(false);
    expect(() => validateAuditBatch([records[0]!, lookalike], undefined)).toThrow(/records\[1\]\.hash/);
  });

  it("gives a different hash under a different key", async () => {
    const other = await computeAuditHash(generateAuditKey(), GENESIS_HASH, entry(0));
    expect(other).not.toBe(await computeAuditHash(key, GENESIS_HASH, entry(0)));
  });

  it("keeps concurrent next() calls linked in call order", async () => {
    const chain = createAuditChain({ key });
    const records = await Promise.all(Array.from({ length: 20 }, (_, n) => chain.next(entry(n))));
    expect(records.map((r) => r.data.n)).toEqual(Array.from({ length: 20 }, (_, n) => n));
    expect(await verifyAuditRecords(key, records)).toEqual({ ok: true, entries: 20 });
    expect(chain.head).toEqual({ index: 19, hash: records[19]!.hash });
  });

  it("continues an existing chain from its last record", async () => {
    const first = await buildChain(2);
    const resumed = createAuditChain({ key, last: { index: 1, hash: first[1]!.hash } });
    const third = await resumed.next(entry(2));
    expect(third.index).toBe(2);
    expect(await verifyAuditRecords(key, [...first, third])).toEqual({ ok: true, entries: 3 });
  });

  it("rejects an invalid entry without breaking the chain", async () => {
    const chain = createAuditChain({ key });
    const a = chain.next(entry(0));
    const bad = chain.next({ kind: "", at: -1, data: {} });
    const notJson = chain.next({ kind: "x", at: 1, data: { n: Number.NaN } });
    const b = chain.next(entry(1));
    await expect(bad).rejects.toThrow(/audit entry\.kind: must be a non-empty string/);
    await expect(notJson).rejects.toThrow("$.data.n: number NaN is not finite");
    const records = [await a, await b];
    expect(records.map((r) => r.index)).toEqual([0, 1]);
    expect((await verifyAuditRecords(key, records)).ok).toBe(true);
  });

  it("does not advance when persisting a record fails", async () => {
    const stored: AuditRecord[] = [];
    let failNext = true;
    const chain = createAuditChain({
      key,
      persist: (record) => {
        if (failNext) {
          failNext = false;
          throw new Error("disk full");
        }
        stored.push(record);
      },
    });
    await expect(chain.next(entry(0))).rejects.toThrow("disk full");
    await chain.next(entry(1));
    await chain.next(entry(2));
    expect(stored.map((r) => r.index)).toEqual([0, 1]);
    expect((await verifyAuditRecords(key, stored)).ok).toBe(true);
  });

  it("refuses a short key", () => {
    expect(() => createAuditChain({ key: new Uint8Array(8) })).toThrow("at least 16 bytes");
  });
});

describe("verifyAuditRecords", () => {
  it("accepts an intact chain, from an async iterable too", async () => {
    const records = await buildChain(5);
    async function* stream() {
      yield* records;
    }
    expect(await verifyAuditRecords(key, stream())).toEqual({ ok: true, entries: 5 });
    expect(await verifyAuditRecords(key, [])).toEqual({ ok: true, entries: 0 });
  });

  it("names a changed entry", async () => {
    const records = await buildChain(5);
    records[2] = { ...records[2]!, data: { ...records[2]!.data, n: 99 } };
    const result = await verifyAuditRecords(key, records);
    expect(result).toMatchObject({ ok: false, entries: 2, firstBadIndex: 2 });
    expect(result.reason).toMatch(/hash does not match/);
  });

  it("names a field added to a stored record", async () => {
    const records = await buildChain(3);
    records[1] = { ...records[1]!, sessionKey: "agent:main:main" };
    expect(await verifyAuditRecords(key, records)).toMatchObject({ ok: false, firstBadIndex: 1 });
  });

  it("names the position of a removed entry", async () => {
    const records = await buildChain(5);
    records.splice(3, 1);
    expect(await verifyAuditRecords(key, records)).toMatchObject({ ok: false, entries: 3, firstBadIndex: 3 });
  });

  it("names a removed entry even when the later indexes were renumbered", async () => {
    const records = await buildChain(5);
    records.splice(1, 1);
    const renumbered = records.map((r, i) => ({ ...r, index: i }));
    const result = await verifyAuditRecords(key, renumbered);
    expect(result).toMatchObject({ ok: false, firstBadIndex: 1 });
    expect(result.reason).toMatch(/prevHash/);
  });

  it("names the first of two reordered entries", async () => {
    const records = await buildChain(5);
    [records[1], records[2]] = [records[2]!, records[1]!];
    expect(await verifyAuditRecords(key, records)).toMatchObject({ ok: false, entries: 1, firstBadIndex: 1 });
  });

  it("names an inserted entry forged without the key", async () => {
    const records = await buildChain(4);
    const forgedKey = new Uint8Array(32).fill(9);
    const forged: AuditRecord = {
      ...entry(42),
      index: 2,
      prevHash: records[1]!.hash,
      hash: await computeAuditHash(forgedKey, records[1]!.hash, entry(42)),
    };
    records.splice(2, 0, forged);
    const shifted = records.map((r, i) => ({ ...r, index: i }));
    const result = await verifyAuditRecords(key, shifted);
    expect(result).toMatchObject({ ok: false, entries: 2, firstBadIndex: 2 });
  });

  it("names a malformed record", async () => {
    const records: unknown[] = await buildChain(2);
    records.push({ kind: "delivery", at: 1, data: {}, index: 2, prevHash: "nope", hash: "nope" });
    const result = await verifyAuditRecords(key, records);
    expect(result).toMatchObject({ ok: false, firstBadIndex: 2 });
    expect(result.reason).toMatch(/malformed record: prevHash: must be 64 lower-case hex/);
  });

  it("detects a truncated tail only against a head recorded elsewhere", async () => {
    const records = await buildChain(5);
    const head = { index: 4, hash: records[4]!.hash };
    const truncated = records.slice(0, 3);
    expect((await verifyAuditRecords(key, truncated)).ok).toBe(true);
    expect(await verifyAuditRecords(key, truncated, { expectedHead: head })).toMatchObject({
      ok: false,
      firstBadIndex: 3,
    });
    expect(await verifyAuditRecords(key, records, { expectedHead: head })).toEqual({ ok: true, entries: 5 });
  });

  it("verifies a tail of a chain after a known record", async () => {
    const records = await buildChain(5);
    const after = { index: 1, hash: records[1]!.hash };
    expect(await verifyAuditRecords(key, records.slice(2), { after })).toEqual({ ok: true, entries: 3 });
  });
});

describe("injected HMAC", () => {
  it("produces the same chain as WebCrypto and verifies with either", async () => {
    const { createHmac } = await import("node:crypto");
    const key = new Uint8Array(32).fill(7);
    const hmac = (k: Uint8Array, message: string) => createHmac("sha256", k).update(message).digest("hex");
    const web = createAuditChain({ key });
    const node = createAuditChain({ key, hmac });
    const entry = { kind: "policy.blocked", at: 1, data: { why: "test" } };
    const a = await web.next(entry);
    const b = await node.next(entry);
    expect(b.hash).toBe(a.hash);
    expect(await verifyAuditRecords(key, [a], { hmac })).toMatchObject({ ok: true });
    expect(await verifyAuditRecords(key, [{ ...b, data: { why: "changed" } }], { hmac })).toMatchObject({
      ok: false,
    });
  });

  // The chain vouches for its records (a store does not parse them again), so it checks what it
  // cannot build itself: the HMAC's output and a resumed index.
  it("makes no record from an HMAC that does not return hex, and resumes only at a safe index", async () => {
    const chain = createAuditChain({ key, hmac: () => "ABC" });
    await expect(chain.next(entry(0))).rejects.toThrow(/64 lower-case hex/);
    expect(chain.head).toBeUndefined();
    expect(() => createAuditChain({ key, last: { index: 2 ** 60, hash: GENESIS_HASH } })).toThrow(
      /last\.index/,
    );
  });
});
