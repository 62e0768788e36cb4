import { describe, expect, it } from "vitest";
import { warnThrottle } from "./logger";

describe("warnThrottle", () => {
  it("logs the first warning, holds back the rest of the interval, then reports how many were held", () => {
    const lines: Array<[Record<string, unknown>, string]> = [];
    const log = { warn: (fields: Record<string, unknown>, message: string) => lines.push([fields, message]) };
    let time = 0;
    const warn = warnThrottle(log as never, 1000, () => time);
    warn({ address: "a" }, "refused");
    for (let i = 0; i < 500; i++) warn({ address: "b" }, "refused");
    expect(lines).toEqual([[{ address: "a" }, "refused"]]);
    time = 1000;
    warn({ address: "c" }, "refused");
    expect(lines[1]).toEqual([{ address: "c", suppressed: 500 }, "refused"]);
    warn({ address: "d" }, "refused");
    expect(lines).toHaveLength(2);
  });
});
