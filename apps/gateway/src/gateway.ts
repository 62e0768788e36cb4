import { randomUUID, timingSafeEqual } from "node:crypto";
import { resolve } from "node:path";
import {
  type Config,
  type ConnectParams,
  canonicalizeKey,
  displayKey,
  EVENT_NAMES,
  type EventPayload,
  type Level,
  METHOD_NAMES,
  type MethodName,
  type MethodParams,
  methodsForRole,
  normalizeAgentId,
  parseConfig,
  type RunRecord,
  type SessionEntry,
  type Store,
  SwitchboardError,
  TOOL_NAMES,
  type ToolCaller,
  type ToolDefinition,
  type TranscriptEntry,
  toolLevel,
} from "@switchboard/core";
import { openFileStore } from "@switchboard/store-fs";
import {
  capHistory,
  createToolExecutor,
  type ToolExecutor,
  toolDefinitions,
  toolsForSession,
} from "@switchboard/tools";
import pino, { type Logger } from "pino";
import { AgentFlows } from "./agent-flows";
import { AuditService } from "./audit-service";
import type { Connection, ConnectionIdentity } from "./connection";
import { auditKey, operatorToken } from "./data-dir-secrets";
import { type BusEvent, EventBus } from "./event-bus";
import { OutputDelivery } from "./output-delivery";
import { PolicyService } from "./policy-service";
import { RunScheduler } from "./run-scheduler";
import { SessionToolsBackend, toHistoryMessage } from "./session-tools-backend";
import { SessionsService } from "./sessions-service";
import { startTransport, type Transport } from "./transport";
import { VERSION } from "./version";

export interface GatewayOptions {
  config?: Config;
  /** Overrides `gateway.dataDir` (and `SWITCHBOARD_HOME`). */
  dataDir?: string;
  port?: number;
  host?: string;
  logger?: Logger;
  /** Use this store instead of opening the file store (tests); the gateway then does not close it. */
  store?: Store;
  /** `fsync` mode of the file store (tests may pass "none"). */
  fsync?: "always" | "none";
  handshakeTimeoutMs?: number;
}

type Handler = (params: never, connection: Connection) => Promise<Record<string, unknown>>;

const HISTORY_CAP = 64 * 1024;
const ALWAYS_SUBAGENT_KIND = "subagent";

function sameSecret(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

const historyJsonCache = new WeakMap<TranscriptEntry, string>();

function historyJsonOf(item: TranscriptEntry): string {
  let json = historyJsonCache.get(item);
  if (json === undefined) {
    json = JSON.stringify(toHistoryMessage(item));
    historyJsonCache.set(item, json);
  }
  return json;
}

/** Glob over session keys where `*` matches any run of characters. */
export function keyPatternMatches(pattern: string, key: string): boolean {
  if (!pattern.includes("*")) return pattern === key;
  const escaped = pattern.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"));
  return new RegExp(`^${escaped.join(".*")}$`).test(key);
}

/** The running gateway: transport, sessions, runs, enforcement. Created by {@link startGateway}. */
export class Gateway {
  readonly instanceId = randomUUID();
  readonly bus: EventBus;
  private transport!: Transport;
  private executor!: ToolExecutor;
  private seqTimer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  readonly handlers: Record<MethodName, Handler>;

  private constructor(
    readonly config: Config,
    readonly dataDir: string,
    readonly store: Store,
    private readonly ownsStore: boolean,
    readonly log: Logger,
    readonly operatorToken: string,
    readonly sessions: SessionsService,
    readonly audit: AuditService,
    readonly policy: PolicyService,
    readonly scheduler: RunScheduler,
    readonly flows: AgentFlows,
    readonly backend: SessionToolsBackend,
    bus: EventBus,
  ) {
    this.bus = bus;
    this.executor = createToolExecutor(backend, {
      logger: { warn: (message, details) => log.warn(details ?? {}, message) },
    });
    this.handlers = this.buildHandlers();
  }

  /** Open WebSocket connections (tests, health). */
  connectionCount(): number {
    return this.transport.connections.size;
  }

  get port(): number {
    return this.transport.port;
  }

  get url(): string {
    const host = this.config.gateway.host.includes(":")
      ? `[${this.config.gateway.host}]`
      : this.config.gateway.host;
    return `ws://${host}:${this.port}`;
  }

  static async start(options: GatewayOptions = {}): Promise<Gateway> {
    const config = options.config ?? parseConfig({});
    const log = options.logger ?? pino({ level: "silent" });
    const dataDir = resolve(options.dataDir ?? process.env.SWITCHBOARD_HOME ?? config.gateway.dataDir);
    const store =
      options.store ??
      (await openFileStore({
        dataDir,
        logger: log.child({ component: "store" }),
        ...(options.fsync ? { fsyncMode: options.fsync } : {}),
      }));
    try {
      const { token } = await operatorToken(dataDir);
      const seqBase = Math.max(Number((await store.meta.get("events.seq")) ?? 0) + 1, Date.now());
      const bus = new EventBus(16_384, seqBase);
      const audit = await AuditService.open(store.audit, store.meta, await auditKey(dataDir), bus);
      const sessions = new SessionsService(store, config, bus, audit, log.child({ component: "sessions" }));
      const policy = new PolicyService(config, sessions, audit, bus);
      let gateway: Gateway | undefined;
      const scheduler = new RunScheduler(
        store,
        sessions,
        bus,
        log.child({ component: "runs" }),
        (record, worker, deadline) => gateway!.assignRun(record, worker, deadline),
      );
      const output = new OutputDelivery(sessions, policy, audit, bus);
      const flows = new AgentFlows(
        config,
        store,
        sessions,
        policy,
        scheduler,
        output,
        audit,
        log.child({ component: "flows" }),
      );
      const backend = new SessionToolsBackend(
        config,
        store,
        sessions,
        policy,
        scheduler,
        flows,
        output,
        (agentId) => scheduler.hasWorker(agentId),
      );
      gateway = new Gateway(
        config,
        dataDir,
        store,
        !options.store,
        log,
        token,
        sessions,
        audit,
        policy,
        scheduler,
        flows,
        backend,
        bus,
      );
      backend.toolGate = (entry, tool, args) => gateway!.toolGate(entry, tool, args);
      await scheduler.recover();
      await flows.resumePendingAnnounces();
      flows.startArchiver();
      gateway.transport = await startTransport({
        host: options.host ?? config.gateway.host,
        port: options.port ?? config.gateway.port,
        limits: { ...config.gateway.limits, handshakeTimeoutMs: options.handshakeTimeoutMs ?? 5000 },
        handlers: {
          authenticate: (params, connection) => gateway!.authenticate(params, connection),
          connectResult: (connection) => gateway!.connectResult(connection),
          handle: (method, params, connection) => gateway!.handlers[method](params as never, connection),
          onReady: (connection) => gateway!.onReady(connection),
          onClose: (connection) => gateway!.onClose(connection),
          health: () => ({ instanceId: gateway!.instanceId, version: VERSION }),
        },
        log: log.child({ component: "transport" }),
      });
      // Bookkeeping every 5 s: the event seq high-water mark and the audit chain's anchored head.
      gateway.seqTimer = setInterval(() => {
        void store.meta.set("events.seq", String(bus.currentSeq)).catch(() => undefined);
        void audit.anchor().catch(() => undefined);
      }, 5000);
      gateway.seqTimer.unref();
      return gateway;
    } catch (error) {
      if (!options.store) await store.close().catch(() => undefined);
      throw error;
    }
  }

  /** Graceful stop: refuse new connections, end running runs, flush the store, release the lock. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.seqTimer) clearInterval(this.seqTimer);
      await this.transport.stopAccepting();
      this.flows.stop();
      await this.scheduler.stop();
      this.transport.closeAll(1001, "gateway shutting down");
      await this.store.meta.set("events.seq", String(this.bus.currentSeq)).catch(() => undefined);
      await this.audit.anchor().catch(() => undefined);
      if (this.ownsStore) await this.store.close();
    })();
    return this.closing;
  }

  // ---- connections -----------------------------------------------------------------------------

  private findToken(token: string) {
    if (sameSecret(token, this.operatorToken)) return { name: "operator", token, role: "operator" as const };
    return this.config.auth.tokens.find((candidate) => sameSecret(token, candidate.token));
  }

  authenticate(params: ConnectParams, connection: Connection): ConnectionIdentity {
    const token = this.findToken(params.auth.token);
    if (!token) throw new SwitchboardError("UNAUTHORIZED", "invalid token");
    if (token.role !== "operator" && token.role !== params.role) {
      throw new SwitchboardError(
        "UNAUTHORIZED",
        `token "${token.name}" is for role ${token.role}, not ${params.role}`,
      );
    }
    const identity: ConnectionIdentity = {
      role: params.role,
      tokenName: token.name,
      agents: new Set(),
      sessionPatterns: [],
    };
    if (params.role === "agent") {
      const agents = (params.agents ?? []).map((id) => normalizeAgentId(id, "agents"));
      if (agents.length === 0)
        throw new SwitchboardError("INVALID_REQUEST", "agents: a worker must serve at least one agent id");
      const allowed = "agents" in token && token.agents ? token.agents : undefined;
      for (const agentId of agents) {
        if (allowed && !allowed.includes(agentId)) {
          throw new SwitchboardError(
            "UNAUTHORIZED",
            `token "${token.name}" may not serve agent "${agentId}"`,
          );
        }
      }
      identity.agents = new Set(agents);
    } else if (params.role === "client") {
      const patterns =
        "sessions" in token && token.sessions ? token.sessions : token.role === "operator" ? ["*"] : [];
      if (params.sessionKey) {
        const canonical = canonicalizeKey(
          params.sessionKey,
          this.sessions.keyContext(undefined, "sessionKey"),
        );
        if (!patterns.some((pattern) => keyPatternMatches(pattern, canonical))) {
          throw new SwitchboardError(
            "UNAUTHORIZED",
            `token "${token.name}" may not act for session ${canonical}`,
          );
        }
        identity.sessionPatterns = [canonical];
      } else {
        if (patterns.length === 0) {
          throw new SwitchboardError(
            "UNAUTHORIZED",
            "sessionKey: required for a client token without session patterns",
          );
        }
        identity.sessionPatterns = patterns;
      }
    }
    connection.log.info({ role: identity.role, tokenName: token.name }, "connected");
    return identity;
  }

  connectResult(connection: Connection): Record<string, unknown> {
    const role = connection.identity!.role;
    return {
      protocol: 1,
      server: { name: "switchboard", version: VERSION, instanceId: this.instanceId },
      connectionId: connection.id,
      role,
      methods: methodsForRole(role),
      events: [...EVENT_NAMES],
      limits: this.config.gateway.limits,
    };
  }

  onReady(connection: Connection): void {
    const identity = connection.identity!;
    if (identity.role === "agent") this.scheduler.addWorker(connection, identity.agents);
  }

  onClose(connection: Connection): void {
    if (connection.identity?.role === "agent") {
      void this.scheduler
        .removeWorker(connection)
        .catch((error) => this.log.error({ err: error }, "worker cleanup failed"));
    }
  }

  private clientMaySee(connection: Connection, sessionKey: string | undefined): boolean {
    const identity = connection.identity!;
    if (identity.role === "operator") return true;
    if (!sessionKey) return false;
    return identity.sessionPatterns.some((pattern) => keyPatternMatches(pattern, sessionKey));
  }

  private eventFilter(connection: Connection, sessionKey?: string): (event: BusEvent) => boolean {
    const identity = connection.identity!;
    return (event) => {
      if (event.connectionId && event.connectionId !== connection.id) return false;
      if (sessionKey && event.sessionKey !== sessionKey) return false;
      if (identity.role === "operator") return true;
      if (identity.role === "agent") return event.agentId !== undefined && identity.agents.has(event.agentId);
      return this.clientMaySee(connection, event.sessionKey);
    };
  }

  private requireClientSession(connection: Connection, key: string): void {
    if (!this.clientMaySee(connection, key)) {
      throw new SwitchboardError("FORBIDDEN", `this connection may not access session ${key}`);
    }
  }

  // ---- runs and tools --------------------------------------------------------------------------

  /** The tools a session may call right now (tools.md "What a sub-agent gets"). */
  toolsFor(entry: SessionEntry): string[] {
    const isSubagent = this.sessions.kind(entry) === ALWAYS_SUBAGENT_KIND;
    const agent = this.sessions.agentConfig(entry.agentId);
    const maxSpawnDepth =
      agent?.subagents?.maxSpawnDepth ?? this.config.agents.defaults.subagents.maxSpawnDepth;
    return toolsForSession({
      isSubagent,
      spawnDepth: entry.spawnDepth ?? (isSubagent ? 1 : 0),
      maxSpawnDepth,
      allow: this.config.tools.subagents.tools.allow,
      deny: this.config.tools.subagents.tools.deny,
    });
  }

  private readonly definitionCache = new Map<string, { list: ToolDefinition[]; json: string }>();

  /** Tool definitions are immutable per tool set, so each distinct set (and its JSON) is built once. */
  private definitionsFor(names: string[]): { list: ToolDefinition[]; json: string } {
    const cacheKey = names.join(",");
    let definitions = this.definitionCache.get(cacheKey);
    if (!definitions) {
      const list = toolDefinitions(names);
      definitions = { list, json: JSON.stringify(list) };
      this.definitionCache.set(cacheKey, definitions);
    }
    return definitions;
  }

  toolGate(
    entry: SessionEntry,
    tool: string,
    args: Record<string, unknown>,
  ): { allowed: boolean; message?: string } {
    if (!(TOOL_NAMES as readonly string[]).includes(tool)) return { allowed: true };
    if (!this.toolsFor(entry).includes(tool)) {
      return { allowed: false, message: `tool ${tool} is not available to session ${entry.key}` };
    }
    void args;
    return { allowed: true };
  }

  async assignRun(record: RunRecord, worker: Connection, deadline: number | undefined): Promise<void> {
    const entry = await this.sessions.require(record.sessionKey);
    const recent = await this.sessions.recentMessages(entry, 21);
    // Transcript entries never change once written, so each one's history JSON is built once.
    const historyJson = `[${recent
      .filter((item) => item.runId !== record.runId)
      .slice(-20)
      .map(historyJsonOf)
      .join(",")}]`;
    const tools =
      record.origin === "summarize" ? { list: [], json: "[]" } : this.definitionsFor(this.toolsFor(entry));
    // `run.assigned` goes to one worker only and is never replayed (a reconnecting worker gets its
    // runs reassigned), so it takes a seq but stays out of the replay ring. The tool definitions are
    // the bulk of the frame and identical per tool set: their JSON is built once and spliced in.
    const payload: Omit<EventPayload<"run.assigned">, "tools" | "history"> = {
      runId: record.runId,
      sessionKey: record.sessionKey,
      agentId: record.agentId,
      lane: record.lane,
      input: {
        message: record.message,
        provenance: record.provenance ?? { kind: "user" },
        context: record.context ?? "",
      },
      ...(entry.model ? { model: entry.model } : {}),
      ...(deadline ? { deadline } : {}),
      attempt: record.attempts,
    };
    const seq = this.bus.allocateSeq();
    const payloadJson = `{"tools":${tools.json},"history":${historyJson},${JSON.stringify(payload).slice(1)}`;
    worker.sendText(`{"type":"event","event":"run.assigned","seq":${seq},"payload":${payloadJson}}`);
  }

  /** Caller of a tool call: the run's session (agent) or an audited `as` (operator). */
  private async toolCaller(
    connection: Connection,
    params: { runId?: string | undefined; as?: string | undefined },
  ): Promise<{ caller: ToolCaller; entry: SessionEntry }> {
    const role = connection.identity!.role;
    if (role === "agent") {
      if (!params.runId) throw new SwitchboardError("INVALID_REQUEST", "runId: required for agent workers");
      const record = this.scheduler.requireHeldBy(params.runId, connection);
      const entry = await this.sessions.require(record.sessionKey);
      return { caller: { sessionKey: entry.key, agentId: entry.agentId, runId: record.runId }, entry };
    }
    if (params.runId && !params.as) {
      const active = this.scheduler.get(params.runId);
      if (!active) throw new SwitchboardError("NOT_FOUND", `run not active: ${params.runId}`);
      const entry = await this.sessions.require(active.record.sessionKey);
      return {
        caller: {
          sessionKey: entry.key,
          agentId: entry.agentId,
          runId: params.runId,
          operator: connection.identity!.tokenName,
        },
        entry,
      };
    }
    if (!params.as)
      throw new SwitchboardError(
        "INVALID_REQUEST",
        "as: required (the session to act as) when no runId is given",
      );
    const key = await this.sessions.resolveInput(params.as, undefined, "as");
    const entry = await this.sessions.require(key);
    return {
      caller: { sessionKey: entry.key, agentId: entry.agentId, operator: connection.identity!.tokenName },
      entry,
    };
  }

  async invokeTool(
    connection: Connection,
    params: MethodParams<"tools.invoke">,
  ): Promise<Record<string, unknown>> {
    const { caller, entry } = await this.toolCaller(connection, params);
    if (caller.operator) {
      await this.audit.append({
        kind: "impersonation",
        actor: caller.operator,
        sessionKey: entry.key,
        data: { tool: params.tool, ...(caller.runId ? { runId: caller.runId } : {}) },
      });
    }
    const args = params.args ?? {};
    const toolCallId = params.toolCallId ?? randomUUID();
    const progress = (kind: "tool-call" | "tool-result") => {
      if (!caller.runId) return;
      this.bus.publish(
        "run.progress",
        { runId: caller.runId, sessionKey: entry.key, kind, name: params.tool, toolCallId },
        { sessionKey: entry.key, agentId: entry.agentId },
      );
    };
    progress("tool-call");
    const record = async (result: Record<string, unknown>) => {
      progress("tool-result");
      await this.sessions.append(entry.key, [
        {
          type: "message",
          label: entry.taint,
          ...(caller.runId ? { runId: caller.runId } : {}),
          message: {
            role: "toolCall",
            content: [{ type: "toolCall", id: toolCallId, name: params.tool, args }],
          },
        },
        {
          type: "message",
          // Only a successful result carries the tool's data; a refusal or error carries none.
          label:
            result.status === "ok" || result.status === "accepted"
              ? toolLevel(this.config.labels, params.tool)
              : entry.taint,
          ...(caller.runId ? { runId: caller.runId } : {}),
          message: {
            role: "toolResult",
            content: [{ type: "toolResult", toolCallId, name: params.tool, result }],
          },
        },
      ]);
      return result;
    };
    const gate = this.toolGate(entry, params.tool, args);
    if (!gate.allowed) return record({ status: "forbidden", error: gate.message ?? "tool not available" });
    const decision = await this.policy.enforce(
      this.backend.toolCallContext(entry, params.tool, args),
      caller.operator,
    );
    if (decision.action === "BLOCK") return record({ status: "forbidden", error: decision.message });
    const result = (await this.executor.invoke(params.tool, args, caller)) as Record<string, unknown>;
    if (result.status === "ok" || result.status === "accepted") {
      const label = toolLevel(this.config.labels, params.tool);
      await this.sessions.raiseTaint(
        entry.key,
        label,
        `result of tool ${params.tool}`,
        `tool:${params.tool}`,
      );
    }
    return record(result);
  }

  private async requireRunAccess(connection: Connection, runId: string): Promise<void> {
    if (connection.identity!.role === "operator") return;
    const record = this.scheduler.get(runId)?.record ?? (await this.store.runs.get(runId));
    if (!record) throw new SwitchboardError("NOT_FOUND", `run not found: ${runId}`);
    this.requireClientSession(connection, record.sessionKey);
  }

  /** Input from outside (a channel client or an operator) into a session. */
  private async input(
    connection: Connection,
    params: {
      sessionKey: string;
      message: string;
      idempotencyKey?: string | undefined;
      lane?: "main" | "nested" | "subagent" | undefined;
      timeoutSeconds?: number | undefined;
    },
    origin: "chat" | "agent",
  ): Promise<Record<string, unknown>> {
    const key = await this.sessions.resolveInput(params.sessionKey);
    this.requireClientSession(connection, key);
    if (params.idempotencyKey) {
      const existing = await this.store.runs.getByIdempotencyKey(params.idempotencyKey);
      if (existing) {
        if (existing.sessionKey !== key)
          throw new SwitchboardError("CONFLICT", "idempotencyKey: already used for another session");
        return { runId: existing.runId, status: "accepted" };
      }
    }
    const { entry } = await this.sessions.ensure(key);
    const trimmed = params.message.trim();
    if (trimmed === "/send" || trimmed.startsWith("/send ")) return this.sendCommand(entry, trimmed);
    const label: Level = this.sessions.inboundLevel(entry);
    const decision = await this.policy.enforce(
      { hook: "PRE_SEND", target: this.policy.facts(entry), dataLabel: label, text: params.message },
      connection.identity!.tokenName,
    );
    if (decision.action === "BLOCK")
      throw new SwitchboardError("FORBIDDEN", decision.message, { details: { ruleId: decision.ruleId } });
    await this.sessions.raiseTaint(
      key,
      label,
      `input on ${this.sessions.channel(entry)}`,
      `channel:${this.sessions.channel(entry)}`,
    );
    const { record } = await this.scheduler.enqueue({
      sessionKey: key,
      lane: params.lane ?? "main",
      origin,
      message: decision.text ?? params.message,
      provenance:
        origin === "chat"
          ? { kind: "user", channel: this.sessions.channel(entry) }
          : { kind: "operator", actor: connection.identity!.tokenName },
      label,
      timeoutSeconds: params.timeoutSeconds ?? this.agentTimeout(entry.agentId),
      ...(params.idempotencyKey ? { idempotencyKey: params.idempotencyKey } : {}),
    });
    return { runId: record.runId, status: "accepted" };
  }

  private agentTimeout(agentId: string): number {
    return this.sessions.agentConfig(agentId)?.timeoutSeconds ?? this.config.agents.defaults.timeoutSeconds;
  }

  /** `/send on|off|inherit` typed into a session by its owner. */
  private async sendCommand(entry: SessionEntry, text: string): Promise<Record<string, unknown>> {
    const argument = text.slice("/send".length).trim();
    const mapping: Record<string, "allow" | "deny" | null> = { on: "allow", off: "deny", inherit: null };
    let reply: string;
    if (!(argument in mapping)) {
      reply = "usage: /send on|off|inherit";
    } else {
      const value = mapping[argument]!;
      await this.sessions.update(
        entry.key,
        (current) => {
          if (value === null) delete current.sendPolicy;
          else current.sendPolicy = value;
          return current;
        },
        "send-policy",
      );
      reply = value === null ? "send policy: inherit" : `send policy: ${value}`;
    }
    const runId = randomUUID();
    const now = Date.now();
    await this.sessions.append(entry.key, [
      {
        type: "message",
        label: entry.taint,
        runId,
        message: { role: "user", content: [{ type: "text", text }] },
      },
      {
        type: "message",
        label: entry.taint,
        runId,
        message: { role: "system", content: [{ type: "text", text: reply }] },
      },
    ]);
    await this.store.runs.put({
      runId,
      sessionKey: entry.key,
      sessionId: entry.sessionId,
      agentId: entry.agentId,
      lane: "main",
      status: "ok",
      createdAt: now,
      startedAt: now,
      endedAt: now,
      origin: "chat",
      message: text,
      reply,
      attempts: 0,
    });
    return { runId, status: "accepted" };
  }

  private operatorHistory = async (params: MethodParams<"sessions.history">, connection: Connection) => {
    const key = await this.sessions.resolveInput(params.sessionKey);
    this.requireClientSession(connection, key);
    const entry = await this.sessions.require(key);
    const limit = Math.min(500, Math.max(1, Math.floor(params.limit ?? 50)));
    const read = await this.store.transcripts.read(entry.sessionId, {
      limit,
      maxBytes: HISTORY_CAP,
      filter: (item) =>
        item.type === "message" && (params.includeTools === true || item.message?.role !== "toolResult"),
      ...(params.before !== undefined ? { before: Math.floor(params.before) } : {}),
    });
    return capHistory(
      {
        status: "ok",
        sessionKey: displayKey(entry.key, undefined, this.sessions.mainKey),
        sessionId: entry.sessionId,
        messages: read.entries.map(toHistoryMessage),
        truncated: read.truncated,
        ...(read.nextBefore !== undefined ? { nextBefore: read.nextBefore } : {}),
      },
      HISTORY_CAP,
    );
  };

  private buildHandlers(): Record<MethodName, Handler> {
    const h: {
      [M in MethodName]: (
        params: MethodParams<M> & Record<string, never>,
        connection: Connection,
      ) => Promise<Record<string, unknown>>;
    } = {
      "sessions.list": async (params) => {
        const limit = Math.min(200, Math.max(1, Math.floor(params.limit ?? 50)));
        const kinds = params.kinds?.filter((kind) =>
          ["main", "group", "cron", "hook", "node", "subagent", "other"].includes(kind),
        );
        const result = await this.store.sessions.list(
          {
            limit,
            ...(kinds?.length ? { kinds } : {}),
            ...(params.activeMinutes && params.activeMinutes > 0
              ? { activeSince: Date.now() - params.activeMinutes * 60_000 }
              : {}),
            ...(params.agentId ? { agentId: params.agentId.toLowerCase() } : {}),
            ...(params.search ? { search: params.search } : {}),
            ...(params.label ? { label: params.label } : {}),
            ...(params.spawnedBy
              ? { spawnedBy: await this.sessions.resolveInput(params.spawnedBy, undefined, "spawnedBy") }
              : {}),
          },
          { classify: this.sessions.classify },
        );
        const messageLimit = Math.min(20, Math.max(0, Math.floor(params.messageLimit ?? 0)));
        const sessions = await this.backend.rowsWithMessages(result.entries, undefined, messageLimit);
        return { status: "ok", count: sessions.length, sessions, hidden: result.hidden };
      },
      "sessions.resolve": async (params) => {
        if (params.key !== undefined) {
          const key = await this.sessions.resolveInput(params.key, params.agentId, "key");
          const entry = await this.sessions.require(key);
          return { key: displayKey(entry.key, undefined, this.sessions.mainKey), sessionId: entry.sessionId };
        }
        if (params.sessionId !== undefined) {
          const key = await this.sessions.resolveInput(params.sessionId, undefined, "sessionId");
          const entry = await this.sessions.require(key);
          return { key: displayKey(entry.key, undefined, this.sessions.mainKey), sessionId: entry.sessionId };
        }
        const found = await this.store.sessions.list({
          label: params.label!,
          limit: 2,
          ...(params.agentId ? { agentId: params.agentId.toLowerCase() } : {}),
        });
        if (found.entries.length === 0)
          throw new SwitchboardError("NOT_FOUND", `no session has label ${params.label}`);
        if (found.entries.length > 1) {
          throw new SwitchboardError(
            "CONFLICT",
            `label ${params.label} is ambiguous: ${found.entries.map((e) => e.key).join(", ")}`,
          );
        }
        return { key: found.entries[0]!.key, sessionId: found.entries[0]!.sessionId };
      },
      "sessions.history": (params, connection) => this.operatorHistory(params, connection),
      "sessions.status": async (params, connection) => {
        const key = await this.sessions.resolveInput(params.sessionKey);
        this.requireClientSession(connection, key);
        return this.backend.statusOf(await this.sessions.require(key), undefined);
      },
      "sessions.create": async (params, connection) => {
        const key = await this.sessions.resolveInput(params.key, undefined, "key");
        const { entry, created } = await this.sessions.ensure(key, {
          ...(params.channel ? { channel: params.channel } : {}),
          ...(params.chatType ? { chatType: params.chatType } : {}),
          ...(params.label ? { label: params.label } : {}),
          ...(params.displayName ? { displayName: params.displayName } : {}),
          ...(params.clearance ? { clearance: params.clearance } : {}),
        });
        if (created) {
          await this.audit.append({
            kind: "session.created",
            actor: connection.identity!.tokenName,
            sessionKey: key,
            data: { clearance: entry.clearance },
          });
        }
        return { key: entry.key, sessionId: entry.sessionId, created };
      },
      "sessions.patch": async (params, connection) => {
        const key = await this.sessions.resolveInput(params.key, undefined, "key");
        const entry = await this.sessions.update(
          key,
          (current) => {
            const set = <K extends "label" | "sendPolicy" | "model" | "displayName">(
              field: K,
              value: unknown,
            ) => {
              if (value === undefined) return;
              if (value === null) delete current[field];
              else (current as Record<string, unknown>)[field] = value;
            };
            set("label", params.label);
            set("sendPolicy", params.sendPolicy);
            set("model", params.model);
            set("displayName", params.displayName);
            if (params.clearance) {
              current.clearance = params.clearance;
              current.clearancePinned = true;
            }
            return current;
          },
          "patched",
        );
        await this.audit.append({
          kind: "session.patched",
          actor: connection.identity!.tokenName,
          sessionKey: key,
          data: { fields: Object.keys(params).filter((field) => field !== "key") },
        });
        return { key, entry };
      },
      "sessions.reset": async (params, connection) => {
        const key = await this.sessions.resolveInput(params.key, undefined, "key");
        const entry = await this.sessions.reset(key);
        await this.audit.append({
          kind: "session.reset",
          actor: connection.identity!.tokenName,
          sessionKey: key,
          data: { sessionId: entry.sessionId },
        });
        return { key, sessionId: entry.sessionId };
      },
      "sessions.delete": async (params, connection) => {
        const key = await this.sessions.resolveInput(params.key, undefined, "key");
        const entry = await this.sessions.require(key);
        if (this.sessions.kind(entry) === "main")
          throw new SwitchboardError("FORBIDDEN", "the main session cannot be deleted");
        await this.sessions.delete(key);
        await this.audit.append({
          kind: "session.deleted",
          actor: connection.identity!.tokenName,
          sessionKey: key,
          data: {},
        });
        return { key, deleted: true };
      },
      "chat.send": (params, connection) => this.input(connection, params, "chat"),
      agent: (params, connection) => this.input(connection, params, "agent"),
      "agent.wait": async (params, connection) => {
        await this.requireRunAccess(connection, params.runId);
        return { ...(await this.scheduler.wait(params.runId, params.timeoutMs ?? 30_000)) };
      },
      "agents.list": async () => ({
        agents: this.config.agents.list.map((agent) => ({
          id: agent.id,
          ...(agent.name ? { name: agent.name } : {}),
          configured: true,
          connected: this.scheduler.hasWorker(agent.id),
          workers: this.scheduler.workerCount(agent.id),
        })),
      }),
      "tools.list": async (params, connection) => {
        const { entry } = await this.toolCaller(connection, params);
        return { tools: this.definitionsFor(this.toolsFor(entry)).list };
      },
      "tools.invoke": (params, connection) => this.invokeTool(connection, params),
      "policy.simulate": async (params, connection) => {
        const { caller } = await this.toolCaller(connection, { as: params.as });
        return (await this.executor.invoke(
          "simulate_tool_call",
          { tool_name: params.tool, args: params.args ?? {} },
          caller,
        )) as Record<string, unknown>;
      },
      "audit.tail": async (params) => ({ entries: await this.audit.tail(params.limit ?? 50, params.after) }),
      "audit.verify": async () => ({ ...(await this.audit.verify()) }),
      "events.subscribe": async (params, connection) => {
        let sessionKey: string | undefined;
        if (params.sessionKey) {
          sessionKey = await this.sessions.resolveInput(params.sessionKey);
          this.requireClientSession(connection, sessionKey);
        }
        const accepts = this.eventFilter(connection, sessionKey);
        const seq = this.bus.currentSeq;
        if (!connection.subscribed) {
          connection.subscribed = true;
          const unsubscribe = this.bus.subscribe({
            accepts: (event) => connection.subscriptionFilter?.(event) ?? false,
            deliver: (event) => {
              if (event.seq <= connection.lastEventSeq) return;
              connection.lastEventSeq = event.seq;
              connection.send({ type: "event", event: event.event, seq: event.seq, payload: event.payload });
            },
          });
          connection.onClosed(unsubscribe);
        }
        connection.subscriptionFilter = accepts;
        if (params.after !== undefined) {
          // Replay synchronously: no live event can interleave, so order and uniqueness hold.
          for (const event of this.bus.replay(params.after, accepts)) {
            if (event.seq <= connection.lastEventSeq) continue;
            connection.lastEventSeq = event.seq;
            connection.send({ type: "event", event: event.event, seq: event.seq, payload: event.payload });
          }
        } else {
          connection.lastEventSeq = Math.max(connection.lastEventSeq, seq);
        }
        return { subscribed: true, seq };
      },
      "run.progress": async (params, connection) => {
        const record = this.scheduler.requireHeldBy(params.runId, connection);
        if (params.kind === "tool-call" || params.kind === "tool-result") {
          const entry = await this.sessions.require(record.sessionKey);
          const name = params.name ?? "tool";
          const id = params.toolCallId ?? randomUUID();
          const label = params.kind === "tool-result" ? toolLevel(this.config.labels, name) : entry.taint;
          if (params.kind === "tool-result") {
            // A worker-executed tool's result is data taken in at the tool's label: no read-up.
            const decision = await this.policy.enforce(
              this.backend.toolCallContext(entry, name, params.args ?? {}),
            );
            if (decision.action === "BLOCK") {
              throw new SwitchboardError("FORBIDDEN", decision.message, {
                details: { ruleId: decision.ruleId },
              });
            }
          }
          await this.sessions.append(record.sessionKey, [
            params.kind === "tool-call"
              ? {
                  type: "message",
                  label,
                  runId: record.runId,
                  message: {
                    role: "toolCall",
                    content: [{ type: "toolCall", id, name, args: params.args ?? {} }],
                  },
                }
              : {
                  type: "message",
                  label,
                  runId: record.runId,
                  message: {
                    role: "toolResult",
                    content: [{ type: "toolResult", toolCallId: id, name, result: params.result ?? null }],
                  },
                },
          ]);
          if (params.kind === "tool-result")
            await this.sessions.raiseTaint(
              record.sessionKey,
              label,
              `result of tool ${name}`,
              `tool:${name}`,
            );
        }
        this.bus.publish(
          "run.progress",
          {
            runId: record.runId,
            sessionKey: record.sessionKey,
            kind: params.kind,
            ...(params.text !== undefined ? { text: params.text } : {}),
            ...(params.name !== undefined ? { name: params.name } : {}),
            ...(params.toolCallId !== undefined ? { toolCallId: params.toolCallId } : {}),
          },
          { sessionKey: record.sessionKey, agentId: record.agentId },
        );
        return {};
      },
      "run.complete": async (params, connection) => {
        await this.scheduler.complete(params.runId, connection, params.reply, params.usage);
        return {};
      },
      "run.fail": async (params, connection) => {
        await this.scheduler.fail(params.runId, connection, params.error);
        return {};
      },
    };
    void METHOD_NAMES;
    return h as unknown as Record<MethodName, Handler>;
  }
}

export function startGateway(options: GatewayOptions = {}): Promise<Gateway> {
  return Gateway.start(options);
}
