import { McpSessionTools } from "../mcp/mcp-session-tools";
import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

/**
 * Tool calls made over the protocol: by a worker for its run, an operator acting `as` a session, or
 * the stdio MCP bridge (role mcp) as the session its token is bound to.
 */
export function toolMethods({
  access,
  tools,
  toolCalls,
  sessions,
  audit,
}: Pick<MethodDeps, "access" | "tools" | "toolCalls" | "sessions" | "audit">): Handlers<
  "tools.list" | "tools.invoke"
> {
  const mcp = new McpSessionTools({ sessions, tools, toolCalls, audit });
  return {
    "tools.list": async (params, connection) => {
      if (connection.identity!.role === "mcp")
        return { tools: await mcp.list(access.mcpBinding(connection, params)) };
      const { caller, entry } = await access.toolCaller(connection, params);
      return { tools: tools.definitionsFor(entry, caller.runOrigin).list };
    },
    "tools.invoke": async (params, connection) => {
      if (connection.identity!.role === "mcp") {
        const binding = access.mcpBinding(connection, params);
        return mcp.call(binding, params.tool, params.args, { transport: "websocket" });
      }
      const { caller, entry } = await access.toolCaller(connection, params);
      return toolCalls.invoke(caller, entry, params.tool, params.args, params.toolCallId);
    },
  };
}
