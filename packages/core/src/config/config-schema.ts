import { z } from "zod";
import { compileGlob } from "../glob";
import { isInternalKey, tryParseKey } from "../keys/parse-key";
import { keyProblem } from "../keys/validate-key";
import { DEFAULT_CLEARANCE, LabelsConfigSchema, LevelSchema } from "../labels/index";
import { PolicyRulesSchema } from "../policy/rule-schema";
import { SendPolicySchema } from "../policy/send-policy";
import { TOOL_NAMES } from "../tools/tool-schemas";
import { AgentModelConfigSchema, defaultAgentModel, SubagentModelSchema } from "./model-config";
import {
  RetentionConfigSchema,
  StoreConfigSchema,
  TelemetryConfigSchema,
  UiConfigSchema,
} from "./operations-config";
import {
  agentIdString,
  agentPatternString,
  closestName,
  intAtLeast,
  intRange,
  isAgentPattern,
  nonEmptyString,
  requiredOr,
} from "./schema-helpers";

const booleanField = () => z.boolean({ error: "must be true or false" });

// `.prefault({})` (not `.default({})`) so an absent section is parsed as `{}` and gets its inner defaults.

const GatewayConfigSchema = z.strictObject({
  host: nonEmptyString("a host name or IP address").default("127.0.0.1"),
  port: intRange(0, 65535).default(18789),
  dataDir: nonEmptyString("a directory path").default("./.switchboard"),
  limits: z
    .strictObject({
      maxPayload: intAtLeast(1024).default(1_048_576),
      maxBufferedBytes: intAtLeast(1024).default(8_388_608),
      heartbeatMs: intRange(100, 3_600_000).default(15_000),
      /** Bytes a peer may send before its `connect` succeeds (the longest token plus 256 agent ids of 40 characters fit). */
      maxPreConnectBytes: intAtLeast(1024).default(16_384),
      /** WebSocket connections at once; absent: sized under the process's open-file limit at start. */
      maxConnections: intAtLeast(1).optional(),
      /** WebSocket connections at once from one remote address (everything local shares 127.0.0.1). */
      maxConnectionsPerAddress: intAtLeast(1).default(512),
      /** Requests one connection may have in flight; more are answered RATE_LIMITED (retryable). */
      maxInFlight: intAtLeast(1).default(256),
      /**
       * Bytes of recent events the in-process event log keeps for `events.subscribe` replay, besides
       * its count: the oldest leave first, and a client resuming before them is told it missed events.
       */
      maxReplayBytes: intAtLeast(1_048_576).default(67_108_864),
      /**
       * Bytes of `events.subscribe` replay queued on this instance's sockets and not yet written,
       * all connections together; a quarter of it per token. A subscribe whose replay does not fit
       * is answered RATE_LIMITED (retryable): a peer that stops reading otherwise kept up to half
       * its `maxBufferedBytes` per connection, on as many connections as it could open.
       */
      maxQueuedReplayBytes: intAtLeast(1_048_576).default(67_108_864),
      /**
       * Runs of one session not ended yet on this instance (queued, running or being created; in a
       * cluster also those it handed to the cluster's queue, until their end is heard). A new
       * send, spawn or summary past it is answered RATE_LIMITED (retryable); a flow's own follow-ups
       * (reply turns, announces) are never refused.
       */
      maxRunsPerSession: intAtLeast(1).default(1_000),
      /**
       * Runs not ended yet on this instance (and, in a cluster, those it queued there), all sessions together: each holds a record and its
       * bookkeeping (~2 KB) however small its input, so a client spraying sends over many sessions
       * is bounded too. Past it, RATE_LIMITED (follow-ups are never refused).
       */
      maxRuns: intAtLeast(1).default(100_000),
      /**
       * UTF-8 bytes of the inputs (message and context) of every run not ended yet on this instance:
       * what a flood of sends with no worker to take them may hold in memory. Past it, RATE_LIMITED.
       */
      maxRunInputBytes: intAtLeast(1_048_576).default(268_435_456),
    })
    .prefault({}),
  /**
   * A graceful stop (SIGTERM, `Gateway.close()`): new requests are refused `UNAVAILABLE` (retryable)
   * and runs are no longer dispatched; requests already being handled get `drainMs` to be answered
   * before their sockets close; past `timeoutMs` for the whole stop, what is left undone is logged
   * and abandoned (the CLI then exits 1).
   */
  shutdown: z
    .strictObject({
      drainMs: intRange(0, 600_000).default(5_000),
      timeoutMs: intRange(100, 3_600_000).default(30_000),
    })
    .prefault({}),
  retention: RetentionConfigSchema.prefault({}),
});

const TOKEN_ROLES = ["operator", "agent", "client", "mcp"] as const;

export const ConfigTokenSchema = z.strictObject({
  name: nonEmptyString("a non-empty name"),
  token: z
    .string({ error: requiredOr("must be a string of at least 16 characters") })
    .min(16, { error: "must be at least 16 characters (use a long random secret)" }),
  role: z.enum(TOKEN_ROLES),
  /** Role agent: the agent ids this worker may serve (default: any). */
  agents: z.array(agentIdString()).optional(),
  /** Role client: session key patterns it may act for; `*` matches any run of characters. */
  sessions: z
    .array(
      z.string({ error: "must be a session key pattern" }).regex(/^[^\s/\\]{1,256}$/, {
        error: "must be a session key pattern: 1-256 characters, no spaces, / or \\",
      }),
    )
    .optional(),
  /**
   * Role mcp: the one session its holder acts as, in canonical form `agent:<agentId>:<rest>` (created on
   * first use with channel `mcp`). Checked against the key rules and the configured agents below.
   */
  session: z
    .string({ error: "must be a session key agent:<agentId>:<rest>" })
    // One key, one session: the same NFC form the gateway gives every key it is sent.
    .transform((key) => key.normalize("NFC"))
    .optional(),
});
export type ConfigToken = z.infer<typeof ConfigTokenSchema>;

const SessionConfigSchema = z.strictObject({
  mainKey: z
    .string({ error: "must be a key segment" })
    .regex(/^[^\s:/\\]{1,64}$/, { error: "must be a key segment: 1-64 characters, no spaces, :, / or \\" })
    .refine((key) => key !== "global" && key !== "unknown", {
      error: '"global" and "unknown" are reserved keys',
    })
    // Keys refuse such segments (path-like): every `main` reference would fail naming the caller's key.
    .refine((key) => key !== "." && key !== "..", { error: 'must not be "." or ".."' })
    .default("main"),
  scope: z.enum(["per-sender", "global"]).default("per-sender"),
  sendPolicy: SendPolicySchema.optional(),
  agentToAgent: z
    .strictObject({
      maxPingPongTurns: intRange(0, 5).default(5),
      maxHops: intRange(1, 16).default(4),
      /**
       * Spawns, and agent-to-agent sends, one session may start per minute (each counted on its
       * own). Bounded so that no configuration lets agents loop without bound.
       */
      budgetPerMinute: intRange(1, 1_000_000).default(30),
    })
    .prefault({}),
});

const AgentSubagentsOverrideSchema = z.strictObject({
  /** Agents this agent may spawn besides itself: ids, globs (`res*`) or `"*"`; default: only itself. */
  allowAgents: z.array(agentPatternString()).optional(),
  model: SubagentModelSchema.optional(),
  archiveAfterMinutes: z.int({ error: "must be an integer (<= 0: never archive)" }).optional(),
  maxSpawnDepth: intRange(0, 5).optional(),
  maxChildren: intRange(1, 1000).optional(),
});

export const ConfigAgentSchema = z.strictObject({
  id: agentIdString(),
  name: nonEmptyString().optional(),
  default: booleanField().optional(),
  clearance: LevelSchema.optional(),
  sandboxed: booleanField().optional(),
  timeoutSeconds: intAtLeast(1).optional(),
  model: AgentModelConfigSchema.optional(),
  subagents: AgentSubagentsOverrideSchema.optional(),
});
export type ConfigAgent = z.infer<typeof ConfigAgentSchema>;

const AgentsConfigSchema = z.strictObject({
  defaults: z
    .strictObject({
      clearance: LevelSchema.default(DEFAULT_CLEARANCE),
      timeoutSeconds: intAtLeast(1).default(600),
      subagents: z
        .strictObject({
          model: SubagentModelSchema.default(null),
          archiveAfterMinutes: z.int({ error: "must be an integer (<= 0: never archive)" }).default(60),
          maxSpawnDepth: intRange(0, 5).default(1),
          maxChildren: intRange(1, 1000).default(5),
        })
        .prefault({}),
      sandbox: z
        .strictObject({ sessionToolsVisibility: z.enum(["spawned", "all"]).default("spawned") })
        .prefault({}),
    })
    .prefault({}),
  list: z.array(ConfigAgentSchema).default(() => [{ id: "main", default: true, model: defaultAgentModel() }]),
});

const ToolsConfigSchema = z.strictObject({
  agentToAgent: z
    .strictObject({
      // Off unless turned on, as in OpenClaw: cross-agent reads and sends are an explicit opt-in.
      enabled: booleanField().default(false),
      /** Agent id patterns: `*`, an exact id or a glob. */
      allow: z.array(agentPatternString()).default([]),
    })
    .prefault({}),
  subagents: z
    .strictObject({
      tools: z
        .strictObject({
          deny: z.array(nonEmptyString("a tool name")).default([]),
          /** null: every tool not denied. */
          allow: z.array(nonEmptyString("a tool name")).nullable().default(null),
        })
        .prefault({}),
    })
    .prefault({}),
});

const PolicyConfigSchema = z.strictObject({
  default: z.enum(["allow", "deny"]).default("allow"),
  rules: PolicyRulesSchema.default([]),
  hookBudgetMs: intRange(1, 60_000).default(50),
});

const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;

const LoggingConfigSchema = z.strictObject({
  level: z.enum(LOG_LEVELS).default("info"),
  pretty: booleanField().default(false),
});

const ConfigShapeSchema = z.strictObject({
  /** Lets a config file point editors at the exported JSON Schema. */
  $schema: z.string().optional(),
  gateway: GatewayConfigSchema.prefault({}),
  auth: z.strictObject({ tokens: z.array(ConfigTokenSchema).default([]) }).prefault({}),
  session: SessionConfigSchema.prefault({}),
  agents: AgentsConfigSchema.prefault({}),
  tools: ToolsConfigSchema.prefault({}),
  labels: LabelsConfigSchema.prefault({}),
  policy: PolicyConfigSchema.prefault({}),
  logging: LoggingConfigSchema.prefault({}),
  store: StoreConfigSchema.default({ kind: "fs" }),
  ui: UiConfigSchema.prefault({}),
  telemetry: TelemetryConfigSchema.prefault({}),
});

type ConfigShape = z.infer<typeof ConfigShapeSchema>;

/** The whole configuration file. Cross-field rules run once every field is individually valid. */
export const ConfigSchema = ConfigShapeSchema.superRefine((config, ctx) => {
  const agentIds = config.agents.list.map((agent) => agent.id);
  checkAgents(config, ctx);
  checkTokens(config, agentIds, ctx);
  checkAgentToAgent(config, agentIds, ctx);
  checkSubagentTools(config, ctx);
});

/**
 * `tools.subagents.tools` patterns only ever filter the session tools: one matching none of them is
 * a typo, and a typo in `deny` silently left the tool it meant open.
 */
function checkSubagentTools(config: ConfigShape, ctx: RefineContext): void {
  const lists = config.tools.subagents.tools;
  for (const list of ["deny", "allow"] as const) {
    lists[list]?.forEach((pattern, index) => {
      const matches = compileGlob(pattern, { ignoreCase: true, trimPattern: true, questionMark: "literal" });
      if (TOOL_NAMES.some((name) => matches(name))) return;
      const suggestion = closestName(pattern.trim().toLowerCase(), TOOL_NAMES);
      ctx.addIssue({
        code: "custom",
        path: ["tools", "subagents", "tools", list, index],
        message: `"${pattern}" matches none of the session tools (${suggestion ? `did you mean "${suggestion}"? ` : ""}tools: ${TOOL_NAMES.join(", ")})`,
      });
    });
  }
}
export type Config = z.infer<typeof ConfigSchema>;
/** What a config file may contain (everything optional that has a default). */
export type ConfigInput = z.input<typeof ConfigSchema>;

type RefineContext = z.RefinementCtx<ConfigShape>;

function issue(ctx: RefineContext, path: PropertyKey[], message: string): void {
  ctx.addIssue({ code: "custom", path: path as (string | number)[], message, input: undefined });
}

function knownAgents(ids: readonly string[]): string {
  return ids.length === 0 ? "no agents are configured" : `configured agents: ${[...new Set(ids)].join(", ")}`;
}

/** `unknown agent "reseach" (did you mean "research"? configured agents: main, research)`. */
function unknownAgent(id: string, ids: readonly string[]): string {
  const suggestion = closestName(id, ids);
  return `unknown agent "${id}" (${suggestion ? `did you mean "${suggestion}"? ` : ""}${knownAgents(ids)})`;
}

function checkAgents(config: ConfigShape, ctx: RefineContext): void {
  const list = config.agents.list;
  const ids = list.map((agent) => agent.id);
  const firstIndex = new Map<string, number>();
  let defaultIndex: number | undefined;
  list.forEach((agent, index) => {
    const earlier = firstIndex.get(agent.id);
    if (earlier === undefined) firstIndex.set(agent.id, index);
    else
      issue(
        ctx,
        ["agents", "list", index, "id"],
        `duplicate agent id "${agent.id}" (also agents.list[${earlier}])`,
      );

    if (agent.default === true) {
      if (defaultIndex === undefined) defaultIndex = index;
      else
        issue(
          ctx,
          ["agents", "list", index, "default"],
          `only one agent may be the default (agents.list[${defaultIndex}] already is)`,
        );
    }

    agent.subagents?.allowAgents?.forEach((allowed, allowedIndex) => {
      // A pattern may name agents a worker serves later; an exact id that matches nothing is a typo.
      if (!isAgentPattern(allowed) && !ids.includes(allowed)) {
        issue(
          ctx,
          ["agents", "list", index, "subagents", "allowAgents", allowedIndex],
          unknownAgent(allowed, ids),
        );
      }
    });
  });
}

function checkTokens(config: ConfigShape, agentIds: readonly string[], ctx: RefineContext): void {
  const names = new Map<string, number>();
  const values = new Map<string, number>();
  config.auth.tokens.forEach((token, index) => {
    const path = ["auth", "tokens", index];
    const sameName = names.get(token.name);
    if (sameName === undefined) names.set(token.name, index);
    else
      issue(ctx, [...path, "name"], `duplicate token name "${token.name}" (also auth.tokens[${sameName}])`);

    const sameValue = values.get(token.token);
    // The secret itself is never echoed into an error message (errors end up in logs).
    if (sameValue === undefined) values.set(token.token, index);
    else
      issue(
        ctx,
        [...path, "token"],
        `same token value as auth.tokens[${sameValue}]; every token must be unique`,
      );

    if (token.agents !== undefined && token.role !== "agent") {
      issue(
        ctx,
        [...path, "agents"],
        `only allowed on a token with role "agent" (this one is "${token.role}")`,
      );
    }
    if (token.sessions !== undefined && token.role !== "client") {
      issue(
        ctx,
        [...path, "sessions"],
        `only allowed on a token with role "client" (this one is "${token.role}")`,
      );
    }
    checkTokenSession(token, path, agentIds, ctx);
    token.agents?.forEach((agentId, agentIndex) => {
      if (!agentIds.includes(agentId)) {
        issue(ctx, [...path, "agents", agentIndex], unknownAgent(agentId, agentIds));
      }
    });
  });
}

/**
 * The session an `mcp` token is bound to: required for that role and refused on others. It must be
 * canonical (no alias: `main` or a bare key would depend on which agent is the default, and the
 * binding must not move when the agent list changes), of a configured agent, and not internal.
 */
function checkTokenSession(
  token: ConfigShape["auth"]["tokens"][number],
  path: PropertyKey[],
  agentIds: readonly string[],
  ctx: RefineContext,
): void {
  if (token.role !== "mcp") {
    if (token.session !== undefined) {
      issue(
        ctx,
        [...path, "session"],
        `only allowed on a token with role "mcp" (this one is "${token.role}")`,
      );
    }
    return;
  }
  if (token.session === undefined) {
    issue(
      ctx,
      [...path, "session"],
      'required for a token with role "mcp": the session key it acts as, e.g. "agent:main:mcp:desktop"',
    );
    return;
  }
  const problem = keyProblem(token.session, "session");
  if (problem) {
    issue(ctx, [...path, "session"], problem.replace(/^session: /, ""));
    return;
  }
  const parsed = tryParseKey(token.session);
  if (!parsed) {
    issue(
      ctx,
      [...path, "session"],
      `must be a canonical key agent:<agentId>:<rest> with a lower-case agent id (got ${JSON.stringify(token.session)})`,
    );
    return;
  }
  if (isInternalKey(parsed.rest)) {
    issue(ctx, [...path, "session"], `"${parsed.rest}" is an internal key and cannot be bound to a token`);
    return;
  }
  if (!agentIds.includes(parsed.agentId))
    issue(ctx, [...path, "session"], unknownAgent(parsed.agentId, agentIds));
}

/**
 * An exact id in `tools.agentToAgent.allow` that names no configured agent is a typo: the gateway
 * only runs configured agents (spawns of others are refused), so the entry could never match a real
 * peer and the cross-agent access the operator meant to open stays shut without a word. Patterns
 * (`*`, `res*`) may match nothing yet and stay allowed, as in `allowAgents`.
 */
function checkAgentToAgent(config: ConfigShape, agentIds: readonly string[], ctx: RefineContext): void {
  config.tools.agentToAgent.allow.forEach((allowed, index) => {
    if (!isAgentPattern(allowed) && !agentIds.includes(allowed)) {
      issue(ctx, ["tools", "agentToAgent", "allow", index], unknownAgent(allowed, agentIds));
    }
  });
}
