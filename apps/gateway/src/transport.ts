import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import {
  CloseCodes,
  type ConnectParams,
  ConnectParamsChecked,
  invalidRequestFromZod,
  isMethodName,
  METHOD_ROLES,
  type MethodName,
  MethodParamsChecked,
  RequestFrameSchema,
  SwitchboardError,
  warnThrottle,
} from "@switchboard/core";
import type { Logger } from "pino";
import { WebSocketServer } from "ws";
import { Connection, type ConnectionIdentity } from "./connection";
import type { HttpRoute } from "./http/http-route";
import { isLoopbackAddress, rebindingProblem } from "./http/rebinding";
import { KeyedCounts } from "./keyed-counts";
import { ConnectionCaps, peerAddress, SOCKET_SLACK } from "./transport/connection-caps";
import { defaultMaxConnections, RESERVED_FILES, readOpenFileLimit } from "./transport/fd-limit";

/**
 * Plain HTTP (not upgraded) sockets one address may keep alive between requests; more are closed
 * after their response. Far below the per-address WebSocket cap, so they can never take its room.
 */
const KEEP_ALIVE_PER_ADDRESS = 32;
/**
 * Answers one socket may have unfinished (HTTP/1.1 pipelining). Node parses every request a chunk
 * holds before any answer is written, so its own pause on unsent output comes too late: 1 500
 * pipelined requests for the UI's bundle held 587 MB. Browsers do not pipeline; a client that
 * sends more than this without reading is cut off.
 */
const MAX_PIPELINED_PER_SOCKET = 16;

export interface TransportLimits {
  maxPayload: number;
  maxBufferedBytes: number;
  heartbeatMs: number;
  /** Also the idle limit of a TCP socket that has not upgraded yet (and of its HTTP headers). */
  handshakeTimeoutMs: number;
  maxPreConnectBytes: number;
  /** Absent: sized under the open-file limit. */
  maxConnections?: number | undefined;
  maxConnectionsPerAddress: number;
  maxInFlight: number;
}

/** `GET /healthz`: `ok: false` (with `degraded` reasons) answers HTTP 503 so probes see a degraded gateway. */
export interface HealthReport {
  ok?: boolean;
  degraded?: unknown[];
  [key: string]: unknown;
}

export interface TransportHandlers {
  /** Checks the token and role; throws `SwitchboardError` (UNAUTHORIZED closes with 4003). */
  authenticate(params: ConnectParams, connection: Connection): ConnectionIdentity;
  connectResult(connection: Connection): Record<string, unknown>;
  handle(method: MethodName, params: unknown, connection: Connection): Promise<Record<string, unknown>>;
  /** After the connect response went out: the peer is ready for events (workers get runs from here on). */
  onReady(connection: Connection): void;
  onClose(connection: Connection): void;
  health(): HealthReport;
  /**
   * A worker's `run.complete` was over `limits.maxPayload` and refused: the run should end now with
   * that reason rather than wait for its deadline (the SDK fails such runs itself; raw workers don't).
   */
  onOversizedReport?(connection: Connection, runId: string, bytes: number): void;
}

export interface Transport {
  readonly port: number;
  readonly connections: ReadonlySet<Connection>;
  /**
   * Stop accepting: no new connections, and new requests on the ones open are refused `UNAVAILABLE`
   * (retryable; HTTP 503) — except a worker's (role agent), whose requests end or report the runs it
   * holds. Requests being handled go on; existing connections stay until `closeAll`.
   */
  stopAccepting(): Promise<void>;
  /** Calls waiting on a peer's behalf (`agent.wait`, a waiting send) answer now (see `Connection.stopWaiting`). */
  stopWaiting(): void;
  /**
   * Resolves once no request (WebSocket or HTTP) is being handled, or after `timeoutMs`, with the
   * number still being handled then.
   */
  drain(timeoutMs: number): Promise<number>;
  closeAll(code: number, reason: string): void;
}

/** The answer to a request that arrives while the gateway is stopping. */
const SHUTTING_DOWN = "gateway shutting down";

/** Reads the request id from a frame we could not fully parse, so the error can still be matched. */
function salvageId(value: unknown): string | null {
  if (value && typeof value === "object" && "id" in value) {
    const id = (value as { id: unknown }).id;
    if (typeof id === "string" && id.length > 0 && id.length <= 128) return id;
  }
  return null;
}

/** The id, method and run of a frame too large to handle (none when it is not JSON of that shape). */
function salvageReport(data: unknown): { id: string | null; method?: string; runId?: string } | undefined {
  let frame: unknown;
  try {
    const text = Array.isArray(data)
      ? Buffer.concat(data as Buffer[]).toString("utf8")
      : Buffer.isBuffer(data)
        ? data.toString("utf8")
        : Buffer.from(data as ArrayBuffer).toString("utf8");
    frame = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!frame || typeof frame !== "object") return undefined;
  const { method, params } = frame as { method?: unknown; params?: unknown };
  const runId = (params as { runId?: unknown } | undefined)?.runId;
  return {
    id: salvageId(frame),
    ...(typeof method === "string" ? { method } : {}),
    ...(typeof runId === "string" && runId.length <= 128 ? { runId } : {}),
  };
}

function errorFrame(id: string | null, error: SwitchboardError) {
  return { type: "res", id, ok: false, error: error.toWire() };
}

export async function startTransport(options: {
  host: string;
  port: number;
  limits: TransportLimits;
  handlers: TransportHandlers;
  /** HTTP endpoints besides `/healthz`, tried in order. */
  routes?: readonly HttpRoute[];
  /** Called by `stopWaiting`: the HTTP routes' waiting calls (MCP over HTTP) answer too. */
  onStopWaiting?: () => void;
  log: Logger;
}): Promise<Transport> {
  const { limits, handlers, log } = options;
  const routes = options.routes ?? [];
  const connections = new Set<Connection>();
  /** Set by `stopAccepting`: new requests are refused from then on. */
  let stopping = false;
  // Requests being handled (WebSocket methods, HTTP requests until their response is done), so a
  // stop answers them before it closes their sockets and the store under them.
  let handling = 0;
  const whenIdle: Array<() => void> = [];
  const handlingStarted = () => {
    handling += 1;
  };
  const handlingEnded = () => {
    handling -= 1;
    if (handling === 0) for (const idle of whenIdle.splice(0)) idle();
  };

  const fileLimit = readOpenFileLimit();
  const maxConnections = limits.maxConnections ?? defaultMaxConnections(fileLimit);
  const caps = new ConnectionCaps(maxConnections, limits.maxConnectionsPerAddress);
  const warnRefused = warnThrottle(log);
  const warnPreConnect = warnThrottle(log);
  if (fileLimit && maxConnections + SOCKET_SLACK + RESERVED_FILES > fileLimit.soft) {
    log.warn(
      { openFiles: fileLimit, maxConnections },
      `limits.maxConnections (${maxConnections}) is close to the open-file limit (${fileLimit.soft}); ` +
        "raise the hard limit (ulimit -Hn, or LimitNOFILE= under systemd) or lower the cap",
    );
  } else {
    log.debug({ openFiles: fileLimit ?? "unknown", maxConnections }, "connection cap");
  }

  // Raw sockets that never finish an HTTP request (silent, half-open, or dribbling headers) would hold a
  // descriptor for ever: headers get the handshake window, checked at least every second; a body (HTTP
  // routes) gets longer, for slow links.
  const http: Server = createServer(
    {
      headersTimeout: limits.handshakeTimeoutMs,
      requestTimeout: Math.max(limits.handshakeTimeoutMs, 30_000),
      connectionsCheckingInterval: Math.min(1000, limits.handshakeTimeoutMs),
    },
    (req: IncomingMessage, res: ServerResponse) => {
      if (!withinPipelineCap(req.socket, res)) return;
      keepAliveWithinCap(req.socket, res);
      handlingStarted();
      res.once("close", handlingEnded);
      const health =
        (req.method === "GET" || req.method === "HEAD") &&
        (req.url === "/healthz" || req.url?.startsWith("/healthz?"));
      if (stopping && !health) {
        // A keep-alive socket's next request during a stop: refused before anything is read.
        res.shouldKeepAlive = false;
        res.writeHead(503, { "content-type": "application/json", "cache-control": "no-store" });
        res.end(
          JSON.stringify({
            ok: false,
            error: new SwitchboardError("UNAVAILABLE", SHUTTING_DOWN, { retryable: true }).toWire(),
          }),
        );
        return;
      }
      if (health) {
        // HEAD too: load balancers and uptime checks probe with it (the status alone, no body).
        const report = healthReport();
        res.writeHead(report.ok ? 200 : 503, {
          "content-type": "application/json",
          "cache-control": "no-store",
        });
        res.end(req.method === "HEAD" ? undefined : JSON.stringify(report));
        return;
      }
      const pathname = (req.url ?? "/").split("?", 1)[0] ?? "/";
      const route = routes.find((candidate) => candidate.matches(pathname, req));
      if (route) {
        void Promise.resolve()
          .then(() => route.handle(req, res))
          .catch((error: unknown) => {
            log.error({ err: error, route: route.name }, "http route failed");
            if (!res.headersSent) {
              res.writeHead(500, { "content-type": "application/json" });
              res.end(JSON.stringify({ ok: false, error: "internal error" }));
            } else res.destroy();
          });
        return;
      }
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ ok: false, error: "not found" }));
    },
  );
  // Backstop for sockets that never reach the WebSocket caps (which answer with a close code).
  http.maxConnections = maxConnections + SOCKET_SLACK;
  http.on("connection", (tcp: Socket) => {
    const address = peerAddress(tcp);
    if (!caps.admitSocket(address)) {
      tcp.destroy();
      return;
    }
    // A socket must have sent a whole request (or upgrade) within the handshake window. Our own timer,
    // not the socket's idle timeout: that one is re-armed by every byte, and Node's header timeout is
    // only checked on an interval, so under load neither closed a silent socket reliably.
    const deadline = setTimeout(() => {
      if (!answered.has(tcp)) tcp.destroy();
    }, limits.handshakeTimeoutMs);
    deadline.unref();
    tcp.once("close", () => {
      clearTimeout(deadline);
      caps.releaseSocket(address);
    });
  });
  // Plain HTTP sockets kept alive per address. An answered socket is past the handshake deadline,
  // and a client sending a request every few seconds keeps it open for ever (keep-alive): without
  // this cap such sockets filled the per-address socket budget every local peer shares and locked
  // WebSocket clients out. Past the cap a response closes its socket once written.
  const keptAlive = new KeyedCounts();
  const countedAlive = new WeakSet<Socket>();
  function keepAliveWithinCap(socket: Socket, res: ServerResponse): void {
    const address = peerAddress(socket);
    if (!countedAlive.has(socket)) {
      countedAlive.add(socket);
      keptAlive.add(address, 1);
      socket.once("close", () => keptAlive.add(address, -1));
    }
    if (keptAlive.get(address) > KEEP_ALIVE_PER_ADDRESS) res.shouldKeepAlive = false;
  }
  const unfinished = new WeakMap<Socket, number>();
  /** Counts the socket's unfinished answers; false (the socket destroyed) past the cap. */
  function withinPipelineCap(socket: Socket, res: ServerResponse): boolean {
    if (socket.destroyed) return false;
    const count = (unfinished.get(socket) ?? 0) + 1;
    if (count > MAX_PIPELINED_PER_SOCKET) {
      log.warn(
        { remote: peerAddress(socket) },
        "more pipelined HTTP requests than allowed unanswered; socket closed",
      );
      socket.destroy();
      return false;
    }
    unfinished.set(socket, count);
    res.once("close", () => unfinished.set(socket, (unfinished.get(socket) ?? 1) - 1));
    return true;
  }
  // Sockets that reached a request or an upgrade: their deadline no longer applies (a long response
  // such as a stream is not cut; keep-alive idling has Node's keepAliveTimeout).
  const answered = new WeakSet<Socket>();
  http.on("request", (req: IncomingMessage) => answered.add(req.socket));
  http.on("upgrade", (req: IncomingMessage) => answered.add(req.socket));

  function healthReport(): HealthReport & { ok: boolean } {
    let report: HealthReport;
    try {
      report = handlers.health();
    } catch (error) {
      log.error({ err: error }, "health check failed");
      report = { ok: false, degraded: ["health check failed"] };
    }
    // A stopping gateway takes no new work: probes should send it none.
    if (stopping) return { ...report, ok: false, degraded: [...(report.degraded ?? []), SHUTTING_DOWN] };
    return { ...report, ok: report.ok !== false };
  }

  // ws's own limit is a hard backstop well above ours, so a frame just over `maxPayload` gets a
  // PAYLOAD_TOO_LARGE answer instead of a bare close.
  const wss = new WebSocketServer({
    server: http,
    maxPayload: limits.maxPayload * 4 + 65_536,
    perMessageDeflate: false,
    // On loopback, an upgrade from a web page of another site (or a name re-pointed at 127.0.0.1) is
    // refused before it takes a connection slot: every local peer shares one per-address cap, so a
    // page opening sockets in a loop could otherwise lock local agents out. Clients that are not
    // browsers send no Origin; the web UI is same-origin.
    verifyClient: ({ req }, done) => {
      if (!isLoopbackAddress(req.socket.localAddress)) return done(true);
      const problem = rebindingProblem(req.headers.host, req.headers.origin);
      if (!problem) return done(true);
      warnRefused(
        { address: peerAddress(req.socket), origin: req.headers.origin },
        `websocket upgrade refused: ${problem}`,
      );
      done(false, 403, problem);
    },
  });

  // ws re-emits the HTTP server's errors (e.g. EADDRINUSE); the listen promise below reports those.
  wss.on("error", (error) => log.debug({ err: error }, "websocket server error"));

  wss.on("connection", (socket, request) => {
    const id = randomUUID();
    const connection = new Connection(id, socket, log.child({ connectionId: id }), limits.maxBufferedBytes);
    const tcp = request.socket;
    const address = peerAddress(tcp);
    const refusal = caps.admitPeer(address);
    if (refusal) {
      warnRefused({ address }, refusal);
      connection.refuse(CloseCodes.connectionLimit, refusal);
      return;
    }
    connections.add(connection);
    let alive = true;

    // ws buffers a whole frame before emitting it, and its maxPayload is fixed per server, so a peer that
    // has not authenticated could make us hold megabytes. Counting the raw bytes it sends until `connect`
    // succeeds bounds that to a socket read or two (64 KiB each) per peer, and covers many small frames
    // too. This listener runs after ws's own, so the chunk that completes `connect` already counts as
    // "ready": only a client that floods before its connect is answered can trip it.
    let preConnectBytes = 0;
    const guardPreConnect = (chunk: Buffer) => {
      if (connection.state !== "handshake") {
        tcp.off("data", guardPreConnect);
        return;
      }
      preConnectBytes += chunk.length;
      if (preConnectBytes <= limits.maxPreConnectBytes) return;
      tcp.off("data", guardPreConnect);
      warnPreConnect({ address, bytes: preConnectBytes }, "too much data before connect, closing");
      connection.refuse(
        CloseCodes.messageTooBig,
        `more than ${limits.maxPreConnectBytes} bytes before connect (limits.maxPreConnectBytes)`,
      );
    };
    tcp.on("data", guardPreConnect);

    const handshakeTimer = setTimeout(() => {
      if (connection.state === "handshake") connection.close(CloseCodes.handshakeTimeout, "connect timeout");
    }, limits.handshakeTimeoutMs);
    handshakeTimer.unref();

    const heartbeat = setInterval(() => {
      if (!alive) {
        connection.log.info("peer silent for two heartbeat intervals, dropping");
        connection.terminate();
        return;
      }
      alive = false;
      socket.ping();
    }, limits.heartbeatMs);
    heartbeat.unref();
    const markAlive = () => {
      alive = true;
      connection.lastSeen = Date.now();
    };
    socket.on("pong", markAlive);
    socket.on("ping", markAlive);

    socket.on("message", (data, isBinary) => {
      markAlive();
      const bytes = Array.isArray(data)
        ? data.reduce((n, b) => n + b.length, 0)
        : data instanceof ArrayBuffer
          ? data.byteLength
          : data.length;
      if (bytes > limits.maxPayload) {
        // Only a ready worker's frame is looked into (bounded by ws's hard limit): its id gets the
        // answer, and a refused run.complete ends its run at once.
        const salvaged =
          connection.identity?.role === "agent" && connection.state === "ready" && !isBinary
            ? salvageReport(data)
            : undefined;
        connection.send(
          errorFrame(
            salvaged?.id ?? null,
            new SwitchboardError(
              "PAYLOAD_TOO_LARGE",
              `frame of ${bytes} bytes exceeds limits.maxPayload (${limits.maxPayload})`,
            ),
          ),
        );
        if (salvaged?.method === "run.complete" && salvaged.runId !== undefined) {
          try {
            handlers.onOversizedReport?.(connection, salvaged.runId, bytes);
          } catch (error) {
            connection.log.error({ err: error }, "oversized report handling failed");
          }
        }
        return;
      }
      if (isBinary) {
        connection.send(
          errorFrame(
            null,
            new SwitchboardError("INVALID_REQUEST", "binary frames are not supported: send JSON text"),
          ),
        );
        return;
      }
      const text = Buffer.isBuffer(data) ? data.toString("utf8") : String(data);
      void onFrame(connection, text).catch((error) => {
        connection.log.error({ err: error }, "frame handling failed");
      });
    });

    socket.on("close", () => {
      caps.releasePeer(address);
      tcp.off("data", guardPreConnect);
      clearTimeout(handshakeTimer);
      clearInterval(heartbeat);
      connection.markClosed();
      connections.delete(connection);
      try {
        handlers.onClose(connection);
      } catch (error) {
        connection.log.error({ err: error }, "close handler failed");
      }
    });
    socket.on("error", (error) => connection.log.warn({ err: error }, "socket error"));
  });

  async function onFrame(connection: Connection, text: string): Promise<void> {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      connection.send(errorFrame(null, new SwitchboardError("INVALID_REQUEST", "frame is not valid JSON")));
      return;
    }
    const parsed = RequestFrameSchema.safeParse(raw);
    if (!parsed.success) {
      connection.send(errorFrame(salvageId(raw), invalidRequestFromZod(parsed.error, "frame")));
      return;
    }
    const frame = parsed.data;

    if (connection.state === "handshake") {
      if (stopping) {
        // Connected just before the listener closed: it would be closed again in a moment.
        connection.send(
          errorFrame(frame.id, new SwitchboardError("UNAVAILABLE", SHUTTING_DOWN, { retryable: true })),
        );
        connection.close(CloseCodes.goingAway, SHUTTING_DOWN);
        return;
      }
      if (frame.method !== "connect") {
        connection.send(
          errorFrame(
            frame.id,
            new SwitchboardError("UNAUTHORIZED", "the first frame must be a connect request"),
          ),
        );
        connection.close(CloseCodes.handshakeTimeout, "connect required");
        return;
      }
      const params = ConnectParamsChecked.safeParse(frame.params ?? {});
      if (!params.success) {
        connection.send(errorFrame(frame.id, invalidRequestFromZod(params.error, "params")));
        return;
      }
      try {
        connection.identity = handlers.authenticate(params.data, connection);
      } catch (error) {
        const wire =
          error instanceof SwitchboardError
            ? error
            : new SwitchboardError("INTERNAL", "authentication failed");
        connection.send(errorFrame(frame.id, wire));
        if (wire.code === "UNAUTHORIZED") connection.close(CloseCodes.unauthorized, "unauthorized");
        return;
      }
      connection.state = "ready";
      connection.send({ type: "res", id: frame.id, ok: true, result: handlers.connectResult(connection) });
      handlers.onReady(connection);
      return;
    }

    if (frame.method === "connect") {
      connection.send(errorFrame(frame.id, new SwitchboardError("CONFLICT", "already connected")));
      return;
    }
    // Stopping: nothing new starts. A worker's requests are about the runs it holds (their ends,
    // progress and tool calls), which may still finish while the stop lets them.
    if (stopping && connection.identity?.role !== "agent") {
      connection.send(
        errorFrame(frame.id, new SwitchboardError("UNAVAILABLE", SHUTTING_DOWN, { retryable: true })),
      );
      return;
    }
    if (!isMethodName(frame.method)) {
      connection.send(
        errorFrame(
          frame.id,
          new SwitchboardError("INVALID_REQUEST", `unknown method: ${frame.method.slice(0, 64)}`),
        ),
      );
      return;
    }
    const method = frame.method;
    const role = connection.identity!.role;
    if (!METHOD_ROLES[method].includes(role)) {
      connection.send(
        errorFrame(
          frame.id,
          new SwitchboardError("FORBIDDEN", `method ${method} is not allowed for role ${role}`),
        ),
      );
      return;
    }
    const params = MethodParamsChecked[method].safeParse(frame.params ?? {});
    if (!params.success) {
      connection.send(errorFrame(frame.id, invalidRequestFromZod(params.error, "params")));
      return;
    }
    // Refusing (rather than pausing the socket) keeps a worker's requests from queueing behind its own
    // long tools.invoke calls; the error is retryable and names the limit. A run's end is never
    // refused: it frees what the cap protects, a worker sends at most one per run it holds (its
    // concurrency, which the gateway set), and refusing it left a finished run hanging until its
    // deadline whenever the worker's other runs held the connection's slots with tools.invoke.
    const endsRun = method === "run.complete" || method === "run.fail";
    if (!endsRun && connection.inFlight >= limits.maxInFlight) {
      connection.send(
        errorFrame(
          frame.id,
          new SwitchboardError(
            "RATE_LIMITED",
            `too many requests in flight on this connection (limits.maxInFlight = ${limits.maxInFlight}); wait for answers before sending more`,
            { retryable: true },
          ),
        ),
      );
      return;
    }
    connection.inFlight++;
    handlingStarted();
    try {
      const result = await handlers.handle(method, params.data, connection);
      connection.send({ type: "res", id: frame.id, ok: true, result });
    } catch (error) {
      if (error instanceof SwitchboardError) {
        connection.send(errorFrame(frame.id, error));
      } else {
        connection.log.error({ err: error, method }, "method failed");
        connection.send(errorFrame(frame.id, new SwitchboardError("INTERNAL", "internal error")));
      }
    } finally {
      connection.inFlight--;
      handlingEnded();
    }
  }

  await new Promise<void>((resolve, reject) => {
    http.once("error", reject);
    http.listen(options.port, options.host, () => {
      http.off("error", reject);
      resolve();
    });
  });
  const address = http.address();
  const port = typeof address === "object" && address ? address.port : options.port;

  return {
    port,
    connections,
    async stopAccepting() {
      stopping = true;
      // Stop listening at once; the HTTP server's own close waits for live sockets, so it is not awaited here.
      wss.close();
      http.close();
      http.closeIdleConnections?.();
    },
    stopWaiting() {
      options.onStopWaiting?.();
      for (const connection of connections) connection.stopWaiting();
    },
    async drain(timeoutMs) {
      if (handling === 0) return 0;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        whenIdle.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
      return handling;
    },
    closeAll(code, reason) {
      for (const connection of connections) connection.close(code, reason);
      http.closeAllConnections?.();
    },
  };
}
