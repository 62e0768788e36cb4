import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SwitchboardError } from "../errors";
import {
  canFlowTo,
  compareLevels,
  LEVELS,
  type Level,
  levelRank,
  maxLevel,
  minLevel,
  parseLevel,
} from "./level";
import { escalateTaint } from "./taint";

const level = fc.constantFrom(...LEVELS);

describe("levels", () => {
  it("orders PUBLIC < INTERNAL < CONFIDENTIAL < RESTRICTED", () => {
    expect(LEVELS.map(levelRank)).toEqual([0, 1, 2, 3]);
    expect(compareLevels("CONFIDENTIAL", "INTERNAL")).toBeGreaterThan(0);
    expect(maxLevel("INTERNAL", "RESTRICTED", "PUBLIC")).toBe("RESTRICTED");
    expect(minLevel("INTERNAL", "RESTRICTED", "CONFIDENTIAL")).toBe("INTERNAL");
    expect(maxLevel()).toBe("PUBLIC");
    expect(minLevel()).toBe("RESTRICTED");
    expect(canFlowTo("CONFIDENTIAL", "PUBLIC")).toBe(false);
    expect(canFlowTo("PUBLIC", "CONFIDENTIAL")).toBe(true);
  });

  it("parses exactly, naming the field and the allowed values", () => {
    expect(parseLevel("INTERNAL", "clearance")).toBe("INTERNAL");
    for (const bad of ["internal", " INTERNAL", "SECRET", 1, null, undefined]) {
      try {
        parseLevel(bad, "clearance");
        throw new Error("accepted");
      } catch (error) {
        expect(error).toBeInstanceOf(SwitchboardError);
        expect((error as Error).message).toMatch(
          /^clearance: must be one of PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED \(got /,
        );
      }
    }
  });

  it("refuses to rank a non-level instead of treating it as lowest", () => {
    expect(() => levelRank("SECRET" as Level)).toThrow(/must be one of/);
    expect(() => canFlowTo("SECRET" as Level, "PUBLIC")).toThrow();
  });
});

describe("lattice properties", () => {
  it("compareLevels is a total order", () => {
    fc.assert(
      fc.property(level, level, level, (a, b, c) => {
        expect(Math.sign(compareLevels(a, b)) + Math.sign(compareLevels(b, a))).toBe(0);
        expect(compareLevels(a, b) === 0).toBe(a === b);
        if (compareLevels(a, b) <= 0 && compareLevels(b, c) <= 0)
          expect(compareLevels(a, c)).toBeLessThanOrEqual(0);
      }),
    );
  });

  it("max and min are the join and meet", () => {
    fc.assert(
      fc.property(fc.array(level, { minLength: 1, maxLength: 6 }), (levels) => {
        const high = maxLevel(...levels);
        const low = minLevel(...levels);
        expect(levels).toContain(high);
        expect(levels).toContain(low);
        for (const l of levels) {
          expect(canFlowTo(l, high)).toBe(true);
          expect(canFlowTo(low, l)).toBe(true);
        }
        expect(maxLevel(...[...levels].reverse())).toBe(high);
      }),
    );
  });

  it("canFlowTo is reflexive and transitive", () => {
    fc.assert(
      fc.property(level, level, level, (a, b, c) => {
        expect(canFlowTo(a, a)).toBe(true);
        if (canFlowTo(a, b) && canFlowTo(b, c)) expect(canFlowTo(a, c)).toBe(true);
      }),
    );
  });

  it("taint never decreases over any sequence of intakes, and events record exactly the rises", () => {
    fc.assert(
      fc.property(level, fc.array(level, { maxLength: 20 }), (start, intakes) => {
        let taint = start;
        intakes.forEach((incoming, at) => {
          const { taint: next, event } = escalateTaint(taint, incoming, { at, reason: "read", source: "x" });
          expect(canFlowTo(taint, next)).toBe(true);
          expect(canFlowTo(incoming, next)).toBe(true);
          if (event) {
            expect(event).toEqual({ at, from: taint, to: next, reason: "read", source: "x" });
            expect(compareLevels(next, taint)).toBeGreaterThan(0);
          } else {
            expect(next).toBe(taint);
          }
          taint = next;
        });
        expect(taint).toBe(maxLevel(start, ...intakes));
      }),
    );
  });
});
