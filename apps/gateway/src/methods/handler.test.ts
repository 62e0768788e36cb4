import { METHOD_NAMES } from "@switchboard/core";
import { describe, expect, expectTypeOf, it } from "vitest";
import type { MethodDeps } from "./deps";
import type { Handlers, MethodHandler, ParsedParams } from "./handler";
import { createHandlers } from "./index";

describe("the handler map", () => {
  it("has exactly one handler per protocol method", () => {
    // Building the map only reads the deps' fields; no handler runs.
    const handlers = createHandlers({} as MethodDeps);
    expect(Object.keys(handlers).sort()).toEqual([...METHOD_NAMES].sort());
  });

  it("types params as parsed and results as declared (checked by tsc)", () => {
    // Parsed params carry their zod defaults: `args` is always present.
    expectTypeOf<ParsedParams<"tools.invoke">["args"]>().toEqualTypeOf<Record<string, unknown>>();

    const right: MethodHandler<"sessions.reset"> = async (params) => ({ key: params.key, sessionId: "s" });
    // @ts-expect-error sessions.reset declares { key, sessionId }: a missing field does not compile
    const missingField: MethodHandler<"sessions.reset"> = async (params) => ({ key: params.key });
    // @ts-expect-error sessions.delete declares `deleted: true`, so `false` does not compile
    const wrongLiteral: MethodHandler<"sessions.delete"> = async () => ({ key: "k", deleted: false });
    // @ts-expect-error a namespace that names a method must handle it
    const missingMethod: Handlers<"audit.tail" | "audit.verify"> = {
      "audit.tail": async () => ({ entries: [] }),
    };
    expect([right, missingField, wrongLiteral, missingMethod].every(Boolean)).toBe(true);
  });
});
