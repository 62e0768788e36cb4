import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  type Tool,
  type ToolAnnotations,
} from "@modelcontextprotocol/sdk/types.js";
import {
  formatZodIssues,
  isSwitchboardError,
  SEND_TIMEOUT_SECONDS,
  ToolArgsSchema,
  type ToolDefinition,
} from "@switchboard/core";
import { z } from "zod";
import { VERSION } from "../version";
import { GuardedMcpServer } from "./mcp-request-guard";

/**
 * What the MCP server needs from Switchboard: the bound session's tools, and a call made as that
 * session. In process (`/mcp`) it is the gateway's tool pipeline; in the stdio bridge, the
 * WebSocket protocol (`tools.list`/`tools.invoke` with an `mcp` token).
 */
export interface SessionToolPort {
  listTools(): Promise<ToolDefinition[]>;
  /** The tool's result object (`status` and its fields); throws a `SwitchboardError` when the call could not be made. */
  callTool(
    name: string,
    args: Record<string, unknown>,
    signal: AbortSignal,
    /** The JSON-RPC id of the `tools/call` (what a `notifications/cancelled` names). */
    requestId?: string | number,
  ): Promise<Record<string, unknown>>;
}

export interface McpServerOptions {
  /** The session every call runs as, named in the server's instructions when known. */
  sessionKey?: string;
  /** How often a call still running reports `notifications/progress` (when the client asked for it). */
  progressIntervalMs?: number;
}

/** A wait this long without news gets a progress notification ("a wait longer than a few seconds"). */
export const DEFAULT_PROGRESS_INTERVAL_MS = 2_000;

const HISTORY_URI = /^switchboard:\/\/session\/([^/]+)\/history$/;
const HISTORY_TEMPLATE = "switchboard://session/{key}/history";

/** `switchboard://session/<key>/history`, the key percent-encoded (keys hold `:`). */
export function historyUri(key: string): string {
  return `switchboard://session/${encodeURIComponent(key)}/history`;
}

const READ_ONLY_TOOLS = new Set([
  "sessions_list",
  "sessions_history",
  "session_status",
  "agents_list",
  "simulate_tool_call",
]);
/** Tools that reach outside Switchboard: `message` delivers to a channel (people, other systems). */
const OPEN_WORLD_TOOLS = new Set(["message"]);

/**
 * Hints for the host's UI and confirmations. No session tool deletes or overwrites anything, so
 * none is destructive; reads are marked read-only so a host may run them without asking.
 */
export function toolAnnotations(name: string): ToolAnnotations {
  return {
    title: name.replaceAll("_", " "),
    readOnlyHint: READ_ONLY_TOOLS.has(name),
    destructiveHint: false,
    openWorldHint: OPEN_WORLD_TOOLS.has(name),
  };
}

/** A native tool definition as MCP lists it: same name, description and JSON Schema. */
export function mcpTool(definition: ToolDefinition): Tool {
  return {
    name: definition.name,
    description: definition.description,
    inputSchema: { ...definition.parameters, type: "object" } as Tool["inputSchema"],
    annotations: toolAnnotations(definition.name),
  };
}

/** Statuses of a refused or failed call (mcp.md); `timeout` is not one: the run goes on, and its result says so. */
const REFUSED = new Set(["forbidden", "error", "not_found"]);

/**
 * The tool's result object as MCP content: `structuredContent` plus the same JSON as text (for hosts
 * that only read text). A refusal or failure is `isError`, its text led by the status and the reason
 * (the policy message names the rule broken), so a model reads why before the JSON.
 */
export function toolResultContent(result: Record<string, unknown>): CallToolResult {
  const json = JSON.stringify(result);
  const status = typeof result.status === "string" ? result.status : "error";
  if (!REFUSED.has(status)) {
    return { content: [{ type: "text", text: json }], structuredContent: result };
  }
  const reason = typeof result.error === "string" ? result.error : status;
  return {
    isError: true,
    content: [
      { type: "text", text: `${status}: ${reason}` },
      { type: "text", text: json },
    ],
    structuredContent: result,
  };
}

function thrownContent(error: unknown): CallToolResult {
  // An unexpected error's own text (a stack overflow, a driver's message) is the gateway's business,
  // not the host's: it is logged where it was thrown, and the host hears only that it happened.
  if (!isSwitchboardError(error))
    return toolResultContent({ status: "error", error: "INTERNAL: internal error" });
  return toolResultContent({ status: "error", error: `${error.code}: ${error.message}` });
}

/**
 * A list or read handler's failure as the host hears it: the SDK would send a thrown error's own
 * text (a driver's message) as -32603; the host hears only that it happened, or our own message.
 */
function guarded<A extends unknown[], R>(handler: (...args: A) => Promise<R>): (...args: A) => Promise<R> {
  return async (...args) => {
    try {
      return await handler(...args);
    } catch (error) {
      if (error instanceof McpError) throw error;
      throw new McpError(
        ErrorCode.InternalError,
        isSwitchboardError(error) ? `${error.code}: ${error.message}` : "internal error",
      );
    }
  };
}

/**
 * A `tools/call`'s name and arguments, bounded as the WebSocket `tools.invoke` bounds them: a name
 * longer than any tool's is not echoed back or audited whole, and arguments too deep to serialise
 * are refused before the call is made (not after, when its record fails).
 */
const CallParamsSchema = z.object({ name: z.string().min(1).max(128), arguments: ToolArgsSchema });

/**
 * One MCP server (the official SDK's low-level `Server`, since the tool schemas are already JSON
 * Schema) over a {@link SessionToolPort}. Built once per stateless HTTP request and once per stdio
 * bridge, so both transports list and call exactly the same way.
 */
export function createMcpServer(port: SessionToolPort, options: McpServerOptions = {}): Server {
  const progressEvery = options.progressIntervalMs ?? DEFAULT_PROGRESS_INTERVAL_MS;
  const server = new GuardedMcpServer(
    { name: "switchboard", version: VERSION },
    {
      capabilities: { tools: {}, resources: {} },
      instructions:
        `Session tools of Switchboard, acting as ${options.sessionKey ? `session ${options.sessionKey}` : "the session this token is bound to"}. ` +
        "The gateway enforces every rule: reading labelled data raises this session's taint, and a " +
        "refused call says which rule refused it.",
    },
  );

  server.setRequestHandler(
    ListToolsRequestSchema,
    guarded(async () => ({ tools: (await port.listTools()).map(mcpTool) })),
  );

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const checked = CallParamsSchema.safeParse({
      name: request.params.name,
      arguments: request.params.arguments ?? {},
    });
    if (!checked.success)
      throw new McpError(ErrorCode.InvalidParams, formatZodIssues(checked.error).join("; "));
    const { name, arguments: args } = checked.data;
    const progressToken = extra._meta?.progressToken;
    let timer: NodeJS.Timeout | undefined;
    if (progressToken !== undefined) {
      const started = Date.now();
      // The wait as the tool clamps it (a 3600 s request waits at most SEND_TIMEOUT_SECONDS.max).
      const total =
        name === "sessions_send" && typeof args.timeoutSeconds === "number"
          ? Math.min(args.timeoutSeconds, SEND_TIMEOUT_SECONDS.max)
          : undefined;
      timer = setInterval(() => {
        const seconds = Math.round((Date.now() - started) / 1000);
        void extra
          .sendNotification({
            method: "notifications/progress",
            params: {
              progressToken,
              progress: seconds,
              ...(total !== undefined && total > seconds ? { total } : {}),
              message: `${name}: still waiting after ${seconds} s`,
            },
          })
          .catch(() => undefined);
      }, progressEvery);
    }
    try {
      return toolResultContent(await port.callTool(name, args, extra.signal, extra.requestId));
    } catch (error) {
      return thrownContent(error);
    } finally {
      if (timer) clearInterval(timer);
    }
  });

  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: HISTORY_TEMPLATE,
        name: "session-history",
        title: "Session transcript",
        description: "The transcript of a session this session may read (same rules as sessions_history).",
        mimeType: "application/json",
      },
    ],
  }));

  // Listing and reading go through the session tools themselves, so they are the same reads with
  // the same rules (visibility, no read-up, taint) and are recorded like any call.
  server.setRequestHandler(
    ListResourcesRequestSchema,
    guarded(async (_request, extra) => {
      const result = await port.callTool("sessions_list", {}, extra.signal);
      const rows = Array.isArray(result.sessions) ? (result.sessions as Array<Record<string, unknown>>) : [];
      return {
        resources: rows
          .filter((row) => typeof row.key === "string")
          .map((row) => ({
            uri: historyUri(row.key as string),
            name: row.key as string,
            ...(typeof row.displayName === "string" ? { title: row.displayName } : {}),
            mimeType: "application/json",
            // The session's classification, as `sessions_list` gives it: reading it raises the taint.
            ...(typeof row.taint === "string" ? { _meta: { "switchboard/taint": row.taint } } : {}),
          })),
      };
    }),
  );

  server.setRequestHandler(
    ReadResourceRequestSchema,
    guarded(async (request, extra) => {
      const { uri } = request.params;
      const match = HISTORY_URI.exec(uri);
      if (!match) {
        throw new McpError(ErrorCode.InvalidParams, `uri: must be ${HISTORY_TEMPLATE} (got ${uri})`);
      }
      let key: string;
      try {
        key = decodeURIComponent(match[1]!);
      } catch {
        throw new McpError(
          ErrorCode.InvalidParams,
          `uri: the session key is not valid percent-encoding (${uri})`,
        );
      }
      const result = await port.callTool("sessions_history", { sessionKey: key }, extra.signal);
      if (result.status !== "ok") {
        const reason = typeof result.error === "string" ? result.error : String(result.status);
        // -32002 is MCP's "resource not found"; a refusal is an invalid request that names the rule;
        // a failure of the gateway's own is an internal error.
        throw new McpError(
          result.status === "not_found"
            ? -32002
            : result.error === "internal error"
              ? ErrorCode.InternalError
              : ErrorCode.InvalidRequest,
          `${result.status}: ${reason}`,
          {
            uri,
          },
        );
      }
      return { contents: [{ uri, mimeType: "application/json", text: JSON.stringify(result) }] };
    }),
  );

  return server;
}
