import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SwitchboardError } from "../errors";
import {
  canonicalizeKey,
  type KeyContext,
  mainKeyFor,
  makeSubagentKey,
  resolveKeyInput,
} from "./canonicalize";
import { isCanonicalKey } from "./parse-key";

const caller: KeyContext = { callerAgentId: "research", defaultAgentId: "main", mainKey: "main" };
const operator: KeyContext = { defaultAgentId: "ops", mainKey: "main" };

describe("canonicalizeKey", () => {
  it("normalises keys to NFC, so canonically equivalent spellings are one session", () => {
    const nfc = "webchat:dm:jos\u00e9";
    const nfd = "webchat:dm:jose\u0301";
    expect(nfc).not.toBe(nfd);
    expect(canonicalizeKey(nfd, caller)).toBe(canonicalizeKey(nfc, caller));
    expect(canonicalizeKey(`agent:main:${nfd}`, operator)).toBe("agent:main:webchat:dm:jos\u00e9");
  });
  it("resolves `main` to the caller's own main session", () => {
    expect(canonicalizeKey("main", caller)).toBe("agent:research:main");
  });
  it("resolves `main` to the default agent's main session for operators", () => {
    expect(canonicalizeKey("main", operator)).toBe("agent:ops:main");
  });
  it("prefixes bare keys with the caller's (or default) agent", () => {
    expect(canonicalizeKey("discord:group:dev", caller)).toBe("agent:research:discord:group:dev");
    expect(canonicalizeKey("cron:nightly", operator)).toBe("agent:ops:cron:nightly");
  });
  it("maps agent:<id>:main to the custom main key", () => {
    const ctx = { ...caller, mainKey: "home" };
    expect(canonicalizeKey("agent:main:main", ctx)).toBe("agent:main:home");
    expect(canonicalizeKey("main", ctx)).toBe("agent:research:home");
    expect(canonicalizeKey("agent:main:home", ctx)).toBe("agent:main:home");
  });
  it("lower-cases the agent id but keeps the rest", () => {
    expect(canonicalizeKey("Agent:RESEARCH:Discord:group:Dev", caller)).toBe(
      "agent:research:Discord:group:Dev",
    );
  });
  it("leaves canonical keys alone", () => {
    expect(canonicalizeKey("agent:main:telegram:dm:42", caller)).toBe("agent:main:telegram:dm:42");
  });
  it("resolves main to the internal global key under global scope", () => {
    const ctx: KeyContext = { ...caller, scope: "global" };
    expect(canonicalizeKey("main", ctx)).toBe("global");
    expect(canonicalizeKey("agent:main:main", ctx)).toBe("global");
    expect(canonicalizeKey("discord:group:dev", ctx)).toBe("agent:research:discord:group:dev");
  });
  it.each(["global", "unknown", "agent:main:global"])("refuses internal key %j from callers", (key) => {
    expect(() => canonicalizeKey(key, caller)).toThrow(/internal key/);
    expect(() => canonicalizeKey(key, { ...caller, scope: "global" })).toThrow(/internal key/);
  });
  it("lets gateway-internal callers address internal keys", () => {
    expect(canonicalizeKey("global", { ...caller, scope: "global", allowInternal: true })).toBe("global");
  });
  it.each([
    ["../x", "must not contain '/' or '\\'"],
    ["agent:main:..", "'.' or '..' segments"],
    ["main session", "must not contain whitespace"],
    ["agent:main", "agent:<agentId>:<rest>"],
    ["agent:bad id:x", "must not contain whitespace"],
    ["agent:-x:y", "must match"],
  ])("rejects %j naming the rule", (input, rule) => {
    try {
      canonicalizeKey(input, caller);
      throw new Error("accepted");
    } catch (error) {
      expect(error).toBeInstanceOf(SwitchboardError);
      expect((error as SwitchboardError).code).toBe("INVALID_REQUEST");
      expect((error as SwitchboardError).message).toMatch(/^sessionKey: /);
      expect((error as SwitchboardError).message).toContain(rule);
    }
  });
  it("checks the length after prefixing", () => {
    const bare = "x".repeat(250);
    expect(() => canonicalizeKey(bare, caller)).toThrow(/at most 256 characters/);
  });
  it("uses the field name given in the context", () => {
    expect(() => canonicalizeKey("a b", { ...caller, field: "target" })).toThrow(/^target: /);
  });
});

describe("resolveKeyInput", () => {
  const uuid = "6F1C2D3E-4A5B-4C6D-8E9F-0A1B2C3D4E5F";
  it("resolves a sessionId to its one key", async () => {
    const seen: string[] = [];
    const key = await resolveKeyInput(uuid, caller, async (id) => {
      seen.push(id);
      return ["agent:main:main"];
    });
    expect(key).toBe("agent:main:main");
    expect(seen).toEqual([uuid.toLowerCase()]);
  });
  it("is NOT_FOUND when no session has that sessionId", async () => {
    await expect(resolveKeyInput(uuid, caller, async () => [])).rejects.toMatchObject({ code: "NOT_FOUND" });
  });
  it("lists the keys when the sessionId is ambiguous", async () => {
    const error = await resolveKeyInput(uuid, caller, async () => ["agent:b:x", "agent:a:y"]).catch((e) => e);
    expect(error).toBeInstanceOf(SwitchboardError);
    expect(error.message).toContain("agent:a:y, agent:b:x");
    expect(error.details.keys).toEqual(["agent:a:y", "agent:b:x"]);
  });
  it("canonicalizes anything that is not a UUID without a lookup", async () => {
    let called = false;
    const key = await resolveKeyInput("main", caller, async () => {
      called = true;
      return [];
    });
    expect(key).toBe("agent:research:main");
    expect(called).toBe(false);
  });
  it("does not hand out internal sessions by sessionId, except the global main under global scope", async () => {
    await expect(resolveKeyInput(uuid, caller, async () => ["unknown"])).rejects.toThrow(/internal session/);
    await expect(resolveKeyInput(uuid, { ...caller, scope: "global" }, async () => ["global"])).resolves.toBe(
      "global",
    );
  });
});

describe("key builders", () => {
  it("builds main and sub-agent keys", () => {
    expect(mainKeyFor("Main", "home")).toBe("agent:main:home");
    expect(makeSubagentKey("Research", "1B2C3D4E-0000-4000-8000-000000000000")).toBe(
      "agent:research:subagent:1b2c3d4e-0000-4000-8000-000000000000",
    );
    expect(() => makeSubagentKey("research", "not-a-uuid")).toThrow(/uuid: must be a UUID/);
  });
});

describe("canonicalizeKey properties", () => {
  const segment = fc.stringMatching(/^[A-Za-z0-9_.\-+@#]{1,12}$/);
  const input = fc.oneof(
    fc.array(segment, { minLength: 1, maxLength: 5 }).map((parts) => parts.join(":")),
    fc
      .tuple(fc.constantFrom("main", "Research", "ops"), fc.array(segment, { minLength: 1, maxLength: 4 }))
      .map(([agent, parts]) => `agent:${agent}:${parts.join(":")}`),
    fc.string({ maxLength: 40 }),
  );

  it("always yields a valid canonical key, and canonicalizing again changes nothing", () => {
    fc.assert(
      fc.property(input, (raw) => {
        let key: string;
        try {
          key = canonicalizeKey(raw, caller);
        } catch (error) {
          expect(error).toBeInstanceOf(SwitchboardError);
          return;
        }
        expect(isCanonicalKey(key)).toBe(true);
        expect(canonicalizeKey(key, caller)).toBe(key);
        expect(canonicalizeKey(key, operator)).toBe(key);
      }),
      { numRuns: 500 },
    );
  });
});
