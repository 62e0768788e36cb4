import { describe, expect, it } from "vitest";
import { renderTemplate, renderValue, type TemplateScope, templateProblems } from "./template";

function scope(overrides: Partial<TemplateScope> = {}): TemplateScope {
  return {
    message: "ask agent:b:main hello there",
    context: "",
    captures: ["ask agent:b:main hello there", "agent:b:main", "hello there"],
    result: { status: "ok", reply: "hi back", count: 3, nested: { flag: true } },
    results: [{ childSessionKey: "agent:main:subagent:1" }, { status: "ok", reply: "hi back", count: 3 }],
    provenance: { kind: "user" },
    runId: "run-1",
    sessionKey: "agent:main:main",
    agentId: "main",
    lane: "main",
    ...overrides,
  };
}

describe("renderTemplate", () => {
  it("substitutes captures, the message and result paths", () => {
    expect(renderTemplate("to $1: $2", scope())).toBe("to agent:b:main: hello there");
    expect(renderTemplate("echo: {{message}}", scope())).toBe("echo: ask agent:b:main hello there");
    expect(renderTemplate("they said: {{result.reply}} ({{ result.count }})", scope())).toBe(
      "they said: hi back (3)",
    );
    expect(renderTemplate("child {{results.0.childSessionKey}}", scope())).toBe(
      "child agent:main:subagent:1",
    );
  });

  it("renders missing values as empty text, objects as JSON and $$ as a dollar", () => {
    expect(renderTemplate("[$7][{{result.missing.deep}}]", scope())).toBe("[][]");
    expect(renderTemplate("{{result.nested}}", scope())).toBe('{"flag":true}');
    expect(renderTemplate("costs $$5", scope())).toBe("costs $5");
    expect(renderTemplate("{{result.reply}}", scope({ result: undefined }))).toBe("");
  });

  it("leaves text that is not a placeholder alone", () => {
    expect(renderTemplate("a {single} brace and $ sign", scope())).toBe("a {single} brace and $ sign");
  });
});

describe("renderValue", () => {
  it("keeps numbers, booleans and null as typed and renders strings", () => {
    expect(
      renderValue({ sessionKey: "$1", message: "$2!", timeoutSeconds: 10, wait: false, none: null }, scope()),
    ).toEqual({
      sessionKey: "agent:b:main",
      message: "hello there!",
      timeoutSeconds: 10,
      wait: false,
      none: null,
    });
  });

  it("keeps the referenced value's type for a template that is exactly one placeholder", () => {
    const rendered = renderValue(
      { n: "{{result.count}}", obj: "{{ result.nested }}", s: "n={{result.count}}" },
      scope(),
    );
    expect(rendered).toEqual({ n: 3, obj: { flag: true }, s: "n=3" });
  });

  it("renders nested arrays and objects and drops arguments whose placeholder names nothing", () => {
    expect(
      renderValue(
        { list: ["$1", { k: "{{results.1.count}}" }], gone: "{{result.nope}}", gone2: "$9" },
        scope(),
      ),
    ).toEqual({
      list: ["agent:b:main", { k: 3 }],
    });
  });
});

describe("templateProblems", () => {
  it("accepts known variables and reports unknown ones and broken braces", () => {
    expect(templateProblems("{{message}} {{result.a.b}} {{results.0.x}} $1")).toEqual([]);
    expect(templateProblems("{{mesage}}")[0]).toContain("unknown template variable {{mesage}}");
    expect(templateProblems("{{result.reply")[0]).toContain("malformed placeholder");
  });
});
