import { describe, expect, it } from "vitest";
import { z } from "zod";
import { plainRecord } from "./plain-record";

describe("plainRecord", () => {
  it("refuses a __proto__ key that z.record would turn into the prototype and drop", () => {
    const parsed = JSON.parse('{"a": 1, "__proto__": {"b": 2}}') as unknown;
    expect(Object.keys(z.record(z.string(), z.unknown()).parse(parsed))).toEqual(["a"]);
    const result = plainRecord(z.unknown()).safeParse(parsed);
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]).toMatchObject({
      path: ["__proto__"],
      message: "a key named __proto__ is not allowed",
    });
    expect(plainRecord(z.number()).parse({ a: 1 })).toEqual({ a: 1 });
    expect(
      plainRecord(z.number(), { error: "must be an object" }).safeParse(5).error?.issues[0]?.message,
    ).toBe("must be an object");
  });
});
