import { TOOL_NAMES } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { toProviderJsonSchema } from "./provider-json-schema";
import { TOOL_DEFINITIONS, toolDefinitions } from "./tool-definitions";

const PLAIN_TYPES = new Set(["number", "string", "boolean", "array", "object"]);
const FORBIDDEN_KEYWORDS = [
  "anyOf",
  "oneOf",
  "allOf",
  "$ref",
  "$schema",
  "additionalProperties",
  "propertyNames",
  "not",
];

/** Every schema node in a tree, with its path. */
function nodes(schema: Record<string, unknown>, path = "(root)"): [string, Record<string, unknown>][] {
  const out: [string, Record<string, unknown>][] = [[path, schema]];
  for (const [name, child] of Object.entries(
    (schema.properties ?? {}) as Record<string, Record<string, unknown>>,
  )) {
    out.push(...nodes(child, `${path}.${name}`));
  }
  if (schema.items) out.push(...nodes(schema.items as Record<string, unknown>, `${path}[]`));
  return out;
}

const EXPECTED_REQUIRED: Record<string, string[]> = {
  sessions_list: [],
  sessions_history: ["sessionKey"],
  sessions_send: ["sessionKey", "message"],
  sessions_spawn: ["task"],
  session_status: [],
  agents_list: [],
  message: ["channel", "to", "text"],
  simulate_tool_call: ["tool_name"],
  summarize: [],
};

describe("TOOL_DEFINITIONS", () => {
  it("defines the nine tools in canonical order with a real description each", () => {
    expect(TOOL_DEFINITIONS.map((d) => d.name)).toEqual([...TOOL_NAMES]);
    for (const definition of TOOL_DEFINITIONS) {
      expect(definition.description.length).toBeGreaterThan(80);
    }
  });

  it.each(TOOL_DEFINITIONS.map((d) => [d.name, d] as const))(
    "%s has a provider-friendly parameter schema",
    (name, d) => {
      const { parameters } = d;
      expect(parameters.type).toBe("object");
      expect(typeof parameters.properties).toBe("object");
      expect(parameters.required ?? []).toEqual(EXPECTED_REQUIRED[name]);
      for (const [path, node] of nodes(parameters)) {
        for (const keyword of FORBIDDEN_KEYWORDS)
          expect(node, `${path} has ${keyword}`).not.toHaveProperty(keyword);
        expect(PLAIN_TYPES.has(node.type as string), `${path} type ${String(node.type)}`).toBe(true);
      }
      // Every parameter is explained to the model.
      for (const [param, node] of Object.entries(
        parameters.properties as Record<string, Record<string, unknown>>,
      )) {
        expect(typeof node.description, `${name}.${param}`).toBe("string");
      }
    },
  );

  it("types the parameters as tools.md says", () => {
    const props = (name: string) =>
      TOOL_DEFINITIONS.find((d) => d.name === name)!.parameters.properties as Record<
        string,
        Record<string, unknown>
      >;
    expect(props("sessions_list").kinds).toMatchObject({ type: "array", items: { type: "string" } });
    expect(props("sessions_list").limit?.type).toBe("number");
    expect(props("sessions_history").includeTools?.type).toBe("boolean");
    expect(props("simulate_tool_call").args?.type).toBe("object");
    expect(Object.keys(props("agents_list"))).toEqual([]);
  });

  it("shows the allowed values of choice parameters as enums", () => {
    const props = (name: string) =>
      TOOL_DEFINITIONS.find((d) => d.name === name)!.parameters.properties as Record<
        string,
        Record<string, unknown>
      >;
    expect(props("sessions_spawn").cleanup?.enum).toEqual(["delete", "keep"]);
    expect(props("summarize").scope?.enum).toEqual(["session", "topic"]);
    expect((props("sessions_list").kinds!.items as Record<string, unknown>).enum).toEqual([
      "main",
      "group",
      "cron",
      "hook",
      "node",
      "subagent",
      "other",
    ]);
  });

  it("survives a JSON round trip unchanged (it is plain JSON)", () => {
    expect(JSON.parse(JSON.stringify(TOOL_DEFINITIONS))).toEqual(TOOL_DEFINITIONS);
  });
});

describe("toolDefinitions", () => {
  it("returns all nine by default and a canonical-order subset for names, skipping unknown ones", () => {
    expect(toolDefinitions()).toHaveLength(9);
    expect(toolDefinitions(["summarize", "message", "web_fetch"]).map((d) => d.name)).toEqual([
      "message",
      "summarize",
    ]);
    expect(toolDefinitions([])).toEqual([]);
  });

  it("returns copies a caller may change without affecting later calls", () => {
    const [first] = toolDefinitions(["sessions_history"]);
    (first!.parameters as Record<string, unknown>).required = [];
    expect(toolDefinitions(["sessions_history"])[0]!.parameters.required).toEqual(["sessionKey"]);
  });
});

describe("toProviderJsonSchema", () => {
  it("flattens a nullable field to its plain type and drops additionalProperties", () => {
    const schema = toProviderJsonSchema(
      z.object({ a: z.string().nullable(), b: z.record(z.string(), z.number()) }),
    );
    expect(schema).toEqual({
      type: "object",
      properties: { a: { type: "string" }, b: { type: "object" } },
      required: ["a", "b"],
    });
  });

  it("refuses a schema no provider-friendly form exists for", () => {
    expect(() => toProviderJsonSchema(z.object({ a: z.union([z.string(), z.number()]) }))).toThrow(
      /no plain form/,
    );
    expect(() =>
      toProviderJsonSchema(z.object({ a: z.union([z.string(), z.object({ b: z.string() })]) })),
    ).toThrow(/anyOf/);
    expect(() => toProviderJsonSchema(z.string())).toThrow(/object schema/);
  });
});
