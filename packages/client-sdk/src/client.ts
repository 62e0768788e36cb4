import {
  CloseCodes,
  type ConnectParams,
  type ConnectResult,
  ConnectResultSchema,
  type EventName,
  formatZodIssues,
  isMethodName,
  isSwitchboardError,
  METHOD_ROLES,
  type MethodName,
  type MethodParams,
  type MethodResult,
  Methods,
  PROTOCOL_VERSION,
  type Role,
  ServerFrameSchema,
  SwitchboardError,
} from "@switchboard/core";
import WebSocket from "ws";
import { backoffDelay } from "./backoff";
import {
  abortReason,
  connectionLostError,
  describeError,
  invalidParams,
  invalidResult,
  isFatalHandshakeError,
  timeoutError,
  toSwitchboardError,
} from "./client-errors";
import { type ClientOptions, parseClientOptions, type ResolvedClientOptions } from "./client-options";
import {
  EventDispatcher,
  type EventsOptions,
  type TypedEvent,
  type TypedEventListener,
} from "./event-dispatcher";
import { type Logger, silentLogger } from "./logger";
import {
  buildNamespaces,
  type CallArgs,
  type CallOptions,
  type MethodNamespace,
  READ_ONLY_METHODS,
} from "./method-shortcuts";
import {
  describeSocketError,
  dropSocket,
  hasPingEvents,
  messageText,
  SOCKET_CLOSING,
  SOCKET_OPEN,
  type WebSocketConstructor,
  type WebSocketLike,
} from "./websocket";

export type { EventsOptions, TypedEvent, TypedEventListener } from "./event-dispatcher";

export type ConnectionState = "connecting" | "open" | "reconnecting" | "closed";

export type StateListener = (state: ConnectionState, previous: ConnectionState) => void;

/**
 * Events numbered above `after` and below `before` may have happened and can no longer be replayed
 * (the gateway's window moved past them, or a restarted gateway never held them): what they would
 * have told is to be read again (e.g. `sessions.history`).
 */
export interface MissedEvents {
  after: number;
  before: number;
}
export type MissedEventsListener = (missed: MissedEvents) => void;

export interface ClientStartOptions {
  /**
   * Give up (and close) if the very first connection attempt fails instead of retrying it.
   * `connect()` sets it so a wrong URL or token surfaces at once; reconnects after a successful
   * first handshake follow `reconnect` either way.
   */
  failFast?: boolean;
}

/** `agent.wait` without `timeoutMs` waits this long on the gateway (protocol.md). */
const DEFAULT_AGENT_WAIT_MS = 30_000;
/** The client-side deadline of a wait leaves the gateway this long to answer `status: "timeout"`. */
const WAIT_GRACE_MS = 5_000;
/** The gateway pings every `heartbeatMs`; this many silent intervals mean the connection is dead. */
const SILENT_INTERVALS_BEFORE_DROP = 2.5;
const CLOSE_HANDSHAKE_BUDGET_MS = 2_000;
/** A connection that lasts this long is stable: the next drop reconnects from the first backoff step. */
const STABLE_CONNECTION_MS = 2_000;

interface PendingCall {
  readonly id: string;
  readonly method: string;
  params: Record<string, unknown>;
  /** Handshake and re-subscription requests: bound to one socket, never queued or re-sent. */
  readonly internal: boolean;
  readonly retryOnReconnect: boolean;
  /** Sent on the current socket (an unsent call waits for the next open connection). */
  sent: boolean;
  sends: number;
  readonly createdAt: number;
  /** For `agent.wait`: how long the caller asked the gateway to wait. */
  readonly serverWaitMs: number | undefined;
  readonly onResult: (result: Record<string, unknown>) => void;
  readonly reject: (error: unknown) => void;
  readonly cleanup: () => void;
}

/** One socket's life, from construction to close; callbacks of a replaced socket are ignored. */
interface SocketSession {
  readonly socket: WebSocketLike;
  /** The socket opened (a failure after this is a lost connection, before it a failed connect). */
  opened: boolean;
  ended: boolean;
  lastError: string | undefined;
  dropReason: SwitchboardError | undefined;
  connectTimer: ReturnType<typeof setTimeout> | undefined;
  heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  /** Resets the backoff once the connection has lasted (see `STABLE_CONNECTION_MS`). */
  stableTimer: ReturnType<typeof setTimeout> | undefined;
  lastActivity: number;
}

interface Subscription {
  readonly sessionKey: string | undefined;
  readonly after: number | undefined;
}

type HandshakeOutcome =
  | { ok: true; result: ConnectResult }
  | { ok: false; error: SwitchboardError; fatal: boolean };

/**
 * A typed connection to a Switchboard gateway: request/response calls, events with resume,
 * and automatic reconnection. See the package README for the guarantees.
 */
export class SwitchboardClient {
  readonly sessions: MethodNamespace<"sessions">;
  readonly chat: MethodNamespace<"chat">;
  /** `agent.run` is the protocol's `agent` method; `agent.wait` waits for a run's end. */
  readonly agent: MethodNamespace<"agent">;
  readonly agents: MethodNamespace<"agents">;
  readonly tools: MethodNamespace<"tools">;
  readonly policy: MethodNamespace<"policy">;
  readonly audit: MethodNamespace<"audit">;
  /** Run reporting for agent workers: `run.progress`, `run.complete`, `run.fail`. */
  readonly run: MethodNamespace<"run">;

  private readonly options: ResolvedClientOptions;
  private handshakeResult: ConnectResult | undefined;
  private readonly logger: Logger;
  private readonly WebSocketImpl: WebSocketConstructor;
  private readonly failFast: boolean;

  #state: ConnectionState = "connecting";
  private session: SocketSession | undefined;
  private reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  private attempt = 0;
  /** The gateway URLs, tried in turn; `urlIndex` is the one in use (or being tried). */
  private readonly urls: readonly string[];
  private urlIndex = 0;
  private everOpened = false;
  private closeRequested = false;
  private closing: Promise<void> | undefined;
  private closeError: SwitchboardError | undefined;
  private nextRequestId = 0;
  #concurrency: number | undefined;
  /** A `connect` carrying the current concurrency has been sent. */
  private handshakeSent = false;

  private readonly pending = new Map<string, PendingCall>();
  private readonly subscriptions = new Map<string, Subscription>();
  private readonly dispatcher: EventDispatcher;
  private readonly stateListeners = new Set<StateListener>();
  private readonly missedListeners = new Set<MissedEventsListener>();
  private readyWaiters: Array<{
    resolve: (result: ConnectResult) => void;
    reject: (error: unknown) => void;
  }> = [];

  constructor(options: ClientOptions, start: ClientStartOptions = {}) {
    this.options = parseClientOptions(options);
    this.urls = typeof this.options.url === "string" ? [this.options.url] : this.options.url;
    this.logger = this.options.logger ?? silentLogger;
    this.WebSocketImpl = this.options.WebSocket ?? defaultWebSocket();
    this.failFast = start.failFast ?? false;
    this.#concurrency = this.options.concurrency;
    this.dispatcher = new EventDispatcher(this.logger);

    const namespaces = buildNamespaces((method, params, callOptions) =>
      (this.call as (method: MethodName, params: unknown, options?: CallOptions) => Promise<unknown>)(
        method,
        params,
        callOptions,
      ),
    );
    this.sessions = namespaces.sessions;
    this.chat = namespaces.chat;
    this.agent = namespaces.agent;
    this.agents = namespaces.agents;
    this.tools = namespaces.tools;
    this.policy = namespaces.policy;
    this.audit = namespaces.audit;
    this.run = namespaces.run;

    this.openSocket();
  }

  /** The handshake result of the current (or last) connection: id, role, methods, events, limits. */
  get connection(): ConnectResult | undefined {
    return this.handshakeResult;
  }

  get state(): ConnectionState {
    return this.#state;
  }

  get role(): Role {
    return this.options.role;
  }

  /** The agent ids this connection serves (role `agent`). */
  get agentIds(): readonly string[] {
    return this.options.agents ?? [];
  }

  /** Runs at once announced to the gateway in `connect` (role `agent`); unlimited when undefined. */
  get concurrency(): number | undefined {
    return this.#concurrency;
  }

  /**
   * Sets the concurrency announced in `connect` (role `agent`). Returns true when the current
   * connection uses it; otherwise it takes effect from the next (re)connect.
   */
  announceConcurrency(concurrency: number): boolean {
    if (this.options.role !== "agent") {
      throw new SwitchboardError(
        "INVALID_REQUEST",
        "concurrency: only a role agent connection announces one",
      );
    }
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1024) {
      throw new SwitchboardError("INVALID_REQUEST", "concurrency: must be a whole number from 1 to 1024");
    }
    if (this.#concurrency === concurrency) return true;
    this.#concurrency = concurrency;
    return !this.handshakeSent;
  }

  /** The gateway that answered the handshake. */
  get server(): ConnectResult["server"] | undefined {
    return this.connection?.server;
  }

  /** The `seq` of the last event delivered; pass it as `after` to resume in a later process. */
  get lastEventSeq(): number | undefined {
    return this.dispatcher.cursor;
  }

  onStateChange(listener: StateListener): () => void {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /**
   * Calls `listener` when a subscription resumed from a cursor (a renewal after a reconnect, or
   * `subscribe` with `after`) could not be replayed whole: the events in between are lost to this
   * client, and only a fresh read of the state it follows makes up for them.
   */
  onEventsMissed(listener: MissedEventsListener): () => void {
    this.missedListeners.add(listener);
    return () => this.missedListeners.delete(listener);
  }

  /** Resolves with the handshake result once the connection is open; rejects if the client closes first. */
  ready(): Promise<ConnectResult> {
    if (this.#state === "open" && this.connection) return Promise.resolve(this.connection);
    if (this.#state === "closed") return Promise.reject(this.closeError ?? closedClientError());
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  /**
   * Calls a protocol method. Params are checked against the method's schema before anything is
   * sent, and the result against its result schema. Calls made while (re)connecting wait for the
   * connection, bounded by their timeout.
   */
  call<M extends MethodName>(method: M, ...args: CallArgs<M>): Promise<MethodResult<M>> {
    const [params, options = {}] = args as [unknown, CallOptions | undefined];
    return new Promise<MethodResult<M>>((resolve, reject) => {
      if (this.#state === "closed") {
        reject(closedClientError(this.closeError));
        return;
      }
      if (!isMethodName(method)) {
        reject(
          new SwitchboardError("INVALID_REQUEST", `unknown method "${String(method)}"`, {
            details: { method },
          }),
        );
        return;
      }
      if (!METHOD_ROLES[method].includes(this.options.role)) {
        reject(
          new SwitchboardError(
            "FORBIDDEN",
            `${method} is not available to role ${this.options.role} (allowed: ${METHOD_ROLES[method].join(", ")})`,
            { details: { method, role: this.options.role } },
          ),
        );
        return;
      }
      const optionsError = checkCallOptions(options);
      if (optionsError) {
        reject(optionsError);
        return;
      }
      const schema = Methods[method];
      const parsed = schema.params.safeParse(params ?? {});
      if (!parsed.success) {
        reject(invalidParams(method, parsed.error));
        return;
      }
      const { signal } = options;
      if (signal?.aborted) {
        reject(abortReason(signal));
        return;
      }

      const validParams = parsed.data as Record<string, unknown>;
      const serverWaitMs =
        method === "agent.wait"
          ? ((validParams.timeoutMs as number | undefined) ?? DEFAULT_AGENT_WAIT_MS)
          : undefined;
      const timeoutMs =
        options.timeoutMs ??
        (serverWaitMs === undefined
          ? this.options.requestTimeoutMs
          : Math.max(this.options.requestTimeoutMs, serverWaitMs + WAIT_GRACE_MS));
      const id = this.newRequestId();
      const onAbort = (): void => {
        if (this.takePending(id) && signal) reject(abortReason(signal));
      };
      const timer = setTimeout(() => {
        if (this.takePending(id)) reject(timeoutError(method, timeoutMs));
      }, timeoutMs);
      signal?.addEventListener("abort", onAbort, { once: true });

      const entry: PendingCall = {
        id,
        method,
        params: validParams,
        internal: false,
        retryOnReconnect: options.retryOnReconnect ?? READ_ONLY_METHODS.has(method),
        sent: false,
        sends: 0,
        createdAt: Date.now(),
        serverWaitMs,
        onResult: (result) => {
          const checked = schema.result.safeParse(result);
          if (checked.success) resolve(checked.data as MethodResult<M>);
          else reject(invalidResult(`${method} result`, checked.error));
        },
        reject,
        cleanup: () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
        },
      };
      this.pending.set(id, entry);
      if (this.#state === "open") this.transmit(entry);
    });
  }

  /**
   * Subscribes to events (`events.subscribe`) and remembers the subscription: after a reconnect it
   * is renewed with `after` = the last delivered `seq`, so no event is lost or seen twice.
   * Register `on()` listeners or create `events()` iterators first: replayed events can arrive
   * before this resolves.
   */
  async subscribe(
    params: MethodParams<"events.subscribe"> = {},
    options: Omit<CallOptions, "retryOnReconnect"> = {},
  ): Promise<MethodResult<"events.subscribe">> {
    let sent = params;
    for (;;) {
      try {
        const result = await this.call("events.subscribe", sent, { ...options, retryOnReconnect: false });
        // One entry per session named (`sessionKey` and `sessionKeys` alike); only a call naming none
        // follows every session the role may see. A `sessionKeys` call recorded as "*" came back
        // from a reconnect as a subscription to every session.
        const keys = [
          ...(sent.sessionKey !== undefined ? [sent.sessionKey] : []),
          ...(sent.sessionKeys ?? []),
        ];
        if (keys.length === 0) this.subscriptions.set("*", { sessionKey: undefined, after: sent.after });
        for (const key of keys) this.subscriptions.set(key, { sessionKey: key, after: sent.after });
        // A live subscription starts at the gateway's current seq: resuming from there after a
        // drop replays what happened while disconnected. With `after`, the replay sets the cursor.
        if (sent.after === undefined) this.dispatcher.advanceTo(result.seq);
        if (result.missed) this.reportMissed(result.missed);
        return result;
      } catch (error) {
        const droppedInFlight =
          isSwitchboardError(error) && error.code === "UNAVAILABLE" && error.retryable === true;
        if (!droppedInFlight || this.#state === "closed") throw error;
        // Retried as a new live subscription, the events between the lost call and the retry would
        // be skipped: resume from the cursor, else from the dropped connection's handshake (which
        // came before the call; what lies between is more than asked for, never a duplicate).
        const from = this.dispatcher.cursor ?? this.handshakeResult?.seq;
        if (sent.after === undefined && from !== undefined) sent = { ...sent, after: from };
      }
    }
  }

  /** Calls `listener` for every `event` delivered; returns the function that removes it. */
  on<E extends EventName>(event: E, listener: TypedEventListener<E>): () => void {
    return this.dispatcher.on(event, listener);
  }

  /**
   * The events delivered from now on, in `seq` order, each once, as an async iterable. It ends
   * when the client closes (with the error, if the client closed because of one).
   */
  events<E extends EventName = EventName>(
    options: EventsOptions<E> = {},
  ): AsyncIterableIterator<TypedEvent<E>> {
    return this.dispatcher.iterate(options);
  }

  /**
   * Closes the connection for good: pending calls reject with a retryable `UNAVAILABLE`, event
   * iterators end, no reconnect follows. Resolves once the socket is closed.
   */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closeRequested = true;
    const socket = this.session?.socket;
    this.shutdown(new SwitchboardError("UNAVAILABLE", "the client was closed", { retryable: true }), {
      clean: true,
    });
    this.closing = socket === undefined ? Promise.resolve() : closeGracefully(socket);
    return this.closing;
  }

  // ---- connection lifecycle ------------------------------------------------------------------

  /** The gateway URL in use (or being tried). */
  get url(): string {
    return this.urls[this.urlIndex] ?? this.urls[0]!;
  }

  private openSocket(): void {
    const { url } = this;
    let socket: WebSocketLike;
    try {
      socket = new this.WebSocketImpl(url);
    } catch (error) {
      // The same constructor would throw again on every retry.
      this.shutdown(
        new SwitchboardError(
          "INVALID_REQUEST",
          `cannot open a WebSocket to ${url}: ${describeError(error)}`,
          {
            cause: error,
          },
        ),
      );
      return;
    }
    const session: SocketSession = {
      socket,
      opened: false,
      ended: false,
      lastError: undefined,
      dropReason: undefined,
      connectTimer: undefined,
      heartbeatTimer: undefined,
      stableTimer: undefined,
      lastActivity: Date.now(),
    };
    this.session = session;

    session.connectTimer = setTimeout(() => {
      this.endSession(
        session,
        new SwitchboardError(
          "UNAVAILABLE",
          `no handshake with ${url} within ${this.options.connectTimeoutMs} ms`,
          { retryable: true },
        ),
        false,
      );
      dropSocket(socket);
    }, this.options.connectTimeoutMs);

    socket.addEventListener("open", () => {
      if (session.ended) return;
      session.opened = true;
      void this.handshake(session).then((outcome) => {
        if (session.ended) return;
        if (outcome.ok) {
          void this.onHandshake(session, outcome.result);
          return;
        }
        this.endSession(session, outcome.error, outcome.fatal);
        if (outcome.fatal) closeGracefully(socket);
        else dropSocket(socket);
      });
    });
    socket.addEventListener("message", (event) => {
      if (!session.ended) this.onMessage(session, event.data);
    });
    // `ws` throws an unhandled 'error' if nobody listens; the close event that follows is what counts.
    socket.addEventListener("error", (event) => {
      session.lastError = describeSocketError(event) ?? session.lastError;
    });
    socket.addEventListener("close", (event) => {
      if (session.ended) return;
      this.endSession(
        session,
        this.closeReason(session, event.code, event.reason),
        event.code === CloseCodes.unauthorized,
      );
    });
  }

  private closeReason(session: SocketSession, code: number, reason: string): SwitchboardError {
    if (session.dropReason) return session.dropReason;
    if (code === CloseCodes.unauthorized) {
      return new SwitchboardError(
        "UNAUTHORIZED",
        `the gateway refused the credentials${reason ? `: ${reason}` : ""}`,
        {
          retryable: false,
        },
      );
    }
    const detail = [reason, session.lastError].filter(Boolean).join(": ");
    const message = session.opened
      ? `the connection to ${this.url} closed (code ${code}${detail ? `, ${detail}` : ""})`
      : `could not connect to ${this.url}${detail ? ` (${detail})` : ""}`;
    return new SwitchboardError("UNAVAILABLE", message, {
      retryable: true,
      details: { closeCode: code },
    });
  }

  private async handshake(session: SocketSession): Promise<HandshakeOutcome> {
    const { options } = this;
    const params: ConnectParams = {
      protocol: PROTOCOL_VERSION as 1,
      client: { name: options.clientName, version: options.clientVersion },
      auth: { token: options.token },
      role: options.role,
      ...(options.agents ? { agents: options.agents } : {}),
      ...(this.#concurrency !== undefined ? { concurrency: this.#concurrency } : {}),
      ...(options.sessionKey ? { sessionKey: options.sessionKey } : {}),
    };
    this.handshakeSent = true;
    try {
      const raw = await this.rawRequest(session, "connect", params, options.connectTimeoutMs);
      const parsed = ConnectResultSchema.safeParse(raw);
      if (parsed.success) return { ok: true, result: parsed.data };
      return { ok: false, error: invalidResult("connect result", parsed.error), fatal: true };
    } catch (error) {
      const failure = toSwitchboardError(error, "UNAVAILABLE");
      return { ok: false, error: failure, fatal: isFatalHandshakeError(failure) };
    }
  }

  private async onHandshake(session: SocketSession, result: ConnectResult): Promise<void> {
    clearTimeout(session.connectTimer);
    const reconnected = this.everOpened;
    // A cluster's instances share one event stream (`epoch`): failing over to another instance
    // resumes from the cursor; only a single process's instance id changes with its numbering.
    const epochOf = (connected: ConnectResult) => connected.server.epoch ?? connected.server.instanceId;
    const previousEpoch = this.handshakeResult ? epochOf(this.handshakeResult) : undefined;
    const newEpoch = previousEpoch !== undefined && previousEpoch !== epochOf(result);
    this.handshakeResult = result;
    // The backoff starts over only once the connection has lasted: one dropped right after each
    // handshake (a flapping proxy, a gateway shedding load) would otherwise be retried in a tight loop.
    session.stableTimer = setTimeout(() => {
      if (!session.ended) this.attempt = 0;
    }, STABLE_CONNECTION_MS);
    this.everOpened = true;
    this.startHeartbeat(session, result.limits.heartbeatMs);

    const renewal = this.renewal();
    if (renewal) await this.resubscribe(session, renewal, newEpoch);
    if (session.ended) return;
    if (session.ended || this.#state === "closed") return;
    this.flush();
    this.setState("open");
    this.logger.info(
      { url: this.url, connectionId: result.connectionId, role: result.role, reconnected },
      reconnected ? "reconnected to the gateway" : "connected to the gateway",
    );
  }

  /**
   * Every subscription renewed in one `events.subscribe` from one cursor: all events (which covers
   * every session's), else all the sessions at once. Renewed one call each, the first call's replay
   * moved the cursor past what the next one was to replay, and those events were lost.
   */
  private renewal(): { sessionKeys: string[]; after: number | undefined } | undefined {
    if (this.subscriptions.size === 0) return undefined;
    const all = this.subscriptions.get("*");
    const chosen = all ? [all] : [...this.subscriptions.values()];
    const afters = chosen.flatMap((subscription) =>
      subscription.after === undefined ? [] : [subscription.after],
    );
    return {
      sessionKeys: all ? [] : chosen.flatMap((subscription) => subscription.sessionKey ?? []),
      after: afters.length > 0 ? Math.min(...afters) : undefined,
    };
  }

  private async resubscribe(
    session: SocketSession,
    renewal: { sessionKeys: string[]; after: number | undefined },
    newEpoch: boolean,
  ): Promise<void> {
    let after = this.dispatcher.cursor ?? renewal.after;
    let replayedEpoch = false;
    const { sessionKeys } = renewal;
    // One key goes as `sessionKey`, as a gateway without `sessionKeys` understands it.
    const base: Record<string, unknown> =
      sessionKeys.length === 0
        ? {}
        : sessionKeys.length === 1
          ? { sessionKey: sessionKeys[0] }
          : { sessionKeys };
    try {
      for (;;) {
        const params = after === undefined ? base : { ...base, after };
        const raw = await this.rawRequest(session, "events.subscribe", params, this.options.requestTimeoutMs);
        const parsed = Methods["events.subscribe"].result.safeParse(raw);
        if (!parsed.success) {
          this.logger.warn(
            { error: invalidResult("events.subscribe result", parsed.error).message },
            "resubscribe failed",
          );
          return;
        }
        if (parsed.data.missed) this.reportMissed(parsed.data.missed);
        const cursor = this.dispatcher.cursor;
        if (cursor !== undefined && parsed.data.seq < cursor) {
          // The gateway's sequence went backwards (a gateway without durable seq reservations, or a
          // data dir restored from a backup): the old cursor would swallow every new event.
          this.logger.warn(
            { cursor, gatewaySeq: parsed.data.seq },
            "the gateway's event sequence restarted; events from before the restart cannot be replayed",
          );
          this.dispatcher.cursor = undefined;
          if (newEpoch && !replayedEpoch) {
            // A new epoch's window holds only events of the new numbering: replay all of it.
            after = 0;
            replayedEpoch = true;
            continue;
          }
          this.dispatcher.cursor = parsed.data.seq;
        } else if (after === undefined || replayedEpoch) {
          this.dispatcher.advanceTo(parsed.data.seq);
        }
        return;
      }
    } catch (error) {
      if (session.ended) return;
      if (!isRefusal(error)) {
        // No answer in time, or a fault of the moment: an open client with no subscription would
        // wait for events for ever. Reconnecting renews them again.
        this.logger.warn(
          { sessionKeys, error: describeError(error) },
          "could not renew the event subscriptions after reconnecting; reconnecting",
        );
        session.dropReason = isSwitchboardError(error)
          ? error
          : new SwitchboardError("UNAVAILABLE", "event subscriptions not renewed", { retryable: true });
        dropSocket(session.socket);
        return;
      }
      await this.renewEach(session, sessionKeys, after, error);
    }
  }

  /**
   * The renewal was refused (a session reset under a subscribed sessionId, a token's sessions
   * narrowed): renews what can be renewed, key by key, and drops what the gateway refuses, saying
   * so. One call per key may skip events of the later keys (the first call's replay moves the
   * connection past them), so the listeners of `onEventsMissed` are told to reload.
   */
  private async renewEach(
    session: SocketSession,
    sessionKeys: string[],
    after: number | undefined,
    refusal: unknown,
  ): Promise<void> {
    const dropped: string[] = [];
    for (const key of sessionKeys.length > 0 ? sessionKeys : ["*"]) {
      const params = {
        ...(key === "*" ? {} : { sessionKey: key }),
        ...(after === undefined ? {} : { after }),
      };
      try {
        await this.rawRequest(session, "events.subscribe", params, this.options.requestTimeoutMs);
      } catch (error) {
        if (session.ended) return;
        if (!isRefusal(error)) {
          dropSocket(session.socket);
          return;
        }
        this.subscriptions.delete(key);
        dropped.push(key);
        this.logger.warn(
          { sessionKey: key, error: describeError(error) },
          "subscription refused on renewal; dropped",
        );
      }
    }
    this.logger.warn(
      { dropped, error: describeError(refusal) },
      "event subscriptions renewed one by one after a refusal; events may have been missed",
    );
    this.reportMissed({ after: after ?? 0, before: Math.max(after ?? 0, this.handshakeResult?.seq ?? 0) });
  }

  private startHeartbeat(session: SocketSession, heartbeatMs: number): void {
    const { socket } = session;
    if (!hasPingEvents(socket)) return;
    session.lastActivity = Date.now();
    socket.on("ping", () => {
      session.lastActivity = Date.now();
    });
    const silentLimitMs = heartbeatMs * SILENT_INTERVALS_BEFORE_DROP;
    session.heartbeatTimer = setInterval(() => {
      if (session.ended || Date.now() - session.lastActivity <= silentLimitMs) return;
      // A half-open TCP connection never reports a close by itself: drop it and reconnect.
      session.dropReason = new SwitchboardError(
        "UNAVAILABLE",
        `the gateway at ${this.url} sent nothing for ${silentLimitMs} ms`,
        { retryable: true },
      );
      this.logger.warn({ url: this.url, silentLimitMs }, "gateway silent; dropping the connection");
      dropSocket(socket);
    }, heartbeatMs);
  }

  private endSession(session: SocketSession, error: SwitchboardError, fatal: boolean): void {
    if (session.ended) return;
    session.ended = true;
    clearTimeout(session.connectTimer);
    clearInterval(session.heartbeatTimer);
    clearTimeout(session.stableTimer);
    if (this.session === session) this.session = undefined;
    if (this.closeRequested || this.#state === "closed") return;

    const { reconnect } = this.options;
    // With several URLs, fail-fast still tries each once before giving up.
    const untried = !this.everOpened && this.attempt + 1 < this.urls.length;
    const retry =
      !fatal &&
      reconnect.enabled &&
      !(this.failFast && !this.everOpened && !untried) &&
      (reconnect.maxAttempts === undefined || this.attempt < reconnect.maxAttempts);
    if (!retry) {
      this.logger.warn({ url: this.url, error: error.message }, "connection closed; not reconnecting");
      this.shutdown(error);
      return;
    }
    this.setState("reconnecting");
    this.releaseInFlight(error);
    // Another instance may be up while this one is not: move on to the next URL, and back off only
    // once every URL has failed in this round.
    const failedUrl = this.url;
    this.urlIndex = (this.urlIndex + 1) % this.urls.length;
    const delayMs =
      this.urls.length > 1 && (this.attempt + 1) % this.urls.length !== 0
        ? 0
        : backoffDelay(Math.floor(this.attempt / this.urls.length), reconnect);
    this.attempt += 1;
    this.logger.info(
      { url: failedUrl, next: this.url, attempt: this.attempt, delayMs, reason: error.message },
      "reconnecting",
    );
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (!this.closeRequested && this.#state !== "closed") this.openSocket();
    }, delayMs);
  }

  /** In-flight calls on a lost socket: safe ones wait to be re-sent, the others cannot be known to have run. */
  private releaseInFlight(reason: SwitchboardError): void {
    for (const entry of [...this.pending.values()]) {
      if (!entry.sent) continue;
      if (!entry.internal && entry.retryOnReconnect) {
        entry.sent = false;
        continue;
      }
      this.takePending(entry.id);
      entry.reject(entry.internal ? reason : connectionLostError(entry.method, reason));
    }
  }

  private shutdown(error: SwitchboardError, { clean = false }: { clean?: boolean } = {}): void {
    if (this.#state === "closed") return;
    this.closeError = error;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    const session = this.session;
    this.session = undefined;
    if (session && !session.ended) {
      session.ended = true;
      clearTimeout(session.connectTimer);
      clearInterval(session.heartbeatTimer);
      clearTimeout(session.stableTimer);
      if (!this.closeRequested) dropSocket(session.socket);
    }
    this.setState("closed");
    for (const entry of [...this.pending.values()]) {
      this.takePending(entry.id);
      entry.reject(error);
    }
    this.dispatcher.end(clean ? undefined : error);
    this.stateListeners.clear();
    this.missedListeners.clear();
  }

  private reportMissed(missed: MissedEvents): void {
    this.logger.warn(
      { after: missed.after, before: missed.before },
      "events since the cursor could not all be replayed; read the state again",
    );
    for (const listener of [...this.missedListeners]) {
      try {
        listener(missed);
      } catch (error) {
        this.logger.error({ error: describeError(error) }, "a missed-events listener threw");
      }
    }
  }

  private setState(next: ConnectionState): void {
    const previous = this.#state;
    if (previous === next) return;
    this.#state = next;
    if (next === "open" || next === "closed") {
      const waiters = this.readyWaiters;
      this.readyWaiters = [];
      for (const waiter of waiters) {
        if (next === "open" && this.connection) waiter.resolve(this.connection);
        else waiter.reject(this.closeError ?? closedClientError());
      }
    }
    for (const listener of [...this.stateListeners]) {
      try {
        listener(next, previous);
      } catch (error) {
        this.logger.error({ error: describeError(error) }, "a state listener threw");
      }
    }
  }

  // ---- requests ------------------------------------------------------------------------------

  private newRequestId(): string {
    this.nextRequestId += 1;
    return String(this.nextRequestId);
  }

  private takePending(id: string): PendingCall | undefined {
    const entry = this.pending.get(id);
    if (entry) {
      this.pending.delete(id);
      entry.cleanup();
    }
    return entry;
  }

  /** A request bound to one socket (handshake, resubscription): sent at once, never queued or re-sent. */
  private rawRequest(
    session: SocketSession,
    method: string,
    params: Record<string, unknown>,
    timeoutMs: number,
  ): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      const id = this.newRequestId();
      const timer = setTimeout(() => {
        if (this.takePending(id)) reject(timeoutError(method, timeoutMs));
      }, timeoutMs);
      this.pending.set(id, {
        id,
        method,
        params,
        internal: true,
        retryOnReconnect: false,
        sent: true,
        sends: 1,
        createdAt: Date.now(),
        serverWaitMs: undefined,
        onResult: resolve,
        reject,
        cleanup: () => clearTimeout(timer),
      });
      try {
        session.socket.send(JSON.stringify({ type: "req", id, method, params }));
      } catch (error) {
        this.takePending(id);
        reject(toSwitchboardError(error, "UNAVAILABLE"));
      }
    });
  }

  /** Sends queued calls, oldest first (re-sent calls were made earliest, so they go first). */
  private flush(): void {
    for (const entry of [...this.pending.values()]) {
      if (!entry.sent && !entry.internal) this.transmit(entry);
    }
  }

  private transmit(entry: PendingCall): void {
    const socket = this.session?.socket;
    if (socket === undefined || socket.readyState !== SOCKET_OPEN) return;
    if (entry.sends > 0 && entry.serverWaitMs !== undefined) {
      // A re-sent wait gets only what is left of the caller's wait, not a fresh one.
      entry.params = {
        ...entry.params,
        timeoutMs: Math.max(0, entry.serverWaitMs - (Date.now() - entry.createdAt)),
      };
    }
    const frame = JSON.stringify({ type: "req", id: entry.id, method: entry.method, params: entry.params });
    const maxPayload = this.connection?.limits.maxPayload;
    if (maxPayload !== undefined && utf8Exceeds(frame, maxPayload)) {
      // The gateway would refuse the frame (and `ws` drops the whole connection on it).
      this.takePending(entry.id);
      entry.reject(
        new SwitchboardError(
          "PAYLOAD_TOO_LARGE",
          `${entry.method} request exceeds the gateway's ${maxPayload}-byte frame limit`,
          {
            details: { method: entry.method, maxPayload },
          },
        ),
      );
      return;
    }
    try {
      socket.send(frame);
      entry.sent = true;
      entry.sends += 1;
    } catch (error) {
      // Left unsent: it goes out on the next open connection.
      this.logger.debug(
        { method: entry.method, error: describeError(error) },
        "send failed; call stays queued",
      );
    }
  }

  // ---- incoming frames -----------------------------------------------------------------------

  private onMessage(session: SocketSession, data: unknown): void {
    session.lastActivity = Date.now();
    const text = messageText(data);
    if (text === undefined) {
      this.logger.warn({}, "ignoring a non-text frame from the gateway");
      return;
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      this.logger.warn({ frame: text.slice(0, 200) }, "ignoring a frame that is not JSON");
      return;
    }
    const parsed = ServerFrameSchema.safeParse(raw);
    if (!parsed.success) {
      // A malformed answer to a call still has to end that call rather than leave it to time out.
      const id = typeof raw === "object" && raw !== null ? (raw as { id?: unknown }).id : undefined;
      const entry = typeof id === "string" ? this.takePending(id) : undefined;
      if (entry) entry.reject(invalidResult(`response to ${entry.method}`, parsed.error));
      else this.logger.warn({ issues: formatZodIssues(parsed.error) }, "ignoring a malformed frame");
      return;
    }
    const frame = parsed.data;
    if (frame.type === "event") {
      this.dispatcher.dispatch(frame);
      return;
    }
    if (frame.id === null) {
      const error = frame.ok ? undefined : frame.error;
      this.logger.warn({ error }, "the gateway reported an error it could not tie to a request");
      return;
    }
    const entry = this.takePending(frame.id);
    if (!entry) {
      this.logger.debug({ id: frame.id }, "response to a call that already ended (timed out or aborted)");
      return;
    }
    if (frame.ok) entry.onResult(frame.result);
    else entry.reject(SwitchboardError.fromWire(frame.error));
  }
}

/** Creates a client that connects in the background and keeps retrying until it gets through. */
export function createClient(options: ClientOptions): SwitchboardClient {
  return new SwitchboardClient(options);
}

/**
 * Connects and resolves once the handshake succeeded; rejects (with `UNAUTHORIZED`, or
 * `UNAVAILABLE` when the gateway cannot be reached) if the first attempt fails.
 */
export async function connect(options: ClientOptions): Promise<SwitchboardClient> {
  const client = new SwitchboardClient(options, { failFast: true });
  await client.ready();
  return client;
}

/**
 * `ws` in Node; in a browser bundle (where bundlers map `ws` to its stub that only throws) the
 * platform's own WebSocket. Told apart by `terminate`, which only the real `ws` socket has.
 */
export function defaultWebSocket(
  nodeWs: unknown = WebSocket,
  platform: unknown = (globalThis as { WebSocket?: unknown }).WebSocket,
): WebSocketConstructor {
  const isNodeWs =
    typeof (nodeWs as { prototype?: { terminate?: unknown } }).prototype?.terminate === "function";
  if (!isNodeWs && typeof platform === "function") return platform as WebSocketConstructor;
  return nodeWs as WebSocketConstructor;
}

function closedClientError(cause?: SwitchboardError): SwitchboardError {
  return new SwitchboardError("UNAVAILABLE", "the client is closed", { retryable: false, cause });
}

function checkCallOptions(options: CallOptions): SwitchboardError | undefined {
  const { timeoutMs } = options;
  if (
    timeoutMs !== undefined &&
    !(Number.isInteger(timeoutMs) && timeoutMs > 0 && timeoutMs <= 2_147_483_647)
  ) {
    return new SwitchboardError(
      "INVALID_REQUEST",
      "options.timeoutMs: must be a positive whole number of milliseconds",
    );
  }
  return undefined;
}

function utf8Exceeds(text: string, limit: number): boolean {
  // Every UTF-16 unit is 1 to 3 UTF-8 bytes: most frames are decided without encoding them.
  if (text.length > limit) return true;
  if (text.length * 3 <= limit) return false;
  return new TextEncoder().encode(text).length > limit;
}

function closeGracefully(socket: WebSocketLike): Promise<void> {
  if (socket.readyState >= SOCKET_CLOSING) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      dropSocket(socket);
      resolve();
    }, CLOSE_HANDSHAKE_BUDGET_MS);
    socket.addEventListener("close", () => {
      clearTimeout(timer);
      resolve();
    });
    try {
      socket.close(1000, "client closed");
    } catch {
      clearTimeout(timer);
      resolve();
    }
  });
}

/** An answer refusing the request itself (not a lost connection or a timeout): trying again is no use. */
function isRefusal(error: unknown): boolean {
  return (
    isSwitchboardError(error) &&
    error.retryable !== true &&
    error.code !== "TIMEOUT" &&
    error.code !== "UNAVAILABLE"
  );
}
