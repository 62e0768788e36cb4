import { z } from "zod";
import { intAtLeast, nonEmptyString, regexString, requiredOr } from "./schema-helpers";

/** One tool call of a scripted turn; string args are templates (`$1`, `{{message}}`, `{{result.x}}`). */
export const ScriptedToolCallSchema = z.strictObject({
  tool: nonEmptyString("a tool name"),
  args: z.record(z.string(), z.unknown(), { error: "must be an object of tool arguments" }).default({}),
});
export type ScriptedToolCall = z.infer<typeof ScriptedToolCallSchema>;

export const SCRIPTED_PROVENANCES = ["user", "agent", "subagent"] as const;

/**
 * One rule of the scripted model (agent-app.md). Rules are tried in order; the first whose conditions
 * (`when`, `context`, `provenance`) all hold produces the turn. Regexes are checked here, so a bad one
 * fails config load with its path.
 */
export const ScriptedRuleSchema = z
  .strictObject({
    when: regexString().optional(),
    context: regexString().optional(),
    provenance: z.enum(SCRIPTED_PROVENANCES).optional(),
    call: z
      .union([ScriptedToolCallSchema, z.array(ScriptedToolCallSchema).min(1, { error: "must not be empty" })])
      .optional(),
    reply: z.string({ error: "must be a string (a reply template)" }).optional(),
    delayMs: intAtLeast(0).optional(),
    fail: nonEmptyString("a non-empty error message").optional(),
  })
  .superRefine((rule, ctx) => {
    if (rule.reply === undefined && rule.call === undefined && rule.fail === undefined) {
      ctx.addIssue({ code: "custom", message: 'a rule needs "reply", "call" or "fail"', input: rule });
    }
  });
export type ScriptedRule = z.infer<typeof ScriptedRuleSchema>;
export type ScriptedRuleInput = z.input<typeof ScriptedRuleSchema>;

export const ScriptedRulesSchema = z.array(ScriptedRuleSchema, {
  error: requiredOr("must be a list of scripted rules"),
});

/** The content of a rules file (JSON or YAML) named by `model.rules`. */
export const ScriptedRulesFileSchema = z.strictObject({ rules: ScriptedRulesSchema });
export type ScriptedRulesFile = z.infer<typeof ScriptedRulesFileSchema>;

/**
 * Rules of an agent configured with `{provider: "scripted"}` and no rules: answers `ping`, stays
 * silent in agent-to-agent reply/announce steps (so two default agents never loop), echoes the rest.
 */
export const DEFAULT_SCRIPTED_RULES: readonly ScriptedRule[] = Object.freeze([
  { when: "^ping$", reply: "pong" },
  { context: "Agent-to-agent reply step", reply: "REPLY_SKIP" },
  { context: "Agent-to-agent announce step", reply: "ANNOUNCE_SKIP" },
  { reply: "echo: {{message}}" },
]);

export function defaultScriptedRules(): ScriptedRule[] {
  return DEFAULT_SCRIPTED_RULES.map((rule) => ({ ...rule }));
}
