import { describe, expect, it } from "vitest";
import { keyPatternMatches } from "./access";

describe("keyPatternMatches", () => {
  it("treats only * as a wildcard: ? and regexp characters match themselves", () => {
    expect(keyPatternMatches("agent:main:webchat:*", "agent:main:webchat:dm:carol")).toBe(true);
    expect(keyPatternMatches("agent:main:webchat:*", "agent:main:discord:dm:carol")).toBe(false);
    expect(keyPatternMatches("agent:main:main", "agent:main:main")).toBe(true);
    expect(keyPatternMatches("agent:main:dm:a?c", "agent:main:dm:abc")).toBe(false);
    expect(keyPatternMatches("agent:main:dm:a?c", "agent:main:dm:a?c")).toBe(true);
    expect(keyPatternMatches("agent:main:a.c", "agent:main:abc")).toBe(false);
    expect(keyPatternMatches("*", "anything")).toBe(true);
  });
});
