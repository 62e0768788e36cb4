import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalJson } from "./canonical-json";

function shuffleKeys(value: unknown, seed: number): unknown {
  if (Array.isArray(value)) return value.map((item, i) => shuffleKeys(item, seed + i));
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>);
    // Deterministic permutation: rotate by the seed and reverse every other time.
    const rotated = entries.map((_, i) => entries[(i + seed) % entries.length]!);
    if (seed % 2 === 1) rotated.reverse();
    return Object.fromEntries(rotated.map(([k, v]) => [k, shuffleKeys(v, seed + 1)]));
  }
  return value;
}

describe("canonicalJson", () => {
  it("sorts keys at every depth and writes no whitespace", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: true, y: null }], c: "x" } })).toBe(
      '{"a":{"c":"x","d":[3,{"y":null,"z":true}]},"b":1}',
    );
  });

  it("gives the same string whatever the key insertion order", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.nat(50), (value, seed) => {
        expect(canonicalJson(shuffleKeys(value, seed))).toBe(canonicalJson(value));
      }),
    );
  });

  it("round-trips through JSON.parse to the same data", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = canonicalJson(value);
        expect(canonicalJson(JSON.parse(text))).toBe(text);
      }),
    );
  });

  it("omits undefined object properties like JSON.stringify and honours toJSON", () => {
    expect(canonicalJson({ a: undefined, b: new Date(0) })).toBe('{"b":"1970-01-01T00:00:00.000Z"}');
    expect(canonicalJson(-0)).toBe("0");
  });

  it("rejects values JSON would silently change, naming where they are", () => {
    expect(() => canonicalJson({ n: Number.NaN })).toThrow("$.n: number NaN is not finite");
    expect(() => canonicalJson({ list: [1, Infinity] })).toThrow("$.list[1]: number Infinity is not finite");
    expect(() => canonicalJson([1, undefined])).toThrow("$[1]: undefined is not allowed in an array");
    expect(() => canonicalJson({ big: 1n })).toThrow("$.big: bigint");
    expect(() => canonicalJson({ m: new Map() })).toThrow("$.m: a Map is not a plain object");
    expect(() => canonicalJson(undefined)).toThrow("cannot encode undefined");
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => canonicalJson(cyclic)).toThrow("$.self: circular reference");
  });

  it("allows the same object twice when it is not a cycle", () => {
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: shared })).toBe('{"a":{"x":1},"b":{"x":1}}');
  });
});
