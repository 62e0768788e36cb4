import { describe, expect, it } from "vitest";
import { MemoryCallBudget } from "./call-budget";
import { LocalCallAdmission } from "./local-call-admission";
import { InProcessWaitGraph } from "./wait-graph";

function setup(activeChildren = 0) {
  const budget = new MemoryCallBudget();
  const waits = new InProcessWaitGraph();
  return { budget, waits, admission: new LocalCallAdmission(budget, waits, () => activeChildren) };
}

describe("LocalCallAdmission", () => {
  it("counts calls admitted in parallel before any of them is decided", async () => {
    const { admission } = setup();
    const sends = await Promise.all([1, 2, 3].map(() => admission.send("a", "b", false)));
    expect(sends.map((call) => call.budgetUsed)).toEqual([0, 1, 2]);
    const spawns = await Promise.all([1, 2, 3].map((n) => admission.spawn("a", `child-${n}`)));
    expect(spawns.map((call) => call.activeChildren)).toEqual([0, 1, 2]);
  });

  it("gives a refused call's budget slot, wait and child slot back, once", async () => {
    const { admission, budget, waits } = setup(2);
    const send = await admission.send("a", "b", true);
    expect(waits.cycleFor("b", "a")).toEqual(["b", "a", "b"]);
    send.refused();
    send.refused();
    send.endWait();
    expect(budget.used("a", "send")).toBe(0);
    expect(waits.cycleFor("b", "a")).toBeUndefined();

    const spawn = await admission.spawn("a", "child");
    expect(spawn.activeChildren).toBe(2);
    spawn.refused();
    expect(budget.used("a", "spawn")).toBe(0);
    expect((await admission.spawn("a", "child-2")).activeChildren).toBe(2);
  });

  it("counts an admitted child until its run is stored", async () => {
    const { admission, budget } = setup();
    const first = await admission.spawn("a", "c1");
    expect((await admission.spawn("a", "c2")).activeChildren).toBe(1);
    first.childStored();
    first.childStored();
    expect((await admission.spawn("a", "c3")).activeChildren).toBe(1);
    expect(budget.used("a", "spawn")).toBe(3);
  });

  it("does not record a wait that would close a cycle", async () => {
    const { admission, waits } = setup();
    const ab = await admission.send("a", "b", true);
    const ba = await admission.send("b", "a", true);
    expect(ba.cycle).toEqual(["b", "a", "b"]);
    ba.endWait();
    ab.endWait();
    expect(waits.cycleFor("b", "a")).toBeUndefined();
  });
});
