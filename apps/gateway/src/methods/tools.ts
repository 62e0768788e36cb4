import { McpSessionTools } from "../mcp/mcp-session-tools";
import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";
import { InflightToolCalls } from "./inflight-tool-calls";

/**
 * Tool calls made over the protocol: by a worker for its run, an operator acting `as` a session, or
 * the stdio MCP bridge (role mcp) as the session its token is bound to. A call given a
 * `toolCallId` can be stopped by `tools.cancel` on the same connection, and stops when the
 * connection closes or the run it was made for ends.
 */
export function toolMethods({
  access,
  tools,
  toolCalls,
  sessions,
  audit,
  scheduler,
}: Pick<MethodDeps, "access" | "tools" | "toolCalls" | "sessions" | "audit" | "scheduler">): Handlers<
  "tools.list" | "tools.invoke" | "tools.cancel"
> {
  const mcp = new McpSessionTools({ sessions, tools, toolCalls, audit });
  const inflight = new InflightToolCalls();
  return {
    "tools.list": async (params, connection) => {
      if (connection.identity!.role === "mcp")
        return { tools: await mcp.list(access.mcpBinding(connection, params)) };
      const { caller, entry } = await access.toolCaller(connection, params);
      return { tools: tools.definitionsFor(entry, caller.runOrigin).list };
    },
    "tools.invoke": async (params, connection) => {
      const tracked = inflight.track(connection, params.toolCallId);
      try {
        // A call without a `toolCallId` cannot be cancelled by name; every call stops with its connection,
        // and answers when a graceful stop says to stop waiting (`closedSignal` covers both).
        const signal = {
          signal: tracked
            ? AbortSignal.any([tracked.signal, connection.closedSignal])
            : connection.closedSignal,
        };
        if (connection.identity!.role === "mcp") {
          const binding = access.mcpBinding(connection, params);
          return await mcp.call(binding, params.tool, params.args, { transport: "websocket", ...signal });
        }
        const { caller, entry } = await access.toolCaller(connection, params);
        // A run's call also stops when the run ends.
        const ended = caller.runId === undefined ? undefined : scheduler.endSignal(caller.runId);
        if (ended) signal.signal = AbortSignal.any([signal.signal, ended]);
        return await toolCalls.invoke(
          { ...caller, ...signal },
          entry,
          params.tool,
          params.args,
          params.toolCallId,
        );
      } finally {
        tracked?.done();
      }
    },
    "tools.cancel": async (params, connection) => ({
      cancelled: inflight.cancel(connection, params.toolCallId),
    }),
  };
}
