import { describe, expect, it } from "vitest";
import { compileGlob, compileGlobList, matchesAnyGlob } from "./glob";

describe("compileGlob", () => {
  it.each([
    ["*", "anything", true],
    ["*", "", true],
    ["main", "main", true],
    ["main", "mainx", false],
    ["res*", "research", true],
    ["res*", "re", false],
    ["*:cron:*", "agent:a:cron:daily", true],
    ["team-?", "team-a", true],
    ["team-?", "team-ab", false],
    ["a.b", "axb", false],
    ["a.b", "a.b", true],
    ["(x)+[y]", "(x)+[y]", true],
    ["a*", "a\nb", true],
  ])("%j on %j is %s", (pattern, text, expected) => {
    expect(compileGlob(pattern)(text)).toBe(expected);
  });

  it("is case-sensitive unless asked otherwise", () => {
    expect(compileGlob("Res*")("research")).toBe(false);
    expect(compileGlob("Res*", { ignoreCase: true })("RESEARCH")).toBe(true);
    expect(compileGlob("MAIN", { ignoreCase: true })("main")).toBe(true);
  });

  it("trims the pattern only when asked", () => {
    expect(compileGlob(" main ")("main")).toBe(false);
    expect(compileGlob(" main ", { trimPattern: true })("main")).toBe(true);
    expect(compileGlob(" * ", { trimPattern: true })("x")).toBe(true);
  });

  it("treats ? as a literal when the pattern language says so", () => {
    const literal = compileGlob("a?b*", { questionMark: "literal" });
    expect(literal("a?b-rest")).toBe(true);
    expect(literal("axb-rest")).toBe(false);
    expect(compileGlob("a?", { questionMark: "literal" })("ab")).toBe(false);
    expect(compileGlob("a?", { questionMark: "literal" })("a?")).toBe(true);
  });
});

describe("matchesAnyGlob", () => {
  it("matches any pattern of the list and none of an empty list", () => {
    expect(matchesAnyGlob(["main", "res*"], "research")).toBe(true);
    expect(matchesAnyGlob(["main", "res*"], "ops")).toBe(false);
    expect(matchesAnyGlob([], "main")).toBe(false);
    expect(compileGlobList(["a", "b*"])("bee")).toBe(true);
  });

  it("notices a list changed in place after it was compiled", () => {
    const patterns = ["main"];
    expect(matchesAnyGlob(patterns, "ops")).toBe(false);
    patterns.push("op?");
    expect(matchesAnyGlob(patterns, "ops")).toBe(true);
  });

  it("keeps the options of each call apart for the same list", () => {
    const patterns = ["Main"];
    expect(matchesAnyGlob(patterns, "main")).toBe(false);
    expect(matchesAnyGlob(patterns, "main", { ignoreCase: true })).toBe(true);
    expect(matchesAnyGlob(patterns, "main")).toBe(false);
  });
});
