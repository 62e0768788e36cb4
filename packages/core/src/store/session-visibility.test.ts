import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createPolicyEngine } from "../policy/engine";
import type { PolicyRuleInput } from "../policy/rule-schema";
import { sessionFactsArbitrary } from "../policy/session-facts.arbitrary";
import { sampleSession } from "./conformance";
import { compileSessionVisibility, type SessionVisibility, sessionClassifierFor } from "./session-visibility";

const keys = [
  "agent:main:main",
  "agent:Main:discord:group:dev",
  "agent:research:main",
  "agent:ops:subagent:kid",
  "agent:team-1:main",
];
const session = sessionFactsArbitrary(keys);

const historyRules: fc.Arbitrary<PolicyRuleInput[]> = fc.constantFrom(
  [],
  [{ id: "no-ops", hook: "PRE_HISTORY", action: "deny", when: { "target.agentId": "ops" } }],
);

describe("session visibility as data", () => {
  it("admits exactly what compiled discovery decides, plus the caller's own row", () => {
    fc.assert(
      fc.property(
        session,
        session,
        historyRules,
        fc.constantFrom("allow", "deny" as const),
        fc.record({
          enabled: fc.boolean(),
          allow: fc.constantFrom<string[]>(["*"], ["main"], ["main", "res*"], ["team-?"], ["RESEARCH"], []),
        }),
        fc.constantFrom("spawned", "all" as const),
        (caller, target, rules, fallback, agentToAgent, sandboxVisibility) => {
          const engine = createPolicyEngine({ rules, default: fallback, agentToAgent, sandboxVisibility });
          const filter = engine.discovery(caller);
          const row = sampleSession({
            key: target.key,
            agentId: target.agentId,
            taint: target.taint,
            ...(target.spawnedBy ? { spawnedBy: target.spawnedBy } : {}),
          });
          const visible = compileSessionVisibility(filter.visibility);
          expect(visible(row)).toBe(filter.decide(row) || row.key === caller.key);
        },
      ),
      { numRuns: 3000 },
    );
  });

  it("asks the residual only for rows the data admits, never for the caller's own row", () => {
    const visibility: SessionVisibility = {
      selfKey: "agent:main:main",
      maxTaint: "INTERNAL",
      agents: ["main"],
      sandboxed: false,
    };
    const asked: string[] = [];
    const visible = compileSessionVisibility(visibility, (entry) => {
      asked.push(entry.key);
      return entry.key !== "agent:main:b";
    });
    const rows = [
      sampleSession({ key: "agent:main:main", taint: "RESTRICTED" }),
      sampleSession({ key: "agent:main:a" }),
      sampleSession({ key: "agent:main:b" }),
      sampleSession({ key: "agent:main:c", taint: "CONFIDENTIAL" }),
      sampleSession({ key: "agent:ops:main", agentId: "ops" }),
    ];
    expect(rows.filter(visible).map((row) => row.key)).toEqual(["agent:main:main", "agent:main:a"]);
    expect(asked).toEqual(["agent:main:a", "agent:main:b"]);
  });

  it("rejects a malformed filter naming the field", () => {
    expect(() =>
      compileSessionVisibility({
        selfKey: "k",
        maxTaint: "SECRET",
        agents: "all",
        sandboxed: false,
      } as never),
    ).toThrow(/visibility\.maxTaint/);
  });

  it("gives one stable classifier per mainKey, which decides the main kind", () => {
    expect(sessionClassifierFor("home")).toBe(sessionClassifierFor("home"));
    const row = sampleSession({ key: "agent:main:home" });
    expect(sessionClassifierFor("home")(row)).toBe("main");
    expect(sessionClassifierFor()(row)).toBe("other");
  });
});
