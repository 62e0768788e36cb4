import { randomUUID } from "node:crypto";
import {
  isSwitchboardError,
  type SessionEntry,
  type ToolCaller,
  type ToolDefinition,
  type ToolResult,
} from "@switchboard/core";
import type { McpBinding } from "../access";
import type { AuditService } from "../audit-service";
import type { SessionsService } from "../sessions-service";
import type { ToolCalls } from "../tool-calls";
import type { ToolCatalog } from "../tool-catalog";

/** The channel of a session an MCP token acts as (`labels.channels.mcp` classifies it). */
export const MCP_CHANNEL = "mcp";

/** How the MCP call reached the gateway (the stdio bridge relays over the WebSocket protocol), recorded in the audit log. */
export type McpTransportName = "http" | "websocket";

export interface McpCallOptions {
  transport: McpTransportName;
  signal?: AbortSignal | undefined;
}

/**
 * The gateway side of MCP: the tool list and tool calls of the session an `mcp` token is bound to.
 * Both transports end here (`/mcp` in process, the stdio bridge through `tools.list`/`tools.invoke`),
 * and calls run through the same pipeline as an agent's `tools.invoke` (gate, PRE_TOOL_CALL,
 * execution with every flow check, transcript, taint), with the bound session as the caller.
 */
export class McpSessionTools {
  constructor(
    private readonly deps: {
      sessions: SessionsService;
      tools: ToolCatalog;
      toolCalls: ToolCalls;
      audit: Pick<AuditService, "append">;
    },
  ) {}

  /** The bound session, created on first use with channel `mcp` (audited, like `sessions.create`). */
  async session(binding: McpBinding): Promise<SessionEntry> {
    const { entry, created } = await this.deps.sessions.ensure(binding.sessionKey, { channel: MCP_CHANNEL });
    if (created) {
      await this.deps.audit.append({
        kind: "session.created",
        actor: binding.tokenName,
        sessionKey: entry.key,
        data: { clearance: entry.clearance, channel: MCP_CHANNEL },
      });
    }
    return entry;
  }

  async list(binding: McpBinding): Promise<ToolDefinition[]> {
    return this.deps.tools.definitionsFor(await this.session(binding)).list;
  }

  async call(
    binding: McpBinding,
    tool: string,
    args: Record<string, unknown>,
    options: McpCallOptions,
  ): Promise<ToolResult> {
    const entry = await this.session(binding);
    // No runId: an MCP host's calls belong to no run, and nothing in the arguments names the caller.
    const caller: ToolCaller = {
      sessionKey: entry.key,
      agentId: entry.agentId,
      ...(options.signal ? { signal: options.signal } : {}),
    };
    const toolCallId = randomUUID();
    const audit = (status: string, extra: Record<string, unknown> = {}) =>
      this.deps.audit.append({
        kind: "mcp.call",
        actor: binding.tokenName,
        sessionKey: entry.key,
        data: { tool, status, toolCallId, transport: options.transport, ...extra },
      });
    let result: ToolResult;
    try {
      result = await this.deps.toolCalls.invoke(caller, entry, tool, args, toolCallId);
    } catch (error) {
      // A call that could not be made (store fault, shutdown) is still on record, with its code.
      await audit("error", { code: isSwitchboardError(error) ? error.code : "INTERNAL" }).catch(
        () => undefined,
      );
      throw error;
    }
    await audit(result.status);
    return result;
  }
}
