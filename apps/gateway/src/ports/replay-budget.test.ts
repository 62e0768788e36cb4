import { describe, expect, it } from "vitest";
import { InProcessReplayBudget } from "./replay-budget";

const MiB = 1_048_576;

describe("InProcessReplayBudget", () => {
  it("refuses past a quarter of the limit per token and past the limit in all, and forgets what is given back", () => {
    const budget = new InProcessReplayBudget(8 * MiB);
    const a = budget.take("a", 2 * MiB)!;
    expect(budget.take("a", 1 * MiB)).toBeUndefined();
    const b = budget.take("b", 2 * MiB)!;
    const c = budget.take("c", 2 * MiB)!;
    const d = budget.take("d", 2 * MiB)!;
    expect(budget.queued).toBe(8 * MiB);
    // Another token's turn waits for bytes to be written, not just for its own share.
    expect(budget.take("e", 1)).toBeUndefined();
    a();
    a();
    expect(budget.queued).toBe(6 * MiB);
    expect(budget.take("a", 1 * MiB)).toBeDefined();
    for (const release of [b, c, d]) release();
    expect(budget.queued).toBe(1 * MiB);
    expect(budget.queuedBy("a")).toBe(1 * MiB);
    expect(budget.queuedBy("b")).toBe(0);
  });

  it("admits one replay larger than the budget when nothing of its token or of the gateway is queued", () => {
    const budget = new InProcessReplayBudget(4 * MiB);
    const big = budget.take("a", 6 * MiB)!;
    expect(big).toBeDefined();
    expect(budget.take("b", 1)).toBeUndefined();
    big();
    expect(budget.queued).toBe(0);
    expect(budget.queuedBy("a")).toBe(0);
  });
});
