import type { AddressInfo } from "node:net";
import {
  CloseCodes,
  ConnectParamsSchema,
  type ConnectResult,
  EVENT_NAMES,
  type EventName,
  type EventPayload,
  Events,
  invalidRequestFromZod,
  isMethodName,
  isSwitchboardError,
  METHOD_ROLES,
  type MethodName,
  type MethodResult,
  Methods,
  methodsForRole,
  RequestFrameSchema,
  type Role,
  SwitchboardError,
  type WireError,
} from "@switchboard/core";
import { type WebSocket as ServerSocket, WebSocketServer } from "ws";
import type { z } from "zod";

/**
 * An in-process stand-in for the gateway, speaking the real protocol over a real `ws` server on
 * 127.0.0.1: handshake with tokens and roles, schema-checked params, events with a global `seq`
 * and replay after `after`, a tiny run scheduler for agent workers, heartbeats, and knobs to drop
 * or freeze connections. It is for tests of code built on the SDK; it enforces no policy.
 */

/** Tokens the fake accepts by default, one per role. */
export const FAKE_TOKENS = {
  operator: "operator-token",
  client: "client-token",
  agent: "agent-token",
  mcp: "mcp-token",
} as const satisfies Record<Role, string>;

export interface FakeGatewayOptions {
  /** Port on 127.0.0.1 (default 0: any free port). */
  port?: number;
  /** token → the role it may connect as (default: `FAKE_TOKENS`). */
  tokens?: Record<string, Role>;
  /** Ping interval, also announced in `limits.heartbeatMs` (default 15 000). */
  heartbeatMs?: number;
  /** Whether `events.subscribe` answers before or after sending the replay (the protocol allows both). */
  replay?: "before-response" | "after-response";
  maxPayload?: number;
  /** How many past events are kept for replay (default 10 000). */
  eventLogSize?: number;
}

/** Params after the method's schema ran (defaults applied). */
export type MethodInput<M extends MethodName> = z.output<(typeof Methods)[M]["params"]>;

export interface FakeConnection {
  readonly id: string;
  readonly role: Role;
  readonly agents: readonly string[];
  readonly sessionKey: string | undefined;
  readonly clientName: string;
  readonly subscriptions: Array<{ sessionKey: string | undefined }>;
  readonly heldRuns: Set<string>;
  /** Runs the worker announced it executes at once (`connect` `concurrency`); unlimited when absent. */
  readonly concurrency: number | undefined;
  open: boolean;
}

export interface FakeRequest {
  readonly connectionId: string;
  readonly id: string;
  readonly method: string;
  readonly params: Record<string, unknown> | undefined;
}

export interface FakeRun {
  readonly runId: string;
  readonly sessionKey: string;
  readonly agentId: string;
  readonly message: string;
  status: "queued" | "running" | "ok" | "error" | "timeout";
  attempt: number;
  assignedTo: string | undefined;
  deadline: number | undefined;
  /** Sent as `run.assigned.model` (a model name or a model config object). */
  model?: EventPayload<"run.assigned">["model"];
  reply?: string;
  error?: string;
  startedAt?: number;
  endedAt?: number;
}

export interface FakeToolCall {
  readonly connectionId: string;
  readonly tool: string;
  readonly args: Record<string, unknown>;
  readonly runId: string | undefined;
}

export type FakeHandler<M extends MethodName> = (
  params: MethodInput<M>,
  connection: FakeConnection,
) => MethodResult<M> | Promise<MethodResult<M>>;

type AnyHandler = (params: Record<string, unknown>, connection: FakeConnection) => unknown;

interface LoggedEvent {
  readonly seq: number;
  readonly event: EventName;
  readonly payload: Record<string, unknown>;
  readonly sessionKey: string | undefined;
  /** Directed at one connection (e.g. `run.assigned`): never broadcast nor replayed. */
  readonly to: string | undefined;
}

interface SocketState {
  readonly socket: ServerSocket;
  connection: FakeConnection | undefined;
}

export class FakeGateway {
  readonly url: string;
  /** The epoch: a new id after {@link resetEventLog} with `newEpoch`, like a restarted gateway. */
  instanceId = newInstanceId();
  /** When set, sent as `server.epoch` (a cluster's stream id, shared by its instances). */
  epoch: string | undefined;
  /** Every request received after a handshake, in arrival order. */
  readonly requests: FakeRequest[] = [];
  readonly runs = new Map<string, FakeRun>();
  readonly toolCalls: FakeToolCall[] = [];
  /** Successful handshakes so far (a reconnect adds one). */
  handshakes = 0;

  private readonly server: WebSocketServer;
  private readonly options: Required<FakeGatewayOptions>;
  private readonly sockets = new Set<SocketState>();
  private readonly handlers = new Map<string, AnyHandler>();
  private readonly eventLog: LoggedEvent[] = [];
  private readonly waiters = new Set<() => boolean>();
  private readonly runWaiters = new Map<string, Set<() => void>>();
  private readonly heartbeat: ReturnType<typeof setInterval>;
  private seq = 0;
  private nextConnection = 0;
  private nextRun = 0;
  private frozen = false;

  private constructor(server: WebSocketServer, options: Required<FakeGatewayOptions>) {
    this.server = server;
    this.options = options;
    const { port } = server.address() as AddressInfo;
    this.url = `ws://127.0.0.1:${port}`;
    server.on("connection", (socket) => this.accept(socket));
    this.heartbeat = setInterval(() => {
      if (this.frozen) return;
      for (const state of this.sockets)
        if (state.socket.readyState === state.socket.OPEN) state.socket.ping();
    }, options.heartbeatMs);
    this.installBuiltins();
  }

  static async start(options: FakeGatewayOptions = {}): Promise<FakeGateway> {
    const resolved: Required<FakeGatewayOptions> = {
      port: options.port ?? 0,
      tokens: options.tokens ?? {
        [FAKE_TOKENS.operator]: "operator",
        [FAKE_TOKENS.client]: "client",
        [FAKE_TOKENS.agent]: "agent",
      },
      heartbeatMs: options.heartbeatMs ?? 15_000,
      replay: options.replay ?? "after-response",
      maxPayload: options.maxPayload ?? 1024 * 1024,
      eventLogSize: options.eventLogSize ?? 10_000,
    };
    const server = new WebSocketServer({
      host: "127.0.0.1",
      port: resolved.port,
      maxPayload: resolved.maxPayload,
    });
    await new Promise<void>((resolve, reject) => {
      server.once("listening", resolve);
      server.once("error", reject);
    });
    return new FakeGateway(server, resolved);
  }

  /** Replaces (or adds) the handler of a method; throw a `SwitchboardError` to answer with an error. */
  handle<M extends MethodName>(method: M, handler: FakeHandler<M>): void {
    this.handlers.set(method, handler as unknown as AnyHandler);
  }

  /** Open, handshaken connections. */
  connections(): FakeConnection[] {
    return [...this.sockets].flatMap((state) => (state.connection?.open ? [state.connection] : []));
  }

  requestsFor(method: string): FakeRequest[] {
    return this.requests.filter((request) => request.method === method);
  }

  /** Resolves once `check` returns something other than undefined (checked now and after every change). */
  waitFor<T>(check: () => T | undefined): Promise<T> {
    const now = check();
    if (now !== undefined) return Promise.resolve(now);
    return new Promise((resolve) => {
      const waiter = (): boolean => {
        const value = check();
        if (value === undefined) return false;
        resolve(value);
        return true;
      };
      this.waiters.add(waiter);
    });
  }

  /** Resolves with the `count`-th request of `method` (1-based), counting those already received. */
  waitForRequest(method: string, count = 1): Promise<FakeRequest> {
    return this.waitFor(() => this.requestsFor(method)[count - 1]);
  }

  waitForHandshakes(count: number): Promise<number> {
    return this.waitFor(() => (this.handshakes >= count ? this.handshakes : undefined));
  }

  /** Emits an event with the next `seq`: to subscribers, or only to `to` (a connection id). */
  emit<E extends EventName>(event: E, payload: EventPayload<E>, options: { to?: string } = {}): number {
    const checked = Events[event].parse(payload) as Record<string, unknown>;
    this.seq += 1;
    const sessionKey =
      typeof checked.sessionKey === "string" ? checked.sessionKey : (checked.key as string | undefined);
    const logged: LoggedEvent = { seq: this.seq, event, payload: checked, sessionKey, to: options.to };
    this.eventLog.push(logged);
    if (this.eventLog.length > this.options.eventLogSize) this.eventLog.shift();
    for (const state of this.sockets) {
      const connection = state.connection;
      if (!connection?.open) continue;
      if (options.to !== undefined ? connection.id === options.to : this.subscribedTo(connection, logged)) {
        this.sendEvent(state.socket, logged);
      }
    }
    return this.seq;
  }

  /** The seq of the last event emitted (0 before any). */
  get headSeq(): number {
    return this.seq;
  }

  /**
   * Drops every connection: abruptly (like a network failure, close code 1006) by default, or
   * with a close code, e.g. 4003 to simulate a revoked token.
   */
  dropConnections(options: { code?: number; reason?: string } = {}): void {
    for (const state of this.sockets) {
      if (options.code === undefined) state.socket.terminate();
      else state.socket.close(options.code, options.reason ?? "");
    }
  }

  /**
   * Forgets all events and starts `seq` again from 0, like a gateway restarted without its event log
   * (and, with `newEpoch`, with a new `instanceId`, as a restarted process has).
   */
  resetEventLog(options: { newEpoch?: boolean } = {}): void {
    this.eventLog.length = 0;
    this.seq = 0;
    if (options.newEpoch) this.instanceId = newInstanceId();
  }

  /** Stops answering frames and pinging while keeping sockets open: a half-open connection. */
  freeze(): void {
    this.frozen = true;
  }

  thaw(): void {
    this.frozen = false;
  }

  /** Sends a raw text frame to every open connection (for malformed-frame tests). */
  sendRaw(text: string): void {
    for (const state of this.sockets) if (state.connection?.open) state.socket.send(text);
  }

  /** Ends a run from the test's side, as if its worker had completed it. */
  completeRun(runId: string, reply: string): void {
    this.endRun(this.requireRun(runId), "ok", { reply });
  }

  failRun(runId: string, error: string): void {
    this.endRun(this.requireRun(runId), "error", { error });
  }

  /** Creates a run on a session as `chat.send` would, and assigns it to a worker if one serves its agent. */
  startRun(
    sessionKey: string,
    message: string,
    timeoutSeconds?: number,
    extra: { model?: EventPayload<"run.assigned">["model"] } = {},
  ): FakeRun {
    this.nextRun += 1;
    const run: FakeRun = {
      ...(extra.model !== undefined ? { model: extra.model } : {}),
      runId: `run-${this.nextRun}`,
      sessionKey,
      agentId: agentOf(sessionKey),
      message,
      status: "queued",
      attempt: 0,
      assignedTo: undefined,
      deadline: timeoutSeconds ? Date.now() + timeoutSeconds * 1000 : undefined,
    };
    this.runs.set(run.runId, run);
    if (run.deadline !== undefined) {
      const timer = setTimeout(() => {
        if (!isEnded(run)) this.endRun(run, "timeout", { error: "run deadline passed" });
      }, run.deadline - Date.now());
      timer.unref();
    }
    this.assign(run);
    this.changed();
    return run;
  }

  async close(): Promise<void> {
    clearInterval(this.heartbeat);
    for (const state of this.sockets) state.socket.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // ---- connections -------------------------------------------------------------------------

  private accept(socket: ServerSocket): void {
    const state: SocketState = { socket, connection: undefined };
    this.sockets.add(state);
    const handshakeTimer = setTimeout(() => {
      if (!state.connection) socket.close(CloseCodes.handshakeTimeout, "no connect request");
    }, 5_000);
    socket.on("message", (data, isBinary) => {
      if (this.frozen) return;
      void this.onFrame(state, isBinary ? undefined : data.toString());
    });
    socket.on("close", () => {
      clearTimeout(handshakeTimer);
      this.sockets.delete(state);
      if (state.connection) {
        state.connection.open = false;
        this.onDisconnect(state.connection);
      }
      this.changed();
    });
  }

  private async onFrame(state: SocketState, text: string | undefined): Promise<void> {
    let raw: unknown;
    try {
      raw = text === undefined ? undefined : JSON.parse(text);
    } catch {
      raw = undefined;
    }
    const frame = RequestFrameSchema.safeParse(raw);
    if (!frame.success) {
      const id = typeof raw === "object" && raw !== null ? (raw as { id?: unknown }).id : undefined;
      this.respondError(
        state.socket,
        typeof id === "string" ? id : null,
        invalidRequestFromZod(frame.error, "frame"),
      );
      return;
    }
    const { id, method, params } = frame.data;
    if (!state.connection) {
      this.onConnect(state, id, method, params);
      return;
    }
    const connection = state.connection;
    this.requests.push({ connectionId: connection.id, id, method, params });
    this.changed();
    if (method === "connect") {
      this.respondError(state.socket, id, new SwitchboardError("INVALID_REQUEST", "already connected"));
      state.socket.close(CloseCodes.protocolError, "second connect");
      return;
    }
    if (!isMethodName(method)) {
      this.respondError(
        state.socket,
        id,
        new SwitchboardError("INVALID_REQUEST", `unknown method "${method}"`),
      );
      return;
    }
    if (!METHOD_ROLES[method].includes(connection.role)) {
      this.respondError(
        state.socket,
        id,
        new SwitchboardError("FORBIDDEN", `${method} is not allowed for role ${connection.role}`),
      );
      return;
    }
    const parsed = Methods[method].params.safeParse(params ?? {});
    if (!parsed.success) {
      this.respondError(state.socket, id, invalidRequestFromZod(parsed.error, "params"));
      return;
    }
    const handler = this.handlers.get(method);
    if (!handler) {
      this.respondError(
        state.socket,
        id,
        new SwitchboardError("INTERNAL", `the fake gateway has no handler for ${method}`),
      );
      return;
    }
    try {
      const result = await handler(parsed.data as Record<string, unknown>, connection);
      if (this.frozen) return;
      this.send(state.socket, { type: "res", id, ok: true, result });
      if (method === "events.subscribe" && this.options.replay === "after-response") {
        this.replay(state, parsed.data as MethodInput<"events.subscribe">);
      }
    } catch (error) {
      this.respondError(
        state.socket,
        id,
        isSwitchboardError(error) ? error : new SwitchboardError("INTERNAL", String(error)),
      );
    }
  }

  private onConnect(
    state: SocketState,
    id: string,
    method: string,
    params: Record<string, unknown> | undefined,
  ): void {
    const { socket } = state;
    if (method !== "connect") {
      this.respondError(
        socket,
        id,
        new SwitchboardError("INVALID_REQUEST", "the first frame must be a connect request"),
      );
      socket.close(CloseCodes.protocolError, "expected connect");
      return;
    }
    const parsed = ConnectParamsSchema.safeParse(params ?? {});
    if (!parsed.success) {
      this.respondError(socket, id, invalidRequestFromZod(parsed.error, "params"));
      socket.close(CloseCodes.protocolError, "bad connect");
      return;
    }
    const connect = parsed.data;
    const allowedRole = this.options.tokens[connect.auth.token];
    if (allowedRole === undefined || allowedRole !== connect.role) {
      const error =
        allowedRole === undefined
          ? new SwitchboardError("UNAUTHORIZED", "unknown token")
          : new SwitchboardError("FORBIDDEN", `this token may not connect as ${connect.role}`);
      this.respondError(socket, id, error);
      socket.close(CloseCodes.unauthorized, error.message);
      return;
    }
    this.nextConnection += 1;
    const connection: FakeConnection = {
      id: `conn-${this.nextConnection}`,
      role: connect.role,
      agents: connect.agents ?? [],
      sessionKey: connect.sessionKey,
      clientName: connect.client.name,
      subscriptions: [],
      heldRuns: new Set(),
      concurrency: connect.concurrency,
      open: true,
    };
    state.connection = connection;
    const result: ConnectResult = {
      protocol: 1,
      server: {
        name: "switchboard",
        version: "0.0.0-fake",
        instanceId: this.instanceId,
        ...(this.epoch !== undefined ? { epoch: this.epoch } : {}),
      },
      connectionId: connection.id,
      role: connection.role,
      methods: methodsForRole(connection.role),
      events: [...EVENT_NAMES],
      limits: {
        maxPayload: this.options.maxPayload,
        maxBufferedBytes: 4 * 1024 * 1024,
        heartbeatMs: this.options.heartbeatMs,
      },
    };
    this.send(socket, { type: "res", id, ok: true, result });
    this.handshakes += 1;
    if (connection.role === "agent") {
      for (const run of this.runs.values()) if (run.status === "queued") this.assign(run);
    }
    this.changed();
  }

  private onDisconnect(connection: FakeConnection): void {
    // protocol.md: a worker's runs are reassigned once to another worker, else they end in error.
    for (const runId of connection.heldRuns) {
      const run = this.runs.get(runId);
      if (!run || isEnded(run)) continue;
      run.assignedTo = undefined;
      run.status = "queued";
      if (run.attempt >= 2 || !this.assign(run))
        this.endRun(run, "error", { error: "the agent worker disconnected" });
    }
    connection.heldRuns.clear();
  }

  // ---- built-in methods ----------------------------------------------------------------------

  private installBuiltins(): void {
    this.handle("events.subscribe", (params, connection) => {
      const sessionKey =
        params.sessionKey ?? (connection.role === "client" ? connection.sessionKey : undefined);
      if (!connection.subscriptions.some((subscription) => subscription.sessionKey === sessionKey)) {
        connection.subscriptions.push({ sessionKey });
      }
      const state = [...this.sockets].find((candidate) => candidate.connection === connection);
      if (state && this.options.replay === "before-response") this.replay(state, params);
      return { subscribed: true, seq: this.seq };
    });
    const accept = (params: MethodInput<"chat.send"> | MethodInput<"agent">, connection: FakeConnection) => {
      if (
        connection.role === "client" &&
        connection.sessionKey !== undefined &&
        connection.sessionKey !== params.sessionKey
      ) {
        throw new SwitchboardError("FORBIDDEN", `this connection acts for ${connection.sessionKey} only`);
      }
      const timeoutSeconds = "timeoutSeconds" in params ? params.timeoutSeconds : undefined;
      const run = this.startRun(params.sessionKey, params.message, timeoutSeconds);
      return { runId: run.runId, status: "accepted" as const };
    };
    this.handle("chat.send", accept);
    this.handle("agent", accept);
    this.handle("agent.wait", async (params) => {
      const run = this.requireRun(params.runId);
      if (!isEnded(run)) await this.waitForRunEnd(run, params.timeoutMs ?? 30_000);
      return {
        runId: run.runId,
        status: isEnded(run) ? (run.status as "ok" | "error" | "timeout") : "timeout",
        ...(run.reply !== undefined ? { reply: run.reply } : {}),
        ...(run.error !== undefined ? { error: run.error } : {}),
        ...(run.startedAt !== undefined ? { startedAt: run.startedAt } : {}),
        ...(run.endedAt !== undefined ? { endedAt: run.endedAt } : {}),
      };
    });
    this.handle("run.progress", (params, connection) => {
      const run = this.heldRun(params.runId, connection);
      this.emit("run.progress", {
        runId: run.runId,
        sessionKey: run.sessionKey,
        kind: params.kind,
        ...(params.text !== undefined ? { text: params.text } : {}),
        ...(params.name !== undefined ? { name: params.name } : {}),
        ...(params.toolCallId !== undefined ? { toolCallId: params.toolCallId } : {}),
      });
      return {};
    });
    this.handle("run.complete", (params, connection) => {
      this.endRun(this.heldRun(params.runId, connection), "ok", { reply: params.reply });
      return {};
    });
    this.handle("run.fail", (params, connection) => {
      this.endRun(this.heldRun(params.runId, connection), "error", { error: params.error });
      return {};
    });
    this.handle("tools.invoke", (params, connection) => {
      let run: FakeRun | undefined;
      if (connection.role === "agent") {
        if (params.runId === undefined)
          throw new SwitchboardError("INVALID_REQUEST", "params.runId: is required for role agent");
        run = this.heldRun(params.runId, connection);
      }
      this.toolCalls.push({
        connectionId: connection.id,
        tool: params.tool,
        args: params.args,
        runId: params.runId,
      });
      this.changed();
      return { status: "ok", tool: params.tool, args: params.args, caller: run?.sessionKey ?? params.as };
    });
    this.handle("tools.list", () => ({ tools: [] }));
    this.handle("agents.list", () => {
      const ids = new Set(this.connections().flatMap((connection) => connection.agents));
      return {
        agents: [...ids].map((id) => ({
          id,
          configured: true,
          connected: true,
          workers: this.connections().filter((connection) => connection.agents.includes(id)).length,
        })),
      };
    });
  }

  // ---- runs ----------------------------------------------------------------------------------

  private assign(run: FakeRun): boolean {
    const candidates = [...this.sockets]
      .map((state) => state.connection)
      .filter(
        (connection): connection is FakeConnection =>
          connection?.open === true &&
          connection.agents.includes(run.agentId) &&
          connection.heldRuns.size < (connection.concurrency ?? Number.POSITIVE_INFINITY),
      )
      .sort((a, b) => a.heldRuns.size - b.heldRuns.size);
    const worker = candidates[0];
    if (!worker) return false;
    run.status = "running";
    run.attempt += 1;
    run.assignedTo = worker.id;
    run.startedAt ??= Date.now();
    worker.heldRuns.add(run.runId);
    this.emit(
      "run.assigned",
      {
        runId: run.runId,
        sessionKey: run.sessionKey,
        agentId: run.agentId,
        lane: "main",
        input: { message: run.message, provenance: { kind: "user" }, context: "" },
        history: [],
        tools: [],
        attempt: run.attempt,
        ...(run.deadline !== undefined ? { deadline: run.deadline } : {}),
        ...(run.model !== undefined ? { model: run.model } : {}),
      },
      { to: worker.id },
    );
    this.emit("run.started", {
      runId: run.runId,
      sessionKey: run.sessionKey,
      agentId: run.agentId,
      lane: "main",
      startedAt: run.startedAt,
    });
    return true;
  }

  private endRun(
    run: FakeRun,
    status: "ok" | "error" | "timeout",
    outcome: { reply?: string; error?: string },
  ): void {
    if (isEnded(run))
      throw new SwitchboardError("CONFLICT", `run ${run.runId} already ended (${run.status})`);
    run.status = status;
    run.reply = outcome.reply;
    run.error = outcome.error;
    run.endedAt = Date.now();
    for (const connection of this.connections()) connection.heldRuns.delete(run.runId);
    this.emit("run.ended", {
      runId: run.runId,
      sessionKey: run.sessionKey,
      status,
      ...(outcome.reply !== undefined ? { reply: outcome.reply } : {}),
      ...(outcome.error !== undefined ? { error: outcome.error } : {}),
    });
    // A freed worker slot takes the oldest queued run.
    for (const queued of this.runs.values()) {
      if (queued.status === "queued" && queued !== run && this.assign(queued)) break;
    }
    for (const wake of this.runWaiters.get(run.runId) ?? []) wake();
    this.runWaiters.delete(run.runId);
    this.changed();
  }

  private waitForRunEnd(run: FakeRun, timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, timeoutMs);
      const waiters = this.runWaiters.get(run.runId) ?? new Set();
      this.runWaiters.set(run.runId, waiters);
      waiters.add(done);
      function done(): void {
        clearTimeout(timer);
        waiters.delete(done);
        resolve();
      }
    });
  }

  private requireRun(runId: string): FakeRun {
    const run = this.runs.get(runId);
    if (!run) throw new SwitchboardError("NOT_FOUND", `no run ${runId}`);
    return run;
  }

  private heldRun(runId: string, connection: FakeConnection): FakeRun {
    const run = this.requireRun(runId);
    if (!connection.heldRuns.has(runId)) {
      throw new SwitchboardError("FORBIDDEN", `run ${runId} is not held by this connection`);
    }
    return run;
  }

  // ---- frames --------------------------------------------------------------------------------

  private subscribedTo(connection: FakeConnection, event: LoggedEvent): boolean {
    return connection.subscriptions.some(
      (subscription) => subscription.sessionKey === undefined || subscription.sessionKey === event.sessionKey,
    );
  }

  private replay(state: SocketState, params: MethodInput<"events.subscribe">): void {
    if (params.after === undefined || !state.connection) return;
    const connection = state.connection;
    const sessionKey =
      params.sessionKey ?? (connection.role === "client" ? connection.sessionKey : undefined);
    for (const event of this.eventLog) {
      if (event.seq <= params.after || event.to !== undefined) continue;
      if (sessionKey === undefined || event.sessionKey === sessionKey) this.sendEvent(state.socket, event);
    }
  }

  private sendEvent(socket: ServerSocket, event: LoggedEvent): void {
    this.send(socket, { type: "event", event: event.event, seq: event.seq, payload: event.payload });
  }

  private respondError(socket: ServerSocket, id: string | null, error: SwitchboardError): void {
    const wire: WireError = error.toWire();
    this.send(socket, { type: "res", id, ok: false, error: wire });
  }

  private send(socket: ServerSocket, frame: unknown): void {
    if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(frame));
  }

  private changed(): void {
    for (const waiter of [...this.waiters]) if (waiter()) this.waiters.delete(waiter);
  }
}

function agentOf(sessionKey: string): string {
  return /^agent:([^:]+):/.exec(sessionKey)?.[1] ?? "main";
}

function isEnded(run: FakeRun): boolean {
  return run.status === "ok" || run.status === "error" || run.status === "timeout";
}

function newInstanceId(): string {
  return `fake-${Math.random().toString(36).slice(2, 10)}`;
}
