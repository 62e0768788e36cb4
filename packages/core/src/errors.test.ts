import { describe, expect, it } from "vitest";
import { isSwitchboardError, SwitchboardError } from "./errors";

type ErrorsModule = typeof import("./errors");

/** A second, separately evaluated copy of this module, as a second install of core would be. */
async function secondCopy(): Promise<ErrorsModule> {
  const specifier = "./errors?second-copy";
  return (await import(/* @vite-ignore */ specifier)) as ErrorsModule;
}

describe("SwitchboardError across module copies", () => {
  it("loads a genuinely separate class (the test would prove nothing otherwise)", async () => {
    const other = await secondCopy();
    expect(other.SwitchboardError).not.toBe(SwitchboardError);
    const foreign = new other.SwitchboardError("NOT_FOUND", "gone");
    // The prototype chain really differs: only the brand can connect them.
    expect(Object.getPrototypeOf(foreign)).not.toBe(SwitchboardError.prototype);
  });

  it("recognises an error from the other copy, both ways", async () => {
    const other = await secondCopy();
    const foreign = new other.SwitchboardError("NOT_FOUND", "gone");
    const local = new SwitchboardError("CONFLICT", "taken");
    expect(isSwitchboardError(foreign)).toBe(true);
    expect(foreign instanceof SwitchboardError).toBe(true);
    expect(other.isSwitchboardError(local)).toBe(true);
    expect(local instanceof other.SwitchboardError).toBe(true);
    if (isSwitchboardError(foreign)) expect(foreign.code).toBe("NOT_FOUND");
  });

  it("rejects look-alikes that lack the brand", () => {
    const plain = Object.assign(new Error("x"), { code: "NOT_FOUND", name: "SwitchboardError" });
    expect(isSwitchboardError(plain)).toBe(false);
    expect(plain instanceof SwitchboardError).toBe(false);
    expect(isSwitchboardError(null)).toBe(false);
    expect(isSwitchboardError("SwitchboardError")).toBe(false);
    expect(isSwitchboardError({ code: "NOT_FOUND" })).toBe(false);
  });

  it("keeps the ordinary check for subclasses and hides the brand from serialisation", () => {
    class SpecialError extends SwitchboardError {}
    const special = new SpecialError("INTERNAL", "boom");
    const base = new SwitchboardError("INTERNAL", "boom");
    expect(special instanceof SwitchboardError).toBe(true);
    expect(special instanceof SpecialError).toBe(true);
    expect(base instanceof SpecialError).toBe(false);
    expect(Object.keys(base)).not.toContain("switchboard.error");
    expect(JSON.stringify(base.toWire())).toBe('{"code":"INTERNAL","message":"boom"}');
  });
});
