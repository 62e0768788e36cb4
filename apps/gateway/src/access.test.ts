import type { SessionEntry } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { keyPatternMatches, requireSameTranscript } from "./access";

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

describe("requireSameTranscript", () => {
  const entry = { key: "agent:main:main", sessionId: "new-id" } as SessionEntry;
  it("lets a run of the session's current transcript act", () => {
    expect(() => requireSameTranscript({ runId: "r1", sessionId: "new-id" }, entry)).not.toThrow();
  });
  it("refuses a run of an earlier transcript (the session was reset), naming run and session", () => {
    expect(() => requireSameTranscript({ runId: "r1", sessionId: "old-id" }, entry)).toThrow(
      "run r1 belongs to an earlier transcript of agent:main:main: the session was reset",
    );
  });
});
