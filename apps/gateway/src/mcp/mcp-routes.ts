import type { IncomingMessage, ServerResponse } from "node:http";
import { isSwitchboardError } from "@switchboard/core";
import { boundBuffered } from "../http/bound-buffered";
import type { HttpRoute } from "../http/http-route";
import { isLoopbackAddress, rebindingProblem } from "../http/rebinding";
import type { HttpRouteDeps } from "../http/routes";
import { KeyedCounts } from "../keyed-counts";
import { cancelledRequestIds, McpCancellations, withoutSelfCancelled } from "./mcp-cancellations";
import { repeatedRequestId } from "./mcp-duplicate-ids";
import { McpSessionTools } from "./mcp-session-tools";

export const MCP_PATH = "/mcp";

/**
 * The MCP SDK's server side, loaded by the first `/mcp` request: it costs ~100 ms of every
 * gateway's start-up otherwise, and most gateways never serve MCP.
 */
let mcpSdk:
  | Promise<{
      createMcpServer: typeof import("./mcp-server").createMcpServer;
      StreamableHTTPServerTransport: typeof import("@modelcontextprotocol/sdk/server/streamableHttp.js").StreamableHTTPServerTransport;
    }>
  | undefined;

function loadMcpSdk() {
  mcpSdk ??= Promise.all([
    import("./mcp-server"),
    import("@modelcontextprotocol/sdk/server/streamableHttp.js"),
  ]).then(([server, http]) => ({
    createMcpServer: server.createMcpServer,
    StreamableHTTPServerTransport: http.StreamableHTTPServerTransport,
  }));
  return mcpSdk;
}

function bearer(req: IncomingMessage): string | undefined {
  const header = req.headers.authorization;
  if (!header) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match ? match[1] : undefined;
}

/** A JSON-RPC error outside any request (id null), as the SDK answers transport-level failures. */
function fail(
  res: ServerResponse,
  status: number,
  message: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store", ...headers });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message }, id: null }));
}

/** Reads a request body of at most `limit` bytes; undefined when it is larger (the rest is not read). */
async function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/**
 * `/mcp`: Streamable HTTP, stateless (every request carries its bearer token and gets a fresh
 * SDK transport and server), so any instance of a cluster can answer any request and several
 * clients may share a token. The token's bound session is the caller of every call.
 */
export function mcpRoutes(deps: HttpRouteDeps): HttpRoute[] {
  const log = deps.log.child({ component: "mcp" });
  const tools = new McpSessionTools(deps);
  const cancellations = new McpCancellations(deps.cancellationRelay, (error) =>
    log.warn({ err: error }, "mcp cancellations across instances failed"),
  );
  const maxBody = deps.config.gateway.limits.maxPayload;
  const { maxInFlight, maxBufferedBytes } = deps.config.gateway.limits;
  /** JSON-RPC messages of open POSTs per token (see `maxInFlight` below). */
  const inflight = new KeyedCounts();
  return [
    {
      name: "mcp",
      matches: (pathname) => pathname === MCP_PATH,
      async handle(req, res) {
        if (isLoopbackAddress(req.socket.localAddress)) {
          const problem = rebindingProblem(req.headers.host, req.headers.origin);
          if (problem) {
            log.warn(
              { host: req.headers.host, origin: req.headers.origin },
              `mcp request refused: ${problem}`,
            );
            fail(res, 403, problem);
            return;
          }
        }
        let binding: ReturnType<typeof deps.access.mcpToken>;
        try {
          binding = deps.access.mcpToken(bearer(req));
        } catch (error) {
          const message = error instanceof Error ? error.message : String(error);
          if (isSwitchboardError(error) && error.code === "FORBIDDEN") {
            log.info({ reason: message }, "mcp request refused");
            fail(res, 403, message);
            return;
          }
          const invalid = bearer(req) !== undefined;
          log.info({ reason: message }, "mcp request unauthorized");
          fail(res, 401, message, {
            "www-authenticate": invalid
              ? 'Bearer realm="switchboard", error="invalid_token", error_description="unknown token"'
              : 'Bearer realm="switchboard"',
          });
          return;
        }
        if (req.method !== "POST") {
          // Stateless: no server-initiated stream (GET) and no transport session to end (DELETE).
          fail(res, 405, `method ${req.method} not allowed on ${MCP_PATH}; use POST`, { allow: "POST" });
          return;
        }
        const body = await readBody(req, maxBody);
        if (!body) {
          // The rest of the body is not read: the connection cannot be reused.
          fail(res, 413, `request body: must be at most ${maxBody} bytes (gateway.limits.maxPayload)`, {
            connection: "close",
          });
          return;
        }
        const rpcError = (code: number, message: string) => {
          res.writeHead(400, { "content-type": "application/json" });
          res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
        };
        let parsed: unknown;
        try {
          parsed = JSON.parse(body.toString("utf8"));
        } catch {
          rpcError(-32700, "Parse error: body is not JSON");
          return;
        }
        // JSON-RPC 2.0: an empty batch is one Invalid Request (the SDK's transport, finding no
        // request in it, would answer 202 as for notifications).
        if (Array.isArray(parsed) && parsed.length === 0) {
          rpcError(-32600, "Invalid Request: the batch is empty");
          return;
        }

        const repeated = repeatedRequestId(parsed);
        if (repeated !== undefined) {
          rpcError(
            -32600,
            `Invalid Request: id: must be unique within a batch; ${JSON.stringify(repeated)} repeats (nothing of this batch was run)`,
          );
          return;
        }

        // As on the WebSocket protocol, a token has at most `maxInFlight` requests open at once:
        // each message of a POST counts until its response is written out or the client goes, so
        // a client that posts and never reads cannot make the gateway hold answers without bound.
        const messages = Array.isArray(parsed) ? parsed.length : 1;
        const open = inflight.get(binding.tokenName);
        if (open + messages > maxInFlight) {
          res.writeHead(429, { "content-type": "application/json", "retry-after": "1" });
          res.end(
            JSON.stringify({
              jsonrpc: "2.0",
              error: {
                code: -32000,
                message: `rate limited: ${open} requests of this token are open and this POST adds ${messages} (gateway.limits.maxInFlight is ${maxInFlight}); retry once they are answered`,
              },
              id: null,
            }),
          );
          return;
        }
        inflight.add(binding.tokenName, messages);
        res.once("close", () => inflight.add(binding.tokenName, -messages));
        boundBuffered(res, maxBufferedBytes, () =>
          log.warn(
            { token: binding.tokenName, limit: maxBufferedBytes },
            "mcp client not reading its response; closed it (gateway.limits.maxBufferedBytes)",
          ),
        );

        // A cancellation of a call in flight (its POST is still open), here or on another instance.
        // Not awaited: on a cluster it is a lookup, and the notification's POST needs no answer.
        for (const requestId of cancelledRequestIds(parsed)) {
          void cancellations.cancel(binding.tokenName, requestId).then((cancelled) => {
            if (cancelled)
              log.info({ token: binding.tokenName, requestId }, "mcp call cancelled by its client");
          });
        }
        const { createMcpServer, StreamableHTTPServerTransport } = await loadMcpSdk();
        const server = createMcpServer(
          {
            listTools: () => tools.list(binding),
            callTool: async (name, args, signal, requestId) => {
              const tracked =
                requestId === undefined ? undefined : cancellations.track(binding.tokenName, requestId);
              try {
                return await tools.call(binding, name, args, {
                  transport: "http",
                  // A graceful stop answers the calls still waiting, as it does over the websocket.
                  signal: AbortSignal.any([
                    signal,
                    ...(tracked ? [tracked.signal] : []),
                    ...(deps.stopWaitingSignal ? [deps.stopWaitingSignal] : []),
                  ]),
                });
              } catch (error) {
                // The host hears only that it failed (mcp-server.ts): the cause is logged here.
                if (!isSwitchboardError(error))
                  log.error({ err: error, token: binding.tokenName, tool: name }, "mcp call failed");
                throw error;
              } finally {
                tracked?.done();
              }
            },
          },
          { sessionKey: binding.sessionKey },
        );
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
        res.on("close", () => {
          void transport.close().catch(() => undefined);
          void server.close().catch(() => undefined);
        });
        await server.connect(transport);
        await transport.handleRequest(req, res, withoutSelfCancelled(parsed));
      },
    },
  ];
}
