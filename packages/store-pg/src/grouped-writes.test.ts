import { describe, expect, it } from "vitest";
import { GroupedWrites } from "./grouped-writes";

describe("GroupedWrites", () => {
  it("writes what arrives while a statement runs as one group, and retries a failed group one by one", async () => {
    const groups: string[][] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const writes = new GroupedWrites<string, string>(
      async (items) => {
        groups.push(items);
        if (items[0] === "first") await held;
        if (items.includes("bad")) throw new Error("refused");
        return items.map((item) => `${item}:ok`);
      },
      async (item) => {
        if (item === "bad") throw new Error(`refused ${item}`);
        return `${item}:alone`;
      },
    );
    const first = writes.write("first");
    const rest = ["a", "bad", "b"].map((item) => writes.write(item).catch((error: Error) => error.message));
    release();
    expect(await first).toBe("first:ok");
    expect(await Promise.all(rest)).toEqual(["a:alone", "refused bad", "b:alone"]);
    expect(groups).toEqual([["first"], ["a", "bad", "b"]]);
  });
});
