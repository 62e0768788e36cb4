import { randomUUID } from "node:crypto";
import { connect, type SwitchboardClient } from "@switchboard/client";
import { SEND_TIMEOUT_SECONDS } from "@switchboard/core";
import { createAppLogger } from "../logger";
import { VERSION } from "../version";
import { CONFIG_OPTIONS, type CommandSpec, stringOption, usageLine } from "./args";
import { loadCliConfig } from "./cli-config";
import { CliError, EXIT, errorCode, errorMessage, UsageError } from "./cli-errors";
import type { Command } from "./command";
import { gatewayUrl } from "./gateway-client";

const spec: CommandSpec = {
  name: "mcp",
  brief: "MCP server on stdio for an MCP host",
  summary:
    "Serves the session tools to an MCP host (desktop assistant, coding agent, IDE) over stdio, acting as the session the mcp token is bound to; relays every call to the gateway.",
  positionals: { min: 0, max: 0 },
  options: {
    url: {
      type: "string",
      value: "URL",
      description:
        "gateway URL; default $SWITCHBOARD_URL, else ws://<gateway.host>:<gateway.port> of the config",
    },
    token: {
      type: "string",
      value: "TOKEN",
      description: 'a token with role "mcp" (auth.tokens); default $SWITCHBOARD_TOKEN',
    },
    // Only to find the gateway's URL when neither --url nor $SWITCHBOARD_URL is given.
    config: CONFIG_OPTIONS.config!,
  },
  details: `The host launches this command; stdout carries only MCP frames, logs go to stderr.

Example (Claude Desktop, claude_desktop_config.json):
  "mcpServers": { "switchboard": { "command": "switchboard",
    "args": ["mcp", "--url", "ws://127.0.0.1:18789"], "env": { "SWITCHBOARD_TOKEN": "<mcp token>" } } }`,
};

/** Longest `sessions_send` wait plus room for the reply to travel back. */
const CALL_TIMEOUT_MS = (SEND_TIMEOUT_SECONDS.max + 60) * 1000;

export const mcpCommand: Command = {
  spec,
  async run({ io, args, env }) {
    const { values } = args;
    const token = stringOption(values, "token") ?? nonEmpty(env.SWITCHBOARD_TOKEN);
    if (!token)
      throw new UsageError('no token: pass --token or set SWITCHBOARD_TOKEN (a token with role "mcp")');
    const url =
      stringOption(values, "url") ??
      nonEmpty(env.SWITCHBOARD_URL) ??
      gatewayUrl((await loadCliConfig(stringOption(values, "config"), env)).config);
    // stdout belongs to the MCP frames: every log line goes to stderr.
    const log = createAppLogger({ level: "warn", pretty: true, destination: process.stderr }).child({
      component: "mcp-bridge",
    });

    let client: SwitchboardClient;
    try {
      client = await connect({
        url,
        token,
        role: "mcp",
        clientName: "switchboard-mcp",
        clientVersion: VERSION,
        connectTimeoutMs: 10_000,
        requestTimeoutMs: CALL_TIMEOUT_MS,
        logger: log,
      });
    } catch (error) {
      const code = errorCode(error);
      if (code === "UNAUTHORIZED")
        throw new CliError(
          `the gateway at ${url} refused the token: ${errorMessage(error)}`,
          EXIT.refused,
          code,
        );
      if (code === "INVALID_REQUEST")
        throw new UsageError(`--url: ${errorMessage(error)}`, usageLine(spec), spec.name);
      throw new CliError(`cannot reach the gateway at ${url}: ${errorMessage(error)}`, EXIT.failure, code);
    }

    // The MCP SDK is loaded by this command only (see `main.ts`).
    const [{ StdioServerTransport }, { createMcpServer }] = await Promise.all([
      import("@modelcontextprotocol/sdk/server/stdio.js"),
      import("../mcp/mcp-server"),
    ]);
    const server = createMcpServer(
      {
        listTools: async () => (await client.tools.list({})).tools,
        callTool: async (name, toolArgs, signal) => {
          // A call the host cancels (`notifications/cancelled`) is stopped at the gateway too: a
          // send waiting for its reply stops waiting instead of taking in a reply nobody reads.
          const toolCallId = randomUUID();
          const cancel = () =>
            void client.tools.cancel({ toolCallId }).catch((error: unknown) => {
              log.warn(
                { err: errorMessage(error), toolCallId },
                "could not cancel a tool call at the gateway",
              );
            });
          signal.addEventListener("abort", cancel, { once: true });
          try {
            return await client.tools.invoke(
              { tool: name, args: toolArgs, toolCallId },
              { timeoutMs: CALL_TIMEOUT_MS, signal },
            );
          } finally {
            signal.removeEventListener("abort", cancel);
          }
        },
      },
      {},
    );
    const transport = new StdioServerTransport();
    const closed = new Promise<void>((resolve) => {
      server.onclose = () => resolve();
    });
    // The host ends the bridge by closing stdin (or with a signal); either way the connection closes.
    process.stdin.once("end", () => void server.close());
    const stop = () => void server.close();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    await server.connect(transport);
    io.err(`switchboard mcp: serving the session tools of ${url} on stdio`);
    try {
      await closed;
    } finally {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      await client.close();
    }
    return EXIT.ok;
  },
};

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}
