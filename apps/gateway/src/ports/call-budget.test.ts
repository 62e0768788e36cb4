import { describe, expect, it } from "vitest";
import { MemoryCallBudget } from "./call-budget";

describe("MemoryCallBudget", () => {
  it("counts calls in the window and forgets them after it", () => {
    let now = 0;
    const budget = new MemoryCallBudget(60_000, () => now);
    budget.record("a", "send");
    const giveBack = budget.record("a", "send");
    expect(budget.used("a", "send")).toBe(2);
    expect(budget.used("a", "spawn")).toBe(0);
    giveBack();
    expect(budget.used("a", "send")).toBe(1);
    now = 60_001;
    expect(budget.used("a", "send")).toBe(0);
  });

  // Before session 22 a window emptied by time stayed until its own key was asked for again: one
  // entry for every session that ever sent or spawned.
  it("drops the empty windows of sessions that never call again", () => {
    let now = 0;
    const budget = new MemoryCallBudget(60_000, () => now);
    for (let n = 0; n < 10_000; n++) budget.record(`agent:main:subagent:${n}`, "spawn");
    expect(budget.size).toBe(10_000);
    now = 10 * 60_000;
    budget.record("agent:main:main", "send");
    expect(budget.size).toBe(1);
  });
});
