import { z } from "zod";
import { SESSION_KINDS } from "../keys/classify";
import { LevelSchema } from "../labels/level";
import { InputTextSchema } from "../protocol/input-text";
import { DeliveryContextSchema } from "../store/session-entry";
import { ProvenanceSchema } from "../store/transcript-entry";
import {
  HISTORY_LIMIT,
  type IntegerRange,
  SEND_TIMEOUT_SECONDS,
  SESSIONS_LIST_LIMIT,
  SESSIONS_LIST_MESSAGE_LIMIT,
  SPAWN_LABEL_MAX_LENGTH,
} from "./tool-limits";

/** "default 50, 1..200": the range as the model reads it, from the one definition of the limit. */
function rangeText(range: IntegerRange): string {
  return `default ${range.default}, ${range.min}..${range.max}`;
}

/**
 * Parameters and results of the session tools (tools.md). Param schemas use only plain JSON types
 * (no top-level unions) so every model provider accepts their JSON Schema; clamping happens in the
 * executors, so out-of-range numbers are clamped rather than refused.
 */

export const TOOL_NAMES = [
  "sessions_list",
  "sessions_history",
  "sessions_send",
  "sessions_spawn",
  "session_status",
  "agents_list",
  "message",
  "simulate_tool_call",
  "summarize",
] as const;
export const ToolNameSchema = z.enum(TOOL_NAMES);
export type ToolName = z.infer<typeof ToolNameSchema>;

const TOOL_NAME_SET: ReadonlySet<string> = new Set(TOOL_NAMES);
/** One of the gateway's own tools (a worker may run and report others). */
export function isToolName(name: string): name is ToolName {
  return TOOL_NAME_SET.has(name);
}

export const ToolStatusSchema = z.enum(["ok", "accepted", "timeout", "error", "forbidden", "not_found"]);
export type ToolStatus = z.infer<typeof ToolStatusSchema>;

export const SessionsListParamsSchema = z.object({
  kinds: z
    .array(z.string())
    .optional()
    .describe(`Session kinds to include: ${SESSION_KINDS.join(", ")}`),
  limit: z
    .number()
    .optional()
    .describe(`Maximum rows (${rangeText(SESSIONS_LIST_LIMIT)})`),
  activeMinutes: z.number().optional().describe("Only sessions updated within this many minutes"),
  messageLimit: z
    .number()
    .optional()
    .describe(
      `Include the last N messages of each session (default ${SESSIONS_LIST_MESSAGE_LIMIT.default}, max ${SESSIONS_LIST_MESSAGE_LIMIT.max})`,
    ),
});

export const SessionsHistoryParamsSchema = z.object({
  sessionKey: z.string().describe("Session key, alias (main) or sessionId"),
  limit: z
    .number()
    .optional()
    .describe(`Maximum messages (${rangeText(HISTORY_LIMIT)})`),
  includeTools: z.boolean().optional().describe("Include tool results (default false)"),
  before: z
    .number()
    .optional()
    .describe("Return only messages with seq below this cursor (paging backwards)"),
});

export const SessionsSendParamsSchema = z.object({
  sessionKey: z.string().describe("Target session key, alias or sessionId"),
  message: InputTextSchema.describe("The message to deliver"),
  timeoutSeconds: z
    .number()
    .optional()
    .describe(
      `Seconds to wait for the reply (default ${SEND_TIMEOUT_SECONDS.default}, 0 = do not wait, max ${SEND_TIMEOUT_SECONDS.max})`,
    ),
});

export const SessionsSpawnParamsSchema = z.object({
  task: InputTextSchema.describe("What the sub-agent should do"),
  label: z
    .string()
    .optional()
    .describe(`Short label for the sub-agent session (max ${SPAWN_LABEL_MAX_LENGTH} chars)`),
  agentId: z.string().optional().describe("Agent to run the sub-agent as (default: your own agent)"),
  model: z.string().optional().describe("Model override for the sub-agent"),
  runTimeoutSeconds: z
    .number()
    .optional()
    .describe("Run timeout in seconds (default 0: the run timeout of that agent)"),
  cleanup: z
    .string()
    .optional()
    .describe('"delete" removes the sub-agent session after it reports; "keep" (default) archives it later'),
});

export const SessionStatusParamsSchema = z.object({
  sessionKey: z.string().optional().describe("Session to inspect (default: your own)"),
});

export const AgentsListParamsSchema = z.object({});

export const MessageParamsSchema = z.object({
  channel: z.string().describe("Channel to post to, e.g. telegram"),
  to: z.string().describe("Recipient or chat id on that channel"),
  text: InputTextSchema.describe("Text to deliver"),
});

export const SimulateToolCallParamsSchema = z.object({
  tool_name: z.string().describe("The tool whose call to simulate"),
  args: z.record(z.string(), z.unknown()).optional().describe("The arguments of that call"),
});

export const SummarizeParamsSchema = z.object({
  scope: z.string().optional().describe('"session" (default) or "topic"'),
  sessionKey: z.string().optional().describe("Session to summarise (default: your own)"),
});

export const TOOL_PARAM_SCHEMAS = {
  sessions_list: SessionsListParamsSchema,
  sessions_history: SessionsHistoryParamsSchema,
  sessions_send: SessionsSendParamsSchema,
  sessions_spawn: SessionsSpawnParamsSchema,
  session_status: SessionStatusParamsSchema,
  agents_list: AgentsListParamsSchema,
  message: MessageParamsSchema,
  simulate_tool_call: SimulateToolCallParamsSchema,
  summarize: SummarizeParamsSchema,
} as const satisfies Record<ToolName, z.ZodObject>;

export type ToolParams<N extends ToolName> = z.infer<(typeof TOOL_PARAM_SCHEMAS)[N]>;

// ---- results -------------------------------------------------------------------------------

/** Every tool failure has this shape: tools never throw at the model. */
export const ToolFailureSchema = z.object({
  status: z.enum(["error", "forbidden", "not_found", "timeout"]),
  error: z.string(),
});
export type ToolFailure = z.infer<typeof ToolFailureSchema>;

/**
 * The classification of the data a result carries from another session (its taint when the data was
 * taken). Taking the result in raised the caller's taint to it; data above the caller's clearance is
 * withheld instead, and `withheld` says why (labels-and-policy.md, no read-up).
 */
const DataLabelFields = {
  dataLabel: LevelSchema.optional(),
  withheld: z.string().optional(),
};

export const HistoryMessageSchema = z.object({
  seq: z.number(),
  id: z.string(),
  ts: z.number(),
  role: z.string(),
  content: z.array(z.record(z.string(), z.unknown())),
  label: LevelSchema,
  provenance: ProvenanceSchema.optional(),
  /** Set on a copy cut to fit the page: the full message's size in bytes of JSON. */
  clipped: z.object({ bytes: z.number() }).optional(),
});
export type HistoryMessage = z.infer<typeof HistoryMessageSchema>;

export const SessionRowSchema = z.object({
  key: z.string(),
  kind: z.string(),
  channel: z.string(),
  displayName: z.string().optional(),
  label: z.string().optional(),
  updatedAt: z.number(),
  sessionId: z.string(),
  agentId: z.string(),
  model: z.string().optional(),
  contextTokens: z.number().optional(),
  totalTokens: z.number().optional(),
  thinkingLevel: z.string().optional(),
  verboseLevel: z.string().optional(),
  systemSent: z.boolean().optional(),
  abortedLastRun: z.boolean().optional(),
  sendPolicy: z.enum(["allow", "deny"]).optional(),
  lastChannel: z.string().optional(),
  lastTo: z.string().optional(),
  deliveryContext: DeliveryContextSchema.optional(),
  taint: LevelSchema,
  clearance: LevelSchema,
  spawnedBy: z.string().optional(),
  transcriptPath: z.string(),
  messages: z.array(HistoryMessageSchema).optional(),
});
export type SessionRow = z.infer<typeof SessionRowSchema>;

export const SessionsListResultSchema = z.object({
  status: z.literal("ok"),
  count: z.number(),
  sessions: z.array(SessionRowSchema),
  hidden: z.number(),
  dataLabel: LevelSchema.optional(),
});
export type SessionsListResult = z.infer<typeof SessionsListResultSchema>;

export const SessionsHistoryResultSchema = z.object({
  status: z.literal("ok"),
  sessionKey: z.string(),
  sessionId: z.string(),
  messages: z.array(HistoryMessageSchema),
  nextBefore: z.number().optional(),
  truncated: z.boolean(),
  /** Lines of the page's range that were damaged on disk and skipped (`switchboard doctor` names them). */
  damaged: z.number().int().positive().optional(),
  dataLabel: LevelSchema.optional(),
});
export type SessionsHistoryResult = z.infer<typeof SessionsHistoryResultSchema>;

export const DeliveryStatusSchema = z.object({ status: z.enum(["delivered", "queued"]) });

export const SessionsSendResultSchema = z.union([
  z.object({
    status: z.literal("accepted"),
    runId: z.string(),
    sessionKey: z.string(),
    delivery: DeliveryStatusSchema,
  }),
  z.object({
    status: z.literal("ok"),
    runId: z.string(),
    sessionKey: z.string(),
    reply: z.string(),
    delivery: DeliveryStatusSchema,
    ...DataLabelFields,
  }),
  z.object({
    status: z.enum(["timeout", "error"]),
    runId: z.string(),
    sessionKey: z.string().optional(),
    /** A failed run's error is the target's data, labelled (and withheld) like a reply. */
    error: z.string(),
    delivery: DeliveryStatusSchema,
    ...DataLabelFields,
  }),
  ToolFailureSchema,
]);
export type SessionsSendResult = z.infer<typeof SessionsSendResultSchema>;

export const SessionsSpawnResultSchema = z.union([
  z.object({
    status: z.literal("accepted"),
    runId: z.string(),
    childSessionKey: z.string(),
    modelApplied: z.boolean().optional(),
    warning: z.string().optional(),
  }),
  ToolFailureSchema,
]);
export type SessionsSpawnResult = z.infer<typeof SessionsSpawnResultSchema>;

export const SessionStatusResultSchema = z.object({
  status: z.literal("ok"),
  sessionKey: z.string(),
  sessionId: z.string(),
  kind: z.string(),
  channel: z.string(),
  agentId: z.string(),
  taint: LevelSchema,
  clearance: LevelSchema,
  createdAt: z.number(),
  updatedAt: z.number(),
  model: z.string().optional(),
  totalTokens: z.number().optional(),
  sendPolicy: z.enum(["allow", "deny"]).optional(),
  spawnedBy: z.string().optional(),
  label: z.string().optional(),
  displayName: z.string().optional(),
  dataLabel: LevelSchema.optional(),
  activeRun: z.object({ runId: z.string(), lane: z.string(), startedAt: z.number() }).optional(),
  /** Runs waiting in the session's lanes (e.g. no worker for its agent is connected). */
  queuedRuns: z.number().optional(),
  children: z
    .array(
      z.object({
        key: z.string(),
        runId: z.string().optional(),
        status: z.string(),
        label: z.string().optional(),
      }),
    )
    .optional(),
});
export type SessionStatusResult = z.infer<typeof SessionStatusResultSchema>;

export const AgentsListResultSchema = z.object({
  status: z.literal("ok"),
  agents: z.array(
    z.object({
      id: z.string(),
      name: z.string().optional(),
      configured: z.boolean(),
      connected: z.boolean(),
      allowedForSpawn: z.boolean(),
    }),
  ),
});
export type AgentsListResult = z.infer<typeof AgentsListResultSchema>;

export const MessageResultSchema = z.union([
  z.object({ status: z.literal("ok"), deliveryId: z.string(), redactions: z.number().optional() }),
  ToolFailureSchema,
]);
export type MessageResult = z.infer<typeof MessageResultSchema>;

export const EvaluatedRuleSchema = z.object({ ruleId: z.string(), matched: z.boolean(), action: z.string() });

export const SimulateResultSchema = z.object({
  status: z.literal("ok"),
  decision: z.enum(["ALLOW", "BLOCK", "REDACT"]),
  ruleId: z.string().nullable(),
  message: z.string(),
  evaluated: z.array(EvaluatedRuleSchema),
  taint: z.object({ current: LevelSchema, after: LevelSchema }),
});
export type SimulateResult = z.infer<typeof SimulateResultSchema>;

export const SummarizeResultSchema = z.union([
  z.object({ status: z.literal("ok"), summary: z.string(), ...DataLabelFields }),
  /** The summary run failed: its error is the session's data, labelled (and withheld) like a summary. */
  z.object({ status: z.literal("error"), error: z.string(), ...DataLabelFields }),
  ToolFailureSchema,
]);
export type SummarizeResult = z.infer<typeof SummarizeResultSchema>;

/** Any tool's result: a JSON object with a `status`. */
export const ToolResultSchema = z.looseObject({ status: ToolStatusSchema });
export type ToolResult = z.infer<typeof ToolResultSchema>;

/** A tool definition as handed to a model (tools.list, run.assigned). */
export const ToolDefinitionSchema = z.object({
  name: z.string(),
  description: z.string(),
  parameters: z.record(z.string(), z.unknown()),
});
export type ToolDefinition = z.infer<typeof ToolDefinitionSchema>;
