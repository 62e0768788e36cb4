import { describe, expect, it } from "vitest";
import { z } from "zod";
import { SwitchboardError } from "../errors";
import { PolicyRuleSchema, PolicyRulesSchema, validatePolicyRules } from "./rule-schema";

function rejection(rules: unknown): SwitchboardError {
  try {
    validatePolicyRules(rules);
  } catch (error) {
    expect(error).toBeInstanceOf(SwitchboardError);
    expect((error as SwitchboardError).code).toBe("INVALID_REQUEST");
    return error as SwitchboardError;
  }
  throw new Error("rules were accepted");
}

const redactRule = {
  id: "no-keys-out",
  hook: "PRE_OUTPUT",
  priority: 100,
  action: "redact",
  redact: { patterns: ["sk-[A-Za-z0-9]{20,}"] },
};

describe("validatePolicyRules", () => {
  it("accepts the documented example and fills in priority 0", () => {
    const [redact, deny] = validatePolicyRules([
      redactRule,
      {
        id: "no-cron",
        hook: "PRE_SEND",
        action: "deny",
        when: { "target.kind": "cron", "caller.taint": { gte: "INTERNAL" } },
      },
    ]);
    expect(redact?.priority).toBe(100);
    expect(deny?.priority).toBe(0);
  });

  it("is a plain zod object schema the config can embed", () => {
    expect(PolicyRuleSchema).toBeInstanceOf(z.ZodObject);
    expect(z.object({ rules: z.array(PolicyRuleSchema) }).safeParse({ rules: [redactRule] }).success).toBe(
      true,
    );
  });

  it.each([
    [
      { id: "r1", hook: "PRE_OUTPUT", action: "redact" },
      'policy.rules[0] (rule "r1").redact: a redact rule needs redact.patterns',
    ],
    [
      { ...redactRule, id: "r2", redact: { patterns: [] } },
      'policy.rules[0] (rule "r2").redact.patterns: needs at least one',
    ],
    [
      { ...redactRule, id: "r3", redact: { patterns: ["sk-("] } },
      'policy.rules[0] (rule "r3").redact.patterns[0]: invalid regular expression',
    ],
    [{ ...redactRule, id: "r4", redact: { patterns: ["x*"] } }, "must not match the empty string"],
    [
      { id: "r5", hook: "PRE_SEND", action: "deny", redact: { patterns: ["x"] } },
      "only allowed when action is redact",
    ],
    [
      { id: "r6", hook: "PRE_SEND", action: "deny", when: { "caller.agentid": "x" } },
      "when.caller.agentid: unknown field",
    ],
    [
      { id: "r7", hook: "PRE_SEND", action: "deny", when: { "caller.key": { matches: "[" } } },
      "when.caller.key.matches: invalid regular expression",
    ],
    [
      { id: "r8", hook: "PRE_SEND", action: "deny", when: { "caller.key": { startsWith: "x" } } },
      `rule "r8").when.caller.key: unknown operator "startsWith"`,
    ],
    [
      { id: "r9", hook: "PRE_SEND", action: "deny", when: { "caller.taint": { gt: "SECRET" } } },
      "must be a number or a level",
    ],
    [
      { id: "r10", hook: "PRE_SEND", action: "block" },
      'rule "r10").action: must be one of allow, deny, redact',
    ],
    [{ id: "r11", hook: "PRE_WRITE", action: "deny" }, 'rule "r11").hook: must be one of PRE_TOOL_CALL'],
    [{ id: "a2a", hook: "PRE_SEND", action: "allow" }, '"a2a" is reserved'],
    [{ id: "flow.mine", hook: "PRE_SEND", action: "allow" }, "is reserved"],
    [{ id: "r12", hook: "PRE_SEND", action: "deny", priority: 1.5 }, "priority: must be an integer"],
    [{ id: "r13", hook: "PRE_SEND", action: "deny", extra: 1 }, 'rule "r13")'],
    [{ hook: "PRE_SEND", action: "deny" }, "policy.rules[0].id"],
    [
      { id: "r15", hook: "PRE_TOOL_CALL", action: "redact", redact: { patterns: ["sk-[A-Z]+"] } },
      'rule "r15").hook: a redact rule needs a hook that carries text (PRE_SEND, PRE_SPAWN, PRE_OUTPUT, PRE_HISTORY): on PRE_TOOL_CALL it would rewrite nothing',
    ],
  ])("rejects %j with the rule and the reason", (rule, message) => {
    expect(rejection([rule]).message).toContain(message);
  });

  it("rejects duplicate ids", () => {
    const rule = { id: "same", hook: "PRE_SEND", action: "deny" };
    expect(rejection([rule, rule]).message).toBe(
      'policy.rules[1] (rule "same").id: duplicate rule id (first used by policy.rules[0])',
    );
    expect(PolicyRulesSchema.safeParse([rule, rule]).success).toBe(false);
  });

  it("reports every bad rule at once", () => {
    const error = rejection([
      { id: "a", hook: "PRE_SEND", action: "redact" },
      { id: "b", hook: "PRE_SEND", action: "deny", when: { nope: 1 } },
    ]);
    expect(error.message).toContain('rule "a"');
    expect(error.message).toContain('rule "b"');
  });

  // labels-and-policy.md: invalid rules are rejected at load with the rule id and the reason. Before
  // session 22 these loaded and never applied (or always did).
  it("rejects conditions that could never match, or always would", () => {
    const deny = (when: Record<string, unknown>) => [{ id: "dead", hook: "PRE_SEND", action: "deny", when }];
    expect(rejection(deny({ "target.channel": "Discord" })).message).toContain(
      'when.target.channel: channels are compared lower-cased: write "discord"',
    );
    // Session 23: a condition on a part of the context its hook never carries (it read nothing
    // there, so it never applied).
    for (const [hook, field, part] of [
      ["PRE_TOOL_CALL", "target.key", "target"],
      ["PRE_HISTORY", "text", "text"],
      ["PRE_SEND", "recipient.level", "recipient"],
      ["PRE_OUTPUT", "facts.hop", "facts"],
      ["PRE_SPAWN", "tool.name", "tool"],
    ] as const)
      expect(
        rejection([
          { id: "dead", hook, action: "deny", when: { [field]: field === "facts.hop" ? { gte: 2 } : "x" } },
        ]).message,
        `${hook} ${field}`,
      ).toContain(`when.${field}: ${hook} carries no ${part}`);
    // Session 23: the recipient's channel is lower-cased before rules see it too.
    expect(
      rejection([
        { id: "dead", hook: "PRE_OUTPUT", action: "deny", when: { "recipient.channel": "Discord" } },
      ]).message,
    ).toContain('when.recipient.channel: channels are compared lower-cased: write "discord"');
    expect(rejection(deny({ "target.chatType": "gruop" })).message).toContain(
      'when.target.chatType: must be one of "direct", "group", "channel" (or null)',
    );
    expect(rejection(deny({ "caller.sandboxed": "false" })).message).toContain(
      "when.caller.sandboxed: must be one of true, false (or null)",
    );
    expect(rejection(deny({ "facts.origin": { in: ["tol"] } })).message).toContain("when.facts.origin.in[0]");
    expect(rejection(deny({ "target.kind": { not: "grop" } })).message).toContain("when.target.kind.not");
    expect(rejection(deny({ "caller.agentId": { in: [] } })).message).toContain(
      "an empty list never matches",
    );
    expect(rejection(deny({ "caller.agentId": { not: [] } })).message).toContain("excludes nothing");
    expect(rejection(deny({ text: { prefix: "" } })).message).toContain("an empty prefix matches everything");
    expect(() =>
      validatePolicyRules(
        deny({
          "target.channel": "discord",
          "target.chatType": { in: ["group", null] },
          "caller.sandboxed": true,
        }),
      ),
    ).not.toThrow();
  });

  it("reserves the built-in ids whatever their case", () => {
    for (const id of ["a2a", "A2A", "Flow.x", "BUDGET"])
      expect(rejection([{ id, hook: "PRE_SEND", action: "deny" }]).message).toContain(
        `"${id}" is reserved for a built-in rule`,
      );
  });

  it("requires an array", () => {
    expect(rejection({}).message).toBe("policy.rules: must be an array of rules");
  });
});
