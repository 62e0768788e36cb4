import { z } from "zod";
import { templateProblems, templateStrings } from "./template";

/** A rule's `call` list is capped so a script always fits the run loop's tool-round limit. */
export const MAX_SCRIPTED_CALLS = 8;

const RegexSourceSchema = z.string().superRefine((source, ctx) => {
  try {
    new RegExp(source);
  } catch (error) {
    ctx.addIssue({ code: "custom", message: `invalid regular expression: ${(error as Error).message}` });
  }
});

/** YAML turns `reply: 42` into a number; a reply is text, so scalars are accepted and stringified. */
const TextSchema = z.union([z.string(), z.number(), z.boolean()]).transform((value) => String(value));

export const ScriptedToolCallSchema = z.strictObject({
  tool: z.string().min(1, "must name a tool"),
  args: z.record(z.string(), z.unknown()).default({}),
});
export type ScriptedToolCall = z.infer<typeof ScriptedToolCallSchema>;

export const ScriptedProvenanceSchema = z.enum(["user", "agent", "subagent", "operator", "system"]);

export const ScriptedRuleSchema = z
  .strictObject({
    when: RegexSourceSchema.optional().describe("Regex over the run's incoming message; captures are $1, $2…"),
    context: RegexSourceSchema.optional().describe("Regex over the run's injected context text"),
    provenance: ScriptedProvenanceSchema.optional().describe("Only match messages of this origin"),
    call: z
      .union([
        ScriptedToolCallSchema,
        z.array(ScriptedToolCallSchema).min(1).max(MAX_SCRIPTED_CALLS, `at most ${MAX_SCRIPTED_CALLS} calls`),
      ])
      .optional()
      .describe("Tool call(s) made before replying, in order; args are templates"),
    reply: TextSchema.optional().describe("Reply template"),
    delayMs: z.number().int().min(0).max(3_600_000).optional().describe("Simulated thinking time"),
    fail: TextSchema.optional().describe("End the run with this error (after any calls)"),
  })
  .superRefine((rule, ctx) => {
    if (rule.reply === undefined && rule.fail === undefined) {
      ctx.addIssue({ code: "custom", message: "a rule needs a reply or a fail" });
    }
    if (rule.reply !== undefined && rule.fail !== undefined) {
      ctx.addIssue({ code: "custom", message: "reply and fail cannot both be set", path: ["fail"] });
    }
    const checkTemplates = (value: unknown, path: (string | number)[]) => {
      for (const template of templateStrings(value)) {
        for (const message of templateProblems(template)) ctx.addIssue({ code: "custom", message, path });
      }
    };
    checkTemplates(rule.reply, ["reply"]);
    checkTemplates(rule.fail, ["fail"]);
    const calls = rule.call === undefined ? [] : Array.isArray(rule.call) ? rule.call : [rule.call];
    calls.forEach((call, index) =>
      checkTemplates(call.args, Array.isArray(rule.call) ? ["call", index, "args"] : ["call", "args"]),
    );
  });
export type ScriptedRule = z.infer<typeof ScriptedRuleSchema>;
export type ScriptedRuleInput = z.input<typeof ScriptedRuleSchema>;

export const ScriptedRulesSchema = z.array(ScriptedRuleSchema);

/**
 * Rules used when an agent has no model configured: the agent-to-agent steps stay silent (so a
 * ping-pong between two echo agents ends at once) and everything else is echoed.
 */
export const DEFAULT_SCRIPTED_RULES: readonly ScriptedRuleInput[] = [
  { context: "Agent-to-agent reply step", reply: "REPLY_SKIP" },
  { context: "Agent-to-agent announce step", reply: "ANNOUNCE_SKIP" },
  { reply: "echo: {{message}}" },
];
