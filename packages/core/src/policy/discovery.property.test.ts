import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createPolicyEngine } from "./engine";
import type { PolicyRuleInput } from "./rule-schema";
import { sessionFactsArbitrary } from "./session-facts.arbitrary";

const keys = [
  "agent:main:main",
  "agent:main:discord:group:dev",
  "agent:research:main",
  "agent:ops:subagent:kid",
];
const session = sessionFactsArbitrary(keys);

const historyRules: fc.Arbitrary<PolicyRuleInput[]> = fc.constantFrom(
  [],
  [{ id: "no-ops", hook: "PRE_HISTORY", action: "deny", when: { "target.agentId": "ops" } }],
  [{ id: "allow-main", hook: "PRE_HISTORY", action: "allow", when: { "target.agentId": "main" } }],
);

describe("compiled discovery", () => {
  it("agrees with the engine on PRE_HISTORY discovery: false is final, true is final when exact", () => {
    fc.assert(
      fc.property(
        session,
        session,
        historyRules,
        fc.constantFrom("allow", "deny" as const),
        fc.record({
          enabled: fc.boolean(),
          allow: fc.constantFrom<string[]>(["*"], ["main"], ["main", "res*"], []),
        }),
        fc.constantFrom("spawned", "all" as const),
        (caller, target, rules, fallback, agentToAgent, sandboxVisibility) => {
          const engine = createPolicyEngine({ rules, default: fallback, agentToAgent, sandboxVisibility });
          const decision = engine.evaluate({
            hook: "PRE_HISTORY",
            caller,
            target,
            facts: { origin: "tool", discovery: true },
          });
          const filter = engine.discovery(caller);
          const fast = filter.decide(target);
          if (!fast) expect(decision.action).toBe("BLOCK");
          if (filter.exact) expect(fast).toBe(decision.action !== "BLOCK");
        },
      ),
      { numRuns: 2000 },
    );
  });
});
