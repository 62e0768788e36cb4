import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  invalidRequestFromZod,
  isSwitchboardError,
  MAX_ISSUE_CHARS,
  MAX_REPORTED_ISSUES,
  SwitchboardError,
} from "./errors";

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

describe("invalidRequestFromZod", () => {
  const Params = z.strictObject({ kinds: z.array(z.string()), limit: z.number().optional() });

  it("names every field when there are few issues", () => {
    const parsed = Params.safeParse({ kinds: [1], limit: "x" });
    const error = invalidRequestFromZod(parsed.error!, "params");
    expect(error.code).toBe("INVALID_REQUEST");
    expect(error.message).toBe(
      "params.kinds[0]: Invalid input: expected string, received number; params.limit: Invalid input: expected number, received string",
    );
    expect(error.details).toEqual({
      issues: [
        { path: "kinds[0]", message: "Invalid input: expected string, received number" },
        { path: "limit", message: "Invalid input: expected number, received string" },
      ],
    });
  });

  it("stays small however many issues a hostile request carries", () => {
    const request = { kinds: Array.from({ length: 250_000 }, (_, i) => i) };
    const error = invalidRequestFromZod(Params.safeParse(request).error!, "params");
    expect(error.message).toMatch(/^params\.kinds\[0\]: Invalid input: expected string, received number; /);
    expect(error.message).toMatch(/; and 249992 more$/);
    expect(error.message.length).toBeLessThan(MAX_REPORTED_ISSUES * (MAX_ISSUE_CHARS + 2) + 40);
    const details = error.details as { issues: unknown[]; omittedIssues: number };
    expect(details.issues).toHaveLength(MAX_REPORTED_ISSUES);
    expect(details.omittedIssues).toBe(249_992);
    expect(JSON.stringify(details).length).toBeLessThan(JSON.stringify(request).length / 100);
  });

  it("clips an issue whose path holds a huge key of the sender's", () => {
    const Strict = z.strictObject({ a: z.record(z.string(), z.number()) });
    const error = invalidRequestFromZod(Strict.safeParse({ a: { ["k".repeat(100_000)]: "x" } }).error!);
    expect(error.message.length).toBeLessThanOrEqual(MAX_ISSUE_CHARS);
    expect(error.message.endsWith("…")).toBe(true);
  });
});
