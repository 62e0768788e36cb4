import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { backoffDelay } from "./backoff";

describe("backoffDelay", () => {
  it("doubles from the initial delay up to the cap without jitter", () => {
    const options = { initialDelayMs: 100, maxDelayMs: 1000, jitter: false };
    expect([0, 1, 2, 3, 4, 5, 60].map((attempt) => backoffDelay(attempt, options))).toEqual([
      100, 200, 400, 800, 1000, 1000, 1000,
    ]);
  });

  it("spreads delays over the whole range below the exponential delay with full jitter", () => {
    const options = { initialDelayMs: 100, maxDelayMs: 10_000, jitter: true };
    expect(backoffDelay(3, options, () => 0)).toBe(0);
    expect(backoffDelay(3, options, () => 0.5)).toBe(400);
    expect(backoffDelay(3, options, () => 0.999_999)).toBe(799);
  });

  it("always stays within [0, min(max, initial * 2^attempt)]", () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 10_000 }),
        fc.nat({ max: 3_600_000 }),
        fc.nat({ max: 10_000 }),
        fc.boolean(),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (initialDelayMs, extra, attempt, jitter, random) => {
          const maxDelayMs = initialDelayMs + extra;
          const delay = backoffDelay(attempt, { initialDelayMs, maxDelayMs, jitter }, () => random);
          const cap = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(attempt, 30));
          return Number.isFinite(delay) && delay >= 0 && delay <= cap;
        },
      ),
    );
  });
});
