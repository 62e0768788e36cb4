import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canFlowTo, LEVELS, maxLevel } from "../labels/level";
import type { PolicyContext, SessionFacts } from "./context";
import { createPolicyEngine, type PolicyEngineOptions } from "./engine";
import { HOOKS } from "./hooks";
import type { PolicyRuleInput } from "./rule-schema";

const level = fc.constantFrom(...LEVELS);
const keys = [
  "agent:main:main",
  "agent:main:discord:group:dev",
  "agent:main:cron:nightly",
  "agent:research:main",
  "agent:research:subagent:kid",
  "agent:main:telegram:dm:42",
];

const session: fc.Arbitrary<SessionFacts> = fc
  .record({
    key: fc.constantFrom(...keys),
    kind: fc.constantFrom("main", "group", "cron", "subagent", "other" as const),
    channel: fc.constantFrom("discord", "telegram", "internal", "unknown"),
    chatType: fc.option(fc.constantFrom("direct", "group", "channel" as const), { nil: undefined }),
    taint: level,
    clearance: level,
    sandboxed: fc.option(fc.boolean(), { nil: undefined }),
    spawnedBy: fc.option(fc.constantFrom(...keys), { nil: undefined }),
    spawnDepth: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined }),
    sendPolicy: fc.option(fc.constantFrom("allow", "deny" as const), { nil: undefined }),
  })
  .map((facts) => ({ ...facts, agentId: facts.key.split(":")[1] as string }));

const context: fc.Arbitrary<PolicyContext> = fc.record(
  {
    hook: fc.constantFrom(...HOOKS),
    caller: session,
    target: session,
    tool: fc.record({
      name: fc.constantFrom("sessions_send", "message", "web_fetch"),
      args: fc.dictionary(fc.constantFrom("message", "timeoutSeconds"), fc.oneof(fc.string(), fc.integer())),
    }),
    recipient: fc.record({
      channel: fc.constantFrom("discord", "telegram"),
      to: fc.constantFrom("1", "42"),
      level,
    }),
    dataLabel: level,
    text: fc.constantFrom("hi", "sk-ABCDEFGHIJKLMNOPQRSTUVWX leaked", "bomb", ""),
    facts: fc.record(
      {
        hop: fc.integer({ min: 0, max: 6 }),
        activeChildren: fc.integer({ min: 0, max: 6 }),
        discovery: fc.boolean(),
        origin: fc.constantFrom("tool", "gateway" as const),
      },
      { requiredKeys: [] },
    ),
  },
  { requiredKeys: ["hook", "caller", "target", "recipient"] },
);

const rules: PolicyRuleInput[] = [
  { id: "keys", hook: "PRE_OUTPUT", priority: 5, action: "redact", redact: { patterns: ["sk-[A-Z]{20,}"] } },
  { id: "bombs", hook: "PRE_OUTPUT", action: "deny", when: { text: { matches: "bomb" } } },
  {
    id: "confidential-history",
    hook: "PRE_HISTORY",
    action: "deny",
    when: { "target.taint": { gte: "CONFIDENTIAL" } },
  },
  {
    id: "long-waits",
    hook: "PRE_TOOL_CALL",
    action: "deny",
    when: { "tool.args.timeoutSeconds": { gt: 100 } },
  },
  { id: "allow-cron", hook: "PRE_SEND", priority: 9, action: "allow", when: { "target.kind": "cron" } },
];

const options: PolicyEngineOptions = {
  rules,
  sendPolicy: { rules: [{ action: "deny", match: { channel: "discord", chatType: "group" } }] },
  agentToAgent: { enabled: true, allow: ["main"] },
  spawn: { main: { allowAgents: ["research"] } },
  now: () => 0,
};

describe("policy engine properties", () => {
  it("is deterministic and leaves its input untouched", () => {
    const engine = createPolicyEngine(options);
    fc.assert(
      fc.property(context, (ctx) => {
        const before = structuredClone(ctx);
        const first = engine.evaluate(ctx, { explain: true });
        const again = engine.evaluate(ctx, { explain: true });
        const fresh = createPolicyEngine(options).evaluate(structuredClone(ctx), { explain: true });
        expect(again).toEqual(first);
        expect(fresh).toEqual(first);
        expect(ctx).toEqual(before);
      }),
      { numRuns: 300 },
    );
  });

  it("no allow rule lets data cross a flow boundary", () => {
    const permissive = createPolicyEngine({
      ...options,
      rules: HOOKS.map((hook) => ({ id: `allow-${hook}`, hook, priority: 1000, action: "allow" as const })),
      agentToAgent: { enabled: true },
      spawn: () => ({ allowAgents: ["*"], maxSpawnDepth: 10, maxChildren: 100 }),
      sendPolicy: undefined,
    });
    fc.assert(
      fc.property(context, (ctx) => {
        const decision = permissive.evaluate(ctx);
        const caller = ctx.caller as SessionFacts;
        const target = ctx.target as SessionFacts;
        const outgoing = maxLevel(caller.taint, ctx.dataLabel ?? "PUBLIC");
        if (decision.action === "BLOCK") return;
        if (ctx.hook === "PRE_SEND" || ctx.hook === "PRE_SPAWN") {
          expect(canFlowTo(outgoing, target.clearance)).toBe(true);
          expect(decision.labels.targetAfter).toBe(maxLevel(target.taint, outgoing));
        }
        if (ctx.hook === "PRE_OUTPUT")
          expect(canFlowTo(outgoing, ctx.recipient?.level ?? "PUBLIC")).toBe(true);
        if (ctx.hook === "PRE_HISTORY" || ctx.hook === "PRE_TOOL_CALL") {
          expect(
            canFlowTo(decision.labels.after, caller.clearance) || decision.labels.after === caller.taint,
          ).toBe(true);
        }
        // Taint never goes down through a decision.
        expect(canFlowTo(decision.labels.before, decision.labels.after)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
