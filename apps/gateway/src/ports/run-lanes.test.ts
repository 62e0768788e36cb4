import { describe, expect, it } from "vitest";
import { InProcessRunLanes } from "./run-lanes";

describe("InProcessRunLanes", () => {
  it("hands a lane to one run at a time, first in first out, and a handed-back run goes first", () => {
    const lanes = new InProcessRunLanes();
    lanes.enqueue("s|main", "r1");
    lanes.enqueue("s|main", "r2");
    lanes.enqueue("t|main", "r3");
    expect(lanes.next("s|main")).toBe("r1");
    lanes.claim("s|main", "r1");
    expect(lanes.holder("s|main")).toBe("r1");
    expect(lanes.holderUnder("s|")).toBe("r1");
    expect(lanes.queuedUnder("s|")).toBe(1);
    expect(lanes.release("s|main", "r1")).toBe(false);
    expect(lanes.holder("s|main")).toBeUndefined();
    lanes.enqueue("s|main", "r1", true);
    expect(lanes.next("s|main")).toBe("r1");
    expect(lanes.laneKeys().sort()).toEqual(["s|main", "t|main"]);
  });

  it("reports a queue emptied by a run leaving it, and forgets empty lanes", () => {
    const lanes = new InProcessRunLanes();
    lanes.enqueue("s|main", "r1");
    lanes.enqueue("s|main", "r2");
    expect(lanes.release("s|main", "r2")).toBe(false);
    expect(lanes.release("s|main", "r1")).toBe(true);
    expect(lanes.next("s|main")).toBeUndefined();
    expect(lanes.laneKeys()).toEqual([]);
    lanes.enqueue("s|main", "gone");
    lanes.skip("s|main");
    expect(lanes.next("s|main")).toBeUndefined();
  });
});
