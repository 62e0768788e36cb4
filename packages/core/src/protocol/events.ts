import { z } from "zod";
import { AgentModelConfigSchema } from "../config/model-config";
import { LevelSchema } from "../labels/level";
import { LaneSchema, UsageSchema } from "../store/run-record";
import { ProvenanceSchema } from "../store/transcript-entry";
import { HistoryMessageSchema, ToolDefinitionSchema } from "../tools/tool-schemas";

export const RunInputSchema = z.object({
  message: z.string(),
  provenance: ProvenanceSchema,
  /** Injected context text (a2a context block, sub-agent system context); empty for plain user input. */
  context: z.string(),
});
export type RunInput = z.infer<typeof RunInputSchema>;

/** Every event's payload (protocol.md). */
export const Events = {
  "run.assigned": z.object({
    runId: z.string(),
    sessionKey: z.string(),
    agentId: z.string(),
    lane: LaneSchema,
    input: RunInputSchema,
    history: z.array(HistoryMessageSchema),
    tools: z.array(ToolDefinitionSchema),
    /**
     * The model to run with, when not the agent's own: a model name on the agent's provider, or a full
     * model config (a sub-agent's `subagents.model` object).
     */
    model: z.union([z.string(), AgentModelConfigSchema]).optional(),
    /** W3C trace context of the run's span (telemetry on), so a worker's own spans join the trace. */
    traceparent: z
      .string()
      .regex(/^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/, {
        error: "must be a W3C traceparent (version-traceid-spanid-flags, lower-case hex)",
      })
      .optional(),
    /** ms epoch after which the gateway ends the run as `timeout`. */
    deadline: z.number().optional(),
    attempt: z.number().int().positive().optional(),
  }),
  "run.started": z.object({
    runId: z.string(),
    sessionKey: z.string(),
    agentId: z.string(),
    lane: LaneSchema,
    startedAt: z.number(),
  }),
  "run.progress": z.object({
    runId: z.string(),
    sessionKey: z.string(),
    kind: z.enum(["text-delta", "tool-call", "tool-result"]),
    text: z.string().optional(),
    name: z.string().optional(),
    toolCallId: z.string().optional(),
  }),
  "run.ended": z.object({
    runId: z.string(),
    sessionKey: z.string(),
    status: z.enum(["ok", "error", "timeout"]),
    reply: z.string().optional(),
    error: z.string().optional(),
    /** The label the reply or error carries (the session's taint when its worker ended the run). */
    label: LevelSchema.optional(),
    usage: UsageSchema.optional(),
    /** When the run started (absent for a run that ended before a worker took it) and ended. */
    startedAt: z.number().optional(),
    endedAt: z.number().optional(),
  }),
  "session.updated": z.object({ key: z.string(), sessionId: z.string(), reason: z.string() }),
  "session.taint": z.object({ key: z.string(), from: LevelSchema, to: LevelSchema, reason: z.string() }),
  delivery: z.object({
    sessionKey: z.string(),
    channel: z.string(),
    to: z.string(),
    text: z.string(),
    deliveryId: z.string(),
  }),
  "policy.blocked": z.object({
    hook: z.string(),
    ruleId: z.string().nullable(),
    message: z.string(),
    sessionKey: z.string().optional(),
    target: z.string().optional(),
  }),
  "audit.appended": z.object({ index: z.number(), kind: z.string(), sessionKey: z.string().optional() }),
} as const satisfies Record<string, z.ZodType>;

export type EventName = keyof typeof Events;
export type EventPayload<E extends EventName> = z.infer<(typeof Events)[E]>;
export const EVENT_NAMES = Object.keys(Events) as EventName[];
