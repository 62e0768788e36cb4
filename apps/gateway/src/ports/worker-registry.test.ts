import { describe, expect, it } from "vitest";
import { InProcessWorkerRegistry } from "./worker-registry";

const worker = (name: string, isOpen = true) => ({ name, isOpen });

describe("InProcessWorkerRegistry", () => {
  it("picks the least loaded open worker of an agent with a free slot", () => {
    const workers = new InProcessWorkerRegistry<{ name: string; isOpen: boolean }>();
    const a = worker("a");
    const b = worker("b");
    const closed = worker("closed", false);
    workers.add(a, ["alpha"], 1);
    workers.add(b, ["alpha", "beta"]);
    workers.add(closed, ["beta"]);
    expect(workers.count("alpha")).toBe(2);
    expect([...(workers.agentsOf(b) ?? [])]).toEqual(["alpha", "beta"]);
    expect(workers.pick("beta")).toBe(b);
    workers.take(b, "r1");
    expect(workers.pick("alpha")).toBe(a);
    workers.take(a, "r2");
    expect(workers.pick("alpha")).toBe(b);
    workers.release(a, "r2");
    expect(workers.pick("alpha")).toBe(a);
    workers.take(a, "r3");
    expect(workers.remove(a)).toEqual(["r3"]);
    expect(workers.count("alpha")).toBe(1);
    expect(workers.agentsOf(a)).toBeUndefined();
    expect(workers.pick("gamma")).toBeUndefined();
  });

  it("keeps starved lanes per agent, oldest first, and forgets them", () => {
    const workers = new InProcessWorkerRegistry<{ isOpen: boolean }>();
    workers.starve("alpha", "s|main");
    workers.starve("alpha", "t|main");
    workers.starve("alpha", "s|main");
    expect([...workers.starvedLanes("alpha")]).toEqual(["s|main", "t|main"]);
    workers.unstarve("alpha", "s|main");
    expect([...workers.starvedLanes("alpha")]).toEqual(["t|main"]);
    workers.unstarve("alpha", "t|main");
    workers.unstarve("beta", "x|main");
    expect([...workers.starvedLanes("alpha")]).toEqual([]);
  });
});
