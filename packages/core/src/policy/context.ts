import { z } from "zod";
import { ChatTypeSchema, SessionKindSchema, UNKNOWN_CHAT_TYPE } from "../keys/classify";
import { LevelSchema } from "../labels/level";
import { type Hook, HookSchema } from "./hooks";

/** What the policy engine knows about one session. Plain data the gateway fills from the index. */
export const SessionFactsSchema = z.object({
  key: z.string(),
  agentId: z.string(),
  kind: SessionKindSchema,
  channel: z.string(),
  chatType: ChatTypeSchema.optional(),
  taint: LevelSchema,
  clearance: LevelSchema,
  sandboxed: z.boolean().optional(),
  /** Key of the session that spawned this one. */
  spawnedBy: z.string().optional(),
  /** 0 for ordinary sessions, 1 for a sub-agent, 2 for a sub-agent's sub-agent… */
  spawnDepth: z.number().int().nonnegative().optional(),
  /** Per-session send-policy override; unset = inherit `session.sendPolicy`. */
  sendPolicy: z.enum(["allow", "deny"]).optional(),
  /** The session's delivery recipient (`lastTo`), matched by send-policy `match.to`. */
  to: z.string().optional(),
});
export type SessionFacts = z.infer<typeof SessionFactsSchema>;

export const ToolFactsSchema = z.object({
  name: z.string(),
  args: z.record(z.string(), z.unknown()),
});
export type ToolFacts = z.infer<typeof ToolFactsSchema>;

/** An outside destination on PRE_OUTPUT. */
export const RecipientFactsSchema = z.object({
  channel: z.string(),
  to: z.string().optional(),
  /** `channelLevel(labels, channel, to)`. */
  level: LevelSchema,
  /**
   * Chat type of the destination: absent, it is the caller's (the session's own route); `unknown`
   * for a destination the gateway cannot classify (the `message` tool to another recipient), which
   * a send-policy `deny` rule naming a chat type matches and an `allow` rule does not.
   */
  chatType: z.union([ChatTypeSchema, z.literal(UNKNOWN_CHAT_TYPE)]).optional(),
});
export type RecipientFacts = z.infer<typeof RecipientFactsSchema>;

/**
 * Facts only the gateway can compute (they need the store or the run registry). Each built-in
 * reads the ones it needs and skips a check whose fact is absent, so the gateway must fill them
 * for the hooks named below.
 */
export const PolicyFactsSchema = z.object({
  /**
   * Who initiates the step. `tool` (default): a session acting through a session tool or method.
   * `gateway`: the gateway's own follow-up steps (reply-back turns, announces); they skip the
   * addressing checks (send-policy, a2a, visibility on PRE_SEND/PRE_HISTORY) because the step they
   * continue already passed them; the flow rules still apply.
   */
  origin: z.enum(["tool", "gateway"]).optional(),
  /**
   * PRE_HISTORY for `sessions_list` rows: discovery without escalation. The row is shown only when
   * the target's taint <= the caller's *current* taint and its clearance (`discoveryCeiling`), and
   * the caller's taint does not rise.
   */
  discovery: z.boolean().optional(),
  /** PRE_SPAWN: active (not yet ended) children of the requester; `maxChildren` checks it. */
  activeChildren: z.number().int().nonnegative().optional(),
  /** PRE_SEND: hop number the new agent-to-agent message would carry (first send = 1). */
  hop: z.number().int().nonnegative().optional(),
  /**
   * PRE_SEND / PRE_SPAWN from a tool: how many sends (or spawns) the caller started in the last
   * minute; `a2a.budget` refuses the call when it reached `session.agentToAgent.budgetPerMinute`.
   */
  budgetUsed: z.number().int().nonnegative().optional(),
  /** PRE_SEND: the chain this message belongs to (for messages only). */
  chainId: z.string().optional(),
  /**
   * PRE_SEND with a wait: the keys of the waiting chain that the send would close into a cycle
   * (e.g. `[A, B, A]`); present and non-empty means "refuse as a cycle".
   */
  cycle: z.array(z.string()).optional(),
});
export type PolicyFacts = z.infer<typeof PolicyFactsSchema>;

/**
 * Everything one hook evaluation sees. `caller` is the acting session (for PRE_OUTPUT: the session
 * whose text goes out); it is absent for operator/client input (`chat.send`, `agent`), which then
 * carries its label in `dataLabel`. `target` is the other session (PRE_SPAWN: the child to be
 * created). `dataLabel` is the label of the data moving when it is not simply a session's taint
 * (a tool's result label on PRE_TOOL_CALL, an inbound message's label).
 */
export const PolicyContextSchema = z.object({
  hook: HookSchema,
  caller: SessionFactsSchema.optional(),
  target: SessionFactsSchema.optional(),
  tool: ToolFactsSchema.optional(),
  recipient: RecipientFactsSchema.optional(),
  dataLabel: LevelSchema.optional(),
  text: z.string().optional(),
  /**
   * PRE_HISTORY: the texts a read hands over (each text part of each message, a reply, a summary),
   * rewritten one by one by matching redact rules. Not a condition field: rules decide on the read.
   */
  texts: z.array(z.string()).optional(),
  facts: PolicyFactsSchema.optional(),
});
export type PolicyContext = z.infer<typeof PolicyContextSchema>;

/** Dotted paths a rule condition may name; `tool.args.<name…>` is open-ended. */
export const CONDITION_FIELDS: readonly string[] = [
  "hook",
  "dataLabel",
  "text",
  "tool.name",
  "tool.args",
  ...Object.keys(SessionFactsSchema.shape).flatMap((field) => [`caller.${field}`, `target.${field}`]),
  ...Object.keys(RecipientFactsSchema.shape).map((field) => `recipient.${field}`),
  ...Object.keys(PolicyFactsSchema.shape).map((field) => `facts.${field}`),
];

const isLevelSchema = (schema: z.ZodType): boolean =>
  schema === LevelSchema || (schema instanceof z.ZodOptional && schema.unwrap() === LevelSchema);

/** Condition fields holding a level: compared as levels, so only level names make sense there. */
export const LEVEL_CONDITION_FIELDS: ReadonlySet<string> = new Set([
  "dataLabel",
  ...Object.entries(SessionFactsSchema.shape)
    .filter(([, schema]) => isLevelSchema(schema))
    .flatMap(([field]) => [`caller.${field}`, `target.${field}`]),
  ...Object.entries(RecipientFactsSchema.shape)
    .filter(([, schema]) => isLevelSchema(schema))
    .map(([field]) => `recipient.${field}`),
]);

/** The values a fact of this schema can take, when they are a short closed set (enums, booleans). */
function closedValues(schema: z.ZodType): readonly unknown[] | undefined {
  let inner: z.ZodType = schema;
  while (inner instanceof z.ZodOptional || inner instanceof z.ZodNullable)
    inner = inner.unwrap() as z.ZodType;
  if (inner instanceof z.ZodEnum) return inner.options;
  if (inner instanceof z.ZodBoolean) return [true, false];
  if (inner instanceof z.ZodLiteral) return [...inner.values];
  if (inner instanceof z.ZodUnion) {
    const parts = (inner.options as z.ZodType[]).map(closedValues);
    return parts.every((part) => part !== undefined) ? parts.flat() : undefined;
  }
  return undefined;
}

/**
 * Condition fields (other than levels) whose facts take a closed set of values: a condition naming
 * any other value (`gruop`, the string `"false"`) never matches, so a rule with it is refused.
 */
export const CLOSED_CONDITION_FIELDS: ReadonlyMap<string, readonly unknown[]> = new Map(
  [
    ...Object.entries(SessionFactsSchema.shape).flatMap(([field, schema]) => [
      [`caller.${field}`, schema] as const,
      [`target.${field}`, schema] as const,
    ]),
    ...Object.entries(RecipientFactsSchema.shape).map(
      ([field, schema]) => [`recipient.${field}`, schema] as const,
    ),
    ...Object.entries(PolicyFactsSchema.shape).map(([field, schema]) => [`facts.${field}`, schema] as const),
  ]
    .filter(([, schema]) => !isLevelSchema(schema as z.ZodType))
    .flatMap(([field, schema]) => {
      const values = closedValues(schema as z.ZodType);
      return values ? [[field, values] as const] : [];
    }),
);

/**
 * The parts of the context each hook's evaluations carry, as the gateway builds them: a condition on
 * another part reads nothing there, so it never matches (or, with `not` or `null`, always does).
 * `dataLabel` is allowed everywhere (absent where no data moves apart from a session's taint).
 */
export const HOOK_CONTEXT_PARTS: Readonly<Record<Hook, readonly string[]>> = {
  PRE_TOOL_CALL: ["caller", "tool", "dataLabel"],
  PRE_SEND: ["caller", "target", "text", "facts", "dataLabel"],
  PRE_HISTORY: ["caller", "target", "facts", "dataLabel"],
  PRE_SPAWN: ["caller", "target", "text", "facts", "dataLabel"],
  PRE_OUTPUT: ["caller", "recipient", "text", "dataLabel"],
};

/** Why a condition on `field` can never apply on `hook`, or undefined. */
export function hookFieldProblem(hook: Hook, field: string): string | undefined {
  const part = field.split(".")[0]!;
  if (part === "hook" || HOOK_CONTEXT_PARTS[hook].includes(part)) return undefined;
  return `${hook} carries no ${part} (it has ${HOOK_CONTEXT_PARTS[hook].join(", ")}): the condition would never apply`;
}

/** Channel facts are lower-cased before rules see them: a condition with capitals never matches. */
export const LOWER_CASE_CONDITION_FIELDS: ReadonlySet<string> = new Set([
  "caller.channel",
  "target.channel",
  "recipient.channel",
]);

const FIELD_SEGMENT = /^[A-Za-z0-9_-]+$/;

/** Why a condition field is not usable, or undefined when it is. */
export function conditionFieldProblem(field: string): string | undefined {
  const segments = field.split(".");
  if (!segments.every((segment) => FIELD_SEGMENT.test(segment))) {
    return "must be a dotted path of names, e.g. caller.agentId";
  }
  if (CONDITION_FIELDS.includes(field)) return undefined;
  if (field.startsWith("tool.args.")) return undefined;
  return `unknown field; use one of ${CONDITION_FIELDS.join(", ")} or tool.args.<name>`;
}
