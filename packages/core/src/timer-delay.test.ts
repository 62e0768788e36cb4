import { describe, expect, it } from "vitest";
import { MAX_TIMER_DELAY_MS, monotonicDeadline, timerDelay } from "./timer-delay";

describe("timerDelay", () => {
  it("keeps a delay within setTimeout's range (a longer one would fire after 1 ms)", () => {
    expect(timerDelay(1_000 + 5_000, 1_000)).toBe(5_000);
    expect(timerDelay(500, 1_000)).toBe(0);
    expect(timerDelay(3_000_000_000 * 1_000, 0)).toBe(MAX_TIMER_DELAY_MS);
  });
});

describe("monotonicDeadline", () => {
  it("puts a wall-clock deadline on the monotonic clock as both read now", () => {
    expect(monotonicDeadline(10_000, 7_000, 500)).toBe(3_500);
    expect(monotonicDeadline(1_000, 7_000, 500)).toBe(-5_500);
  });
});
