import { describe, expect, it } from "vitest";
import { SwitchboardError } from "../errors";
import { normalizeAgentId } from "./agent-id";
import { isCanonicalKey, isInternalKey, parseKey } from "./parse-key";
import { keyProblem, MAX_KEY_LENGTH, validateKey } from "./validate-key";

function rejection(run: () => unknown): SwitchboardError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(SwitchboardError);
    return error as SwitchboardError;
  }
  throw new Error("expected a rejection");
}

describe("validateKey", () => {
  it.each([
    ["../x", "must not contain '/' or '\\'"],
    ["../../etc/passwd", "must not contain '/' or '\\'"],
    ["agent:main:..", "must not contain '.' or '..' segments"],
    ["agent:main:.", "must not contain '.' or '..' segments"],
    ["..", "must not contain '.' or '..' segments"],
    ["agent:main:a b", "must not contain whitespace"],
    ["agent:main:a\tb", "must not contain whitespace"],
    ["agent:main:a\u00a0b", "must not contain whitespace"],
    ["agent:main:a\u0000b", "must contain only printable characters"],
    ["agent:main:a\u200bb", "must contain only printable characters"],
    ["agent:main:a\\b", "must not contain '/' or '\\'"],
    ["agent::x", "must not contain empty segments"],
    [":x", "must not contain empty segments"],
    ["x:", "must not contain empty segments"],
    ["", "must not be empty"],
  ])("rejects %j naming the rule", (key, rule) => {
    const error = rejection(() => validateKey(key));
    expect(error.code).toBe("INVALID_REQUEST");
    expect(error.message).toContain(`sessionKey: ${rule}`);
  });

  it("names the field it was given", () => {
    expect(rejection(() => validateKey("a b", "target")).message).toBe("target: must not contain whitespace");
  });

  it("limits length to 256 characters", () => {
    expect(() => validateKey(`agent:main:${"x".repeat(MAX_KEY_LENGTH - 11)}`)).not.toThrow();
    const error = rejection(() => validateKey(`agent:main:${"x".repeat(MAX_KEY_LENGTH - 10)}`));
    expect(error.message).toContain("at most 256 characters");
  });

  it("counts characters, not UTF-16 units: letters outside the BMP count once", () => {
    // "𝒳" (U+1D4B3) is one character and two UTF-16 units.
    const longest = `agent:main:${"𝒳".repeat(MAX_KEY_LENGTH - 11)}`;
    expect(longest.length).toBeGreaterThan(MAX_KEY_LENGTH);
    expect(() => validateKey(longest)).not.toThrow();
    expect(rejection(() => validateKey(`${longest}𝒳`)).message).toBe(
      "sessionKey: must be at most 256 characters in canonical form (got 257)",
    );
  });

  it("accepts ordinary keys, including non-ASCII letters and dots inside segments", () => {
    for (const key of [
      "agent:main:main",
      "discord:group:dev",
      "agent:main:telegram:dm:42",
      "a.b:c",
      "agent:main:café",
    ]) {
      expect(keyProblem(key)).toBeUndefined();
    }
  });
});

describe("normalizeAgentId", () => {
  it("lower-cases valid ids", () => {
    expect(normalizeAgentId("Research_2")).toBe("research_2");
  });
  it.each(["", "-x", "a b", "a:b", "x".repeat(65), "ümlaut"])("rejects %j naming the rule", (id) => {
    const error = rejection(() => normalizeAgentId(id));
    expect(error.code).toBe("INVALID_REQUEST");
    expect(error.message).toMatch(/^agentId: /);
  });
});

describe("parseKey", () => {
  it("splits canonical keys", () => {
    expect(parseKey("agent:main:discord:group:dev")).toEqual({ agentId: "main", rest: "discord:group:dev" });
  });
  it.each(["discord:group:dev", "agent:main", "agent:Main:x", "global"])(
    "rejects non-canonical %j",
    (key) => {
      expect(rejection(() => parseKey(key)).message).toContain("canonical key");
      expect(isCanonicalKey(key)).toBe(false);
    },
  );
});

describe("isInternalKey", () => {
  it("covers global and unknown, bare and agent-prefixed", () => {
    expect(isInternalKey("global")).toBe(true);
    expect(isInternalKey("unknown")).toBe(true);
    expect(isInternalKey("agent:main:global")).toBe(true);
    expect(isInternalKey("agent:main:unknown")).toBe(true);
    expect(isInternalKey("agent:main:main")).toBe(false);
    expect(isInternalKey("discord:group:global")).toBe(false);
  });
});
