import { z } from "zod";
import { ERROR_CODES } from "../errors";
import { LevelSchema } from "../labels/level";
import { LaneSchema, RunStatusSchema, UsageSchema } from "../store/run-record";
import { SessionEntrySchema } from "../store/session-entry";
import {
  EvaluatedRuleSchema,
  SessionRowSchema,
  SessionStatusResultSchema,
  SessionsHistoryParamsSchema,
  SessionsHistoryResultSchema,
  SessionsListParamsSchema,
  SimulateResultSchema,
  ToolDefinitionSchema,
} from "../tools/tool-schemas";
import { InputTextSchema, ReplyTextSchema } from "./input-text";
import { ToolArgsSchema, ToolResultValueSchema } from "./json-depth";

/** `mcp`: a token bound to one session, used by the stdio MCP bridge (only the tool methods, as that session). */
export const RoleSchema = z.enum(["operator", "agent", "client", "mcp"]);
export type Role = z.infer<typeof RoleSchema>;

const SessionKeyParam = z.string().min(1).max(512);
/** Run ids are UUIDs the gateway makes: a longer one names no run, and is not carried further. */
const RunIdParam = z.string().min(1).max(128);
const ToolNameParam = z.string().min(1).max(128);
const ChatTypeParam = z.enum(["direct", "group", "channel"]);
/** Sessions one connection may follow by key (`events.subscribe`); all events is one more. */
export const MAX_SUBSCRIPTIONS_PER_CONNECTION = 1_000;

export const ConnectParamsSchema = z.object({
  protocol: z.literal(1, { error: "must be 1 (the only protocol version this gateway speaks)" }),
  client: z.object({ name: z.string().min(1).max(128), version: z.string().max(64) }),
  auth: z.object({ token: z.string().min(1).max(4096) }),
  role: RoleSchema,
  agents: z.array(z.string().min(1).max(64)).max(256).optional(),
  /**
   * Role agent: the most runs the worker executes at once. The gateway never holds more of its runs
   * active and keeps the rest queued on the gateway (where they survive a restart), instead of
   * letting them pile up in the worker's memory. Absent: no limit (the behaviour before the field).
   */
  concurrency: z
    .number({ error: "must be a whole number from 1 to 1024" })
    .int({ error: "must be a whole number from 1 to 1024" })
    .min(1, { error: "must be a whole number from 1 to 1024" })
    .max(1024, { error: "must be a whole number from 1 to 1024" })
    .optional(),
  sessionKey: SessionKeyParam.optional(),
});
export type ConnectParams = z.infer<typeof ConnectParamsSchema>;

export const LimitsSchema = z.object({
  maxPayload: z.number().int().positive(),
  maxBufferedBytes: z.number().int().positive(),
  heartbeatMs: z.number().int().positive(),
});

export const ConnectResultSchema = z.object({
  protocol: z.literal(1),
  server: z.object({
    name: z.literal("switchboard"),
    version: z.string(),
    /**
     * The gateway's epoch: a new id on every start. Event `seq` keeps increasing across epochs, but
     * the replay window does not survive one, so a client seeing a new id resumes from the start of
     * the new epoch's window rather than trusting a cursor from the old one.
     */
    instanceId: z.string(),
    /**
     * The event stream's epoch: what a client resumes by. Several instances on one database share
     * one stream (one seq order, replay from the database), so they send the same epoch while their
     * instance ids differ; a single process sends its instance id. Absent: older gateways, use
     * `instanceId`.
     */
    epoch: z.string().optional(),
  }),
  connectionId: z.string(),
  /**
   * The event stream's position at the handshake (the `seq` of the last event numbered). A client
   * whose first `events.subscribe` is lost to a drop resumes from it (`after`), so the events between
   * the lost call and its retry are replayed instead of skipped. Absent: older gateways.
   */
  seq: z.number().int().min(0).optional(),
  role: RoleSchema,
  methods: z.array(z.string()),
  events: z.array(z.string()),
  limits: LimitsSchema,
});
export type ConnectResult = z.infer<typeof ConnectResultSchema>;

const Empty = z.object({});
const RunAccepted = z.object({ runId: z.string(), status: z.literal("accepted") });
/**
 * Prefixes of the keys the gateway gives its own runs (a send's follow-up steps, spawn announces):
 * a client naming one could make the run a step later finds as its own, and so inject or suppress it.
 */
export const RESERVED_IDEMPOTENCY_PREFIXES = ["a2a:", "announce:"] as const;
const IdempotencyKey = z
  .string()
  .min(1)
  .max(256)
  .refine((key) => !RESERVED_IDEMPOTENCY_PREFIXES.some((prefix) => key.startsWith(prefix)), {
    error: `must not start with ${RESERVED_IDEMPOTENCY_PREFIXES.join(" or ")} (reserved for the gateway's own runs)`,
  });
/**
 * An input message: at most `MAX_INPUT_MESSAGE_BYTES` (512 KiB) of UTF-8, under the default frame
 * limit so the error names the field; stores keep and return entries up to `MAX_MESSAGE_BYTES`.
 */
const Message = z
  .string()
  .min(1, { error: "must not be empty" })
  // Blank is empty to a model and to the `sessions_send` tool (which refuses it); a run for it
  // would cost a worker turn for nothing.
  .refine((text) => text.trim() !== "", { error: "must not be blank" })
  .pipe(InputTextSchema);

/** Every method's params and result (protocol.md). The single source of truth for server and SDK. */
export const Methods = {
  "sessions.list": {
    params: SessionsListParamsSchema.extend({
      agentId: z.string().optional(),
      search: z.string().max(256).optional(),
      label: z.string().max(64).optional(),
      spawnedBy: z.string().optional(),
      /** The `nextCursor` of the previous page, with the same filters. */
      cursor: z.string().max(1024).optional(),
    }),
    result: z.object({
      status: z.literal("ok"),
      count: z.number(),
      sessions: z.array(SessionRowSchema),
      hidden: z.number(),
      /** Present when the page is full: pass it as `cursor` for the next page. */
      nextCursor: z.string().optional(),
    }),
  },
  "sessions.resolve": {
    params: z
      .object({
        key: SessionKeyParam.optional(),
        sessionId: z.string().optional(),
        label: z.string().max(64).optional(),
        agentId: z.string().optional(),
      })
      .refine((p) => [p.key, p.sessionId, p.label].filter((v) => v !== undefined).length === 1, {
        error: "exactly one of key, sessionId, label is required",
      }),
    result: z.object({ key: z.string(), sessionId: z.string() }),
  },
  "sessions.history": {
    params: SessionsHistoryParamsSchema.extend({
      /**
       * Page size cap in bytes of JSON (default 64 KiB). Up to 4 MiB, so the largest message is
       * always readable whole; a message over the cap comes back clipped, with its full size.
       */
      maxBytes: z
        .int()
        .min(1024)
        .max(4 * 1024 * 1024)
        .optional(),
    }),
    result: SessionsHistoryResultSchema,
  },
  "sessions.status": { params: z.object({ sessionKey: SessionKeyParam }), result: SessionStatusResultSchema },
  "sessions.create": {
    params: z.object({
      key: SessionKeyParam,
      channel: z.string().max(64).optional(),
      chatType: ChatTypeParam.optional(),
      label: z.string().max(64).optional(),
      clearance: LevelSchema.optional(),
      displayName: z.string().max(200).optional(),
    }),
    result: z.object({ key: z.string(), sessionId: z.string(), created: z.boolean() }),
  },
  "sessions.patch": {
    params: z.object({
      key: SessionKeyParam,
      label: z.string().max(64).nullable().optional(),
      sendPolicy: z.enum(["allow", "deny"]).nullable().optional(),
      model: z.string().max(200).nullable().optional(),
      clearance: LevelSchema.optional(),
      displayName: z.string().max(200).nullable().optional(),
      /** Accept a clearance below the session's current taint (the session then holds data above it). */
      force: z.boolean().optional(),
    }),
    result: z.object({ key: z.string(), entry: SessionEntrySchema }),
  },
  "sessions.reset": {
    params: z.object({ key: SessionKeyParam }),
    result: z.object({ key: z.string(), sessionId: z.string() }),
  },
  "sessions.delete": {
    params: z.object({ key: SessionKeyParam }),
    result: z.object({ key: z.string(), deleted: z.literal(true) }),
  },
  "chat.send": {
    params: z.object({
      sessionKey: SessionKeyParam,
      message: Message,
      idempotencyKey: IdempotencyKey.optional(),
    }),
    result: RunAccepted,
  },
  agent: {
    params: z.object({
      sessionKey: SessionKeyParam,
      message: Message,
      lane: LaneSchema.optional(),
      timeoutSeconds: z.number().min(0).max(86_400).optional(),
      idempotencyKey: IdempotencyKey.optional(),
    }),
    result: RunAccepted,
  },
  "agent.wait": {
    params: z.object({
      runId: RunIdParam,
      timeoutMs: z.number().int().min(0).max(600_000).optional(),
    }),
    result: z.object({
      runId: z.string(),
      status: z.enum(["ok", "error", "timeout"]),
      reply: z.string().optional(),
      error: z.string().optional(),
      startedAt: z.number().optional(),
      endedAt: z.number().optional(),
    }),
  },
  "runs.list": {
    params: z.object({
      /** Default: the runs not ended yet (queued and running). */
      statuses: z.array(RunStatusSchema).min(1).max(5).optional(),
      sessionKey: SessionKeyParam.optional(),
      agentId: z.string().min(1).max(64).optional(),
      limit: z.int().min(1).max(200).optional(),
    }),
    result: z.object({
      /** Newest first. */
      runs: z.array(
        z.object({
          runId: z.string(),
          sessionKey: z.string(),
          agentId: z.string(),
          lane: LaneSchema,
          status: RunStatusSchema,
          origin: z.string(),
          createdAt: z.number(),
          startedAt: z.number().optional(),
          endedAt: z.number().optional(),
          attempts: z.number(),
          error: z.string().optional(),
        }),
      ),
    }),
  },
  "agents.list": {
    params: Empty,
    result: z.object({
      agents: z.array(
        z.object({
          id: z.string(),
          name: z.string().optional(),
          configured: z.boolean(),
          connected: z.boolean(),
          workers: z.number(),
        }),
      ),
    }),
  },
  "tools.list": {
    params: z.object({ runId: RunIdParam.optional(), as: SessionKeyParam.optional() }),
    result: z.object({ tools: z.array(ToolDefinitionSchema) }),
  },
  "tools.invoke": {
    params: z.object({
      tool: ToolNameParam,
      args: ToolArgsSchema.default({}),
      runId: RunIdParam.optional(),
      as: SessionKeyParam.optional(),
      toolCallId: z.string().max(128).optional(),
    }),
    result: z.looseObject({ status: z.string() }),
  },
  "tools.cancel": {
    // Stops a `tools.invoke` this connection made with that `toolCallId` and is still waiting for
    // (a send waiting for its reply ends `timeout`, its run going on). False: no such call in flight.
    params: z.object({ toolCallId: z.string().min(1).max(128) }),
    result: z.object({ cancelled: z.boolean() }),
  },
  "policy.simulate": {
    params: z.object({
      as: SessionKeyParam,
      tool: ToolNameParam,
      args: ToolArgsSchema.default({}),
    }),
    result: z.union([SimulateResultSchema, z.object({ status: z.string(), error: z.string() })]),
  },
  "audit.tail": {
    params: z.object({
      limit: z.number().int().min(1).max(1000).optional(),
      after: z.number().int().min(-1).optional(),
    }),
    result: z.object({ entries: z.array(z.record(z.string(), z.unknown())) }),
  },
  "audit.verify": {
    params: Empty,
    result: z.object({
      ok: z.boolean(),
      entries: z.number(),
      firstBadIndex: z.number().optional(),
      reason: z.string().optional(),
    }),
  },
  "events.subscribe": {
    params: z.object({
      sessionKey: SessionKeyParam.optional(),
      // Several sessions at once, with one replay over all of them: a client renewing its
      // subscriptions after a reconnect gets the events of all in one `seq` order (one call per
      // session replayed each from the same cursor, and the second lost what the first passed).
      sessionKeys: z.array(SessionKeyParam).min(1).max(MAX_SUBSCRIPTIONS_PER_CONNECTION).optional(),
      after: z.number().int().min(0).optional(),
    }),
    result: z.object({
      subscribed: z.literal(true),
      seq: z.number(),
      /**
       * Only with `after`: events numbered above `after` and below `before` may have happened and can
       * no longer be replayed (they left the window, or a restarted gateway's window never held them).
       * The replay sent what is left; read the state you follow again (e.g. `sessions.history`).
       */
      missed: z.object({ after: z.number().int().min(0), before: z.number().int().min(0) }).optional(),
    }),
  },
  "run.progress": {
    params: z.object({
      runId: RunIdParam,
      kind: z.enum(["text-delta", "tool-call", "tool-result"]),
      // Published to every subscriber and kept in the replay window: bounded like any text a peer
      // sends in, so one delta can never be a frame-sized event.
      text: InputTextSchema.optional(),
      toolCallId: z.string().max(128).optional(),
      name: ToolNameParam.optional(),
      args: ToolArgsSchema.optional(),
      result: ToolResultValueSchema.optional(),
    }),
    result: Empty,
  },
  "run.complete": {
    params: z.object({ runId: RunIdParam, reply: ReplyTextSchema, usage: UsageSchema.optional() }),
    result: Empty,
  },
  "run.fail": { params: z.object({ runId: RunIdParam, error: z.string().max(10_000) }), result: Empty },
} as const satisfies Record<string, { params: z.ZodType; result: z.ZodType }>;

export type MethodName = keyof typeof Methods;

function refusingUnknownKeys<T extends z.ZodType>(schema: T): T {
  return (schema instanceof z.ZodObject ? schema.strict() : schema) as T;
}

/**
 * Each method's params as the gateway checks them: a key the schema does not name is refused
 * (INVALID_REQUEST naming it), where a plain object schema drops it — a `sessions.patch` with
 * `clearence` answered ok and changed nothing. Tool arguments are another matter: tools.md has
 * them ignore unknown parameters.
 */
export const MethodParamsChecked = Object.fromEntries(
  Object.entries(Methods).map(([name, method]) => [name, refusingUnknownKeys(method.params)]),
) as { [M in MethodName]: (typeof Methods)[M]["params"] };

/** `connect`'s params as the gateway checks them (unknown keys refused, as for every method). */
export const ConnectParamsChecked = refusingUnknownKeys(ConnectParamsSchema);
export type MethodParams<M extends MethodName> = z.input<(typeof Methods)[M]["params"]>;
export type MethodResult<M extends MethodName> = z.infer<(typeof Methods)[M]["result"]>;
export const METHOD_NAMES = Object.keys(Methods) as MethodName[];

/** Which roles may call which methods (`connect` is the handshake, not a method). */
export const METHOD_ROLES: Record<MethodName, readonly Role[]> = {
  "sessions.list": ["operator"],
  "sessions.resolve": ["operator"],
  "sessions.history": ["operator", "client"],
  "sessions.status": ["operator", "client"],
  "sessions.create": ["operator"],
  "sessions.patch": ["operator"],
  "sessions.reset": ["operator"],
  "sessions.delete": ["operator"],
  "chat.send": ["operator", "client"],
  agent: ["operator"],
  "agent.wait": ["operator", "client"],
  "agents.list": ["operator"],
  "tools.list": ["operator", "agent", "mcp"],
  "tools.invoke": ["operator", "agent", "mcp"],
  "tools.cancel": ["operator", "agent", "mcp"],
  "policy.simulate": ["operator"],
  "audit.tail": ["operator"],
  "audit.verify": ["operator"],
  "runs.list": ["operator"],
  "events.subscribe": ["operator", "agent", "client"],
  "run.progress": ["agent"],
  "run.complete": ["agent"],
  "run.fail": ["agent"],
};

export function methodsForRole(role: Role): MethodName[] {
  return METHOD_NAMES.filter((name) => METHOD_ROLES[name].includes(role));
}

export function isMethodName(name: string): name is MethodName {
  return Object.hasOwn(Methods, name);
}

export { ERROR_CODES, EvaluatedRuleSchema };
