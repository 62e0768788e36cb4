import { request as httpRequest } from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { SwitchboardClient } from "@switchboard/client";
import type { ConfigInput, ScriptedRuleInput } from "@switchboard/core";
import { beforeAll, describe, expect, it } from "vitest";
import { CLI_BUILT, CLI_PATH, cleanEnv, NOT_BUILT_MESSAGE } from "../cli/cli-process";
import type { TestGateway } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";
import { useMcpGateway } from "./mcp-test-gateway";

const WORKER_TOKEN = "mcp-test-worker-0123456789";
const MCP_TOKEN = "mcp-test-desktop-0123456789";
const CLIENT_TOKEN = "mcp-test-webchat-0123456789";
const MCP_KEY = "agent:main:mcp:desktop";
/** A second host's token and session (its calls do not raise the desktop session's taint). */
const LAPTOP_TOKEN = "mcp-test-laptop-0123456789";
const LAPTOP_KEY = "agent:main:mcp:laptop";
/** A PUBLIC chat (webchat is unlabelled): the bound session may write to it only while its taint is PUBLIC. */
const BOB = "agent:main:webchat:dm:bob";
/** A CONFIDENTIAL chat: reading it raises the bound session's taint. */
const VAULT = "agent:main:vault:dm:1";
/** A RESTRICTED chat: above the bound session's clearance (CONFIDENTIAL, from `labels.channels.mcp`). */
const SAFE = "agent:main:safe:dm:1";

const RULES: ScriptedRuleInput[] = [
  { context: "Agent-to-agent reply step", reply: "REPLY_SKIP" },
  { context: "announce step", reply: "ANNOUNCE_SKIP" },
  { when: "^ping$", reply: "pong" },
  { when: "^slow ping$", delayMs: 2_600, reply: "slow pong" },
  { reply: "echo: {{message}}" },
];

const CONFIG: ConfigInput = {
  auth: {
    tokens: [
      { name: "worker", token: WORKER_TOKEN, role: "agent", agents: ["main"] },
      { name: "desktop", token: MCP_TOKEN, role: "mcp", session: MCP_KEY },
      { name: "laptop", token: LAPTOP_TOKEN, role: "mcp", session: LAPTOP_KEY },
      { name: "webchat", token: CLIENT_TOKEN, role: "client", sessions: ["agent:main:webchat:*"] },
    ],
  },
  agents: { list: [{ id: "main", default: true, model: { provider: "scripted", rules: RULES } }] },
  labels: { channels: { mcp: "CONFIDENTIAL", vault: "CONFIDENTIAL", safe: "RESTRICTED" } },
};

const shared = useMcpGateway(CONFIG, WORKER_TOKEN, [
  [BOB, "webchat"],
  [VAULT, "vault"],
  [SAFE, "safe"],
]);
const clients = shared.clients;
let gw: TestGateway;
let op: SwitchboardClient;
beforeAll(() => {
  ({ gw, op } = shared);
});

function httpUrl(): string {
  return gw.url.replace(/^ws/, "http");
}

async function mcpOverHttp(token = MCP_TOKEN): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${httpUrl()}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "mcp-int-test", version: "0" });
  await client.connect(transport);
  clients.push(client);
  return client;
}

/** A chat session with one exchange in it, so its taint is its channel's label. */
type ToolCallResult = Awaited<ReturnType<Client["callTool"]>>;

/**
 * `client` (bound to the laptop session) sends "slow ping", answered 2.6 s later, and cancels the
 * call after 0.3 s: the gateway ends it well before the reply (recorded `timeout`, the run going
 * on), and the reply the host never got is not taken into its session.
 */
async function expectCancelledCallStopped(client: Client, transport: "http" | "websocket"): Promise<void> {
  const controller = new AbortController();
  const started = Date.now();
  const call = client
    .callTool(
      { name: "sessions_send", arguments: { sessionKey: BOB, message: "slow ping", timeoutSeconds: 20 } },
      undefined,
      { signal: controller.signal },
    )
    .catch((error: Error) => error);
  await new Promise((resolve) => setTimeout(resolve, 300));
  controller.abort();
  expect(await call).toBeInstanceOf(Error);
  let record: Record<string, unknown> | undefined;
  while (!record && Date.now() - started < 2_000) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    record = (await auditEntries()).find(
      (entry) =>
        entry.kind === "mcp.call" &&
        entry.actor === "laptop" &&
        (entry.data as { transport?: string }).transport === transport,
    );
  }
  expect(record, "the cancelled call went on waiting").toBeDefined();
  expect(record!.data).toMatchObject({ tool: "sessions_send", status: "timeout" });
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, started + 3_200 - Date.now())));
  const own = await op.sessions.history({ sessionKey: LAPTOP_KEY, includeTools: true, limit: 50 });
  expect(JSON.stringify(own.messages)).not.toContain("slow pong");
  expect((await op.sessions.status({ sessionKey: LAPTOP_KEY })).taint).toBe("PUBLIC");
}

function text(result: ToolCallResult): string {
  return (result.content as Array<{ type: string; text: string }>)[0]!.text;
}

async function auditEntries(): Promise<Array<Record<string, unknown>>> {
  return (await op.audit.tail({ limit: 1000 })).entries;
}

/** A raw HTTP POST to /mcp, for what the SDK client hides (status, headers). */
function rawPost(
  headers: Record<string, string>,
  rawBody?: string,
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const url = new URL(`${httpUrl()}/mcp`);
  const body =
    rawBody ??
    JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } },
    });
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          ...headers,
        },
      },
      (res) => {
        let data = "";
        res.setEncoding("utf8").on("data", (chunk: string) => {
          data += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: data }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

// The tests of this file share one gateway and run in order: the bound session's taint rises in the
// second one, and later ones rely on it.
describe("MCP over Streamable HTTP at /mcp", { timeout: 30_000 }, () => {
  it("lists the bound session's tools with the native definitions, and creates the session on first use", async () => {
    expect(await op.sessions.resolve({ key: MCP_KEY }).catch((error: Error) => error.message)).toMatch(
      /not found/,
    );
    const client = await mcpOverHttp();
    const { tools } = await client.listTools();
    const native = (await op.tools.list({ as: MCP_KEY })).tools;
    expect(tools.map((tool) => tool.name)).toEqual(native.map((tool) => tool.name));
    expect(tools.map((tool) => tool.name)).toEqual(
      expect.arrayContaining(["sessions_list", "sessions_send"]),
    );
    for (const [index, tool] of tools.entries()) {
      expect(tool.description).toBe(native[index]!.description);
      expect(tool.inputSchema).toMatchObject(native[index]!.parameters);
    }
    expect(tools.find((tool) => tool.name === "sessions_history")!.annotations).toMatchObject({
      readOnlyHint: true,
      destructiveHint: false,
    });
    const status = await op.sessions.status({ sessionKey: MCP_KEY });
    expect(status).toMatchObject({ channel: "mcp", clearance: "CONFIDENTIAL", taint: "PUBLIC" });
  });

  it("reports progress on the request's stream while a send waits for its reply", async () => {
    const client = await mcpOverHttp();
    const progress: Array<{ progress: number; total?: number; message?: string }> = [];
    const sent = await client.callTool(
      { name: "sessions_send", arguments: { sessionKey: BOB, message: "slow ping", timeoutSeconds: 20 } },
      undefined,
      { onprogress: (update) => progress.push(update) },
    );
    expect(sent.structuredContent).toMatchObject({ status: "ok", reply: "slow pong" });
    expect(progress.length).toBeGreaterThanOrEqual(1);
    expect(progress[0]).toMatchObject({
      total: 20,
      message: expect.stringMatching(/^sessions_send: still waiting after \d+ s$/),
    });
  });

  it("stops a call its client cancels: the wait ends at once and the late reply is not taken in", async () => {
    // The SDK sends `notifications/cancelled` in a POST of its own, which a fresh server handles.
    await expectCancelledCallStopped(await mcpOverHttp(LAPTOP_TOKEN), "http");
  });

  it("lists sessions, sends a message a reference agent answers, then reads a CONFIDENTIAL one and is refused a write-down", async () => {
    const client = await mcpOverHttp();
    const listed = await client.callTool({ name: "sessions_list", arguments: {} });
    expect(listed.isError).toBeFalsy();
    const keys = (listed.structuredContent as { sessions: Array<{ key: string }> }).sessions.map(
      (row) => row.key,
    );
    // Listing never raises taint: sessions above the bound session's current taint (PUBLIC) are hidden.
    expect(keys).toContain(BOB);
    expect(keys).not.toContain(VAULT);
    expect((listed.structuredContent as { hidden: number }).hidden).toBeGreaterThanOrEqual(2);
    expect(JSON.parse(text(listed))).toEqual(listed.structuredContent);

    const sent = await client.callTool({
      name: "sessions_send",
      arguments: { sessionKey: BOB, message: "ping", timeoutSeconds: 15 },
    });
    expect(sent.isError).toBeFalsy();
    expect(sent.structuredContent).toMatchObject({ status: "ok", reply: "pong", sessionKey: BOB });
    // The host has the reply already: the gateway takes no agent turn in its session (no reply-back step).
    await gw.gateway.flows.idle();
    const own = await op.sessions.history({ sessionKey: MCP_KEY, limit: 50 });
    expect(JSON.stringify(own.messages)).not.toContain("REPLY_SKIP");
    expect(own.messages.filter((message) => message.provenance?.kind === "agent")).toEqual([]);

    const read = await client.callTool({ name: "sessions_history", arguments: { sessionKey: VAULT } });
    expect(read.structuredContent).toMatchObject({ status: "ok", dataLabel: "CONFIDENTIAL" });
    expect(JSON.stringify(read.structuredContent)).toContain("hello vault");
    expect((await op.sessions.status({ sessionKey: MCP_KEY })).taint).toBe("CONFIDENTIAL");

    const refused = await client.callTool({
      name: "sessions_send",
      arguments: { sessionKey: BOB, message: "the vault says…", timeoutSeconds: 0 },
    });
    expect(refused.isError).toBe(true);
    expect(text(refused)).toMatch(
      /^forbidden: write-down blocked: session taint CONFIDENTIAL cannot flow to agent:main:webchat:dm:bob/,
    );
    const bobHistory = await op.sessions.history({ sessionKey: BOB, limit: 50 });
    expect(JSON.stringify(bobHistory)).not.toContain("the vault says");

    const audit = await auditEntries();
    expect(audit).toContainEqual(
      expect.objectContaining({
        kind: "policy.blocked",
        sessionKey: MCP_KEY,
        data: expect.objectContaining({ ruleId: "flow.no-write-down", target: BOB }),
      }),
    );
    expect(audit).toContainEqual(
      expect.objectContaining({
        kind: "mcp.call",
        actor: "desktop",
        sessionKey: MCP_KEY,
        data: expect.objectContaining({ tool: "sessions_send", status: "forbidden", transport: "http" }),
      }),
    );
    expect(audit).toContainEqual(
      expect.objectContaining({ kind: "session.created", actor: "desktop", sessionKey: MCP_KEY }),
    );
    expect(audit).toContainEqual(
      expect.objectContaining({
        kind: "taint",
        sessionKey: MCP_KEY,
        data: expect.objectContaining({ to: "CONFIDENTIAL" }),
      }),
    );

    // The calls are in the bound session's transcript like any agent's: a toolCall and its toolResult.
    const transcript = await op.sessions.history({ sessionKey: MCP_KEY, includeTools: true, limit: 200 });
    const roles = transcript.messages.map((message) => (message as { role: string }).role);
    expect(roles.filter((role) => role === "toolCall").length).toBeGreaterThanOrEqual(4);
    expect(roles.filter((role) => role === "toolResult").length).toBeGreaterThanOrEqual(4);
  });

  it("cannot reach what the bound session may not: a RESTRICTED transcript is refused, as a tool and as a resource", async () => {
    const client = await mcpOverHttp();
    const refused = await client.callTool({ name: "sessions_history", arguments: { sessionKey: SAFE } });
    expect(refused.isError).toBe(true);
    expect(text(refused)).toMatch(/^forbidden: read-up blocked/);
    await expect(
      client.readResource({ uri: `switchboard://session/${encodeURIComponent(SAFE)}/history` }),
    ).rejects.toThrow(/read-up blocked/);
    const vault = await client.readResource({
      uri: `switchboard://session/${encodeURIComponent(VAULT)}/history`,
    });
    expect((vault.contents[0] as { text: string }).text).toContain("hello vault");
    // The same rules for the outbound tool and the simulation: CONFIDENTIAL data stays off a PUBLIC chat.
    const out = await client.callTool({
      name: "message",
      arguments: { channel: "webchat", to: "bob", text: "from the vault" },
    });
    expect(out.isError).toBe(true);
    expect(text(out)).toMatch(/^forbidden: write-down blocked/);
    const simulated = await client.callTool({
      name: "simulate_tool_call",
      arguments: { tool_name: "sessions_send", args: { sessionKey: BOB, message: "x" } },
    });
    expect(simulated.structuredContent).toMatchObject({
      status: "ok",
      decision: "BLOCK",
      ruleId: "flow.no-write-down",
    });
    // No argument names another caller: the status of "main" is the bound agent's, seen as this session.
    const status = await client.callTool({ name: "session_status", arguments: {} });
    expect(status.structuredContent).toMatchObject({ status: "ok" });
    expect(JSON.stringify(status.structuredContent)).toContain("mcp:desktop");
  });

  it("spawns a sub-agent as the bound session", async () => {
    const client = await mcpOverHttp();
    const spawned = await client.callTool({ name: "sessions_spawn", arguments: { task: "look around" } });
    expect(spawned.structuredContent).toMatchObject({ status: "accepted" });
    const { childSessionKey: child, runId } = spawned.structuredContent as {
      childSessionKey: string;
      runId: string;
    };
    const row = await op.sessions.status({ sessionKey: child });
    expect(row).toMatchObject({ spawnedBy: MCP_KEY });
    // The child's report is recorded in the host's session once its run ended (the announce is a
    // flow the end starts); no agent turn is started there for it.
    expect((await op.agent.wait({ runId, timeoutMs: 10_000 })).status).toBe("ok");
    await gw.gateway.flows.idle();
    const own = await op.sessions.history({ sessionKey: MCP_KEY, limit: 50 });
    const reports = own.messages.filter((message) => message.provenance?.kind === "subagent");
    expect(reports).toHaveLength(1);
    expect(JSON.stringify(reports[0])).toContain("echo: look around");
    expect(JSON.stringify(own.messages)).not.toContain("ANNOUNCE_SKIP");
  });

  it("answers 401 with WWW-Authenticate for a missing or wrong token, 403 for a token of another role", async () => {
    const missing = await rawPost({});
    expect(missing.status).toBe(401);
    expect(missing.headers["www-authenticate"]).toBe('Bearer realm="switchboard"');
    const wrong = await rawPost({ authorization: "Bearer not-a-token-0123456789" });
    expect(wrong.status).toBe(401);
    expect(wrong.headers["www-authenticate"]).toMatch(/^Bearer realm="switchboard", error="invalid_token"/);
    await expect(mcpOverHttp("not-a-token-0123456789")).rejects.toThrow(/401|invalid token/i);

    for (const token of [gw.token, WORKER_TOKEN, CLIENT_TOKEN]) {
      const other = await rawPost({ authorization: `Bearer ${token}` });
      expect(other.status).toBe(403);
      expect(JSON.parse(other.body).error.message).toMatch(/takes only role mcp tokens/);
    }
    const ok = await rawPost({ authorization: `Bearer ${MCP_TOKEN}` });
    expect(ok.status).toBe(200);
  });

  it("answers bad arguments with an isError result naming the field, and bounds the request", async () => {
    const client = await mcpOverHttp();
    const bad = await client.callTool({ name: "sessions_history", arguments: { sessionKey: 42 } });
    expect(bad.isError).toBe(true);
    expect(text(bad)).toMatch(/^error: .*sessionKey/);
    const unknown = await client.callTool({ name: "no_such_tool", arguments: {} });
    expect(unknown.isError).toBe(true);

    const huge = await rawPost({ authorization: `Bearer ${MCP_TOKEN}`, "x-pad": "1" }, "x".repeat(1_100_000));
    expect(huge.status).toBe(413);
    expect(JSON.parse(huge.body).error.message).toMatch(/gateway\.limits\.maxPayload/);
    const get = await fetch(`${httpUrl()}/mcp`, { headers: { authorization: `Bearer ${MCP_TOKEN}` } });
    expect(get.status).toBe(405);
    expect(get.headers.get("allow")).toBe("POST");
  });

  it("keeps no transport session: a tools/call with no initialize before it is answered (any instance can)", async () => {
    const call = await rawPost(
      { authorization: `Bearer ${MCP_TOKEN}`, "mcp-protocol-version": "2025-06-18" },
      JSON.stringify({
        jsonrpc: "2.0",
        id: 7,
        method: "tools/call",
        params: { name: "agents_list", arguments: {} },
      }),
    );
    expect(call.status).toBe(200);
    expect(call.headers["mcp-session-id"]).toBeUndefined();
    const frame = JSON.parse(/^data: (.*)$/m.exec(call.body)![1]!) as {
      id: number;
      result: { structuredContent: unknown };
    };
    expect(frame.id).toBe(7);
    expect(frame.result.structuredContent).toMatchObject({ status: "ok" });
  });

  it("refuses a Host or Origin that is not loopback (DNS rebinding) on a loopback gateway", async () => {
    const host = await rawPost({ authorization: `Bearer ${MCP_TOKEN}`, host: "evil.example" });
    expect(host.status).toBe(403);
    expect(JSON.parse(host.body).error.message).toBe("Host header: evil.example is not a loopback name");
    const origin = await rawPost({ authorization: `Bearer ${MCP_TOKEN}`, origin: "https://evil.example" });
    expect(origin.status).toBe(403);
  });
});

describe("role mcp on the WebSocket protocol", () => {
  it("may list and call tools only as its token's session", async () => {
    const peer = await TestPeer.connect(gw.url, { token: MCP_TOKEN, role: "mcp" });
    try {
      const listed = await peer.request("tools.list", {});
      expect(listed.ok).toBe(true);
      const asOther = await peer.request("tools.invoke", { tool: "sessions_list", args: {}, as: VAULT });
      expect(asOther.error).toMatchObject({ code: "INVALID_REQUEST" });
      expect(asOther.error!.message).toMatch(/^as: not accepted for role mcp/);
      const history = await peer.request("sessions.history", { sessionKey: VAULT });
      expect(history.error).toMatchObject({ code: "FORBIDDEN" });
      const subscribe = await peer.request("events.subscribe", {});
      expect(subscribe.error).toMatchObject({ code: "FORBIDDEN" });
    } finally {
      peer.close();
    }
    // Another role's token cannot connect as mcp, nor an mcp token as another role.
    const operatorAsMcp = await TestPeer.open(gw.url);
    const refused = await operatorAsMcp.request("connect", {
      protocol: 1,
      client: { name: "t", version: "0" },
      auth: { token: gw.token },
      role: "mcp",
    });
    expect(refused.error).toMatchObject({ code: "UNAUTHORIZED" });
    operatorAsMcp.close();
    const mcpAsClient = await TestPeer.open(gw.url);
    const refusedClient = await mcpAsClient.request("connect", {
      protocol: 1,
      client: { name: "t", version: "0" },
      auth: { token: MCP_TOKEN },
      role: "client",
      sessionKey: BOB,
    });
    expect(refusedClient.error).toMatchObject({ code: "UNAUTHORIZED" });
    mcpAsClient.close();
  });
});

if (!CLI_BUILT) console.warn(`skipping the stdio MCP test: ${NOT_BUILT_MESSAGE}`);

describe.skipIf(!CLI_BUILT)("MCP over stdio: switchboard mcp", { timeout: 30_000 }, () => {
  it("relays list and calls to the gateway, with nothing but MCP frames on stdout", async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI_PATH, "mcp", "--url", gw.url],
      env: cleanEnv({ SWITCHBOARD_TOKEN: MCP_TOKEN }) as Record<string, string>,
      stderr: "pipe",
    });
    let stderr = "";
    transport.stderr?.on("data", (chunk: Buffer) => {
      stderr += String(chunk);
    });
    // A line on stdout that is not a JSON-RPC frame surfaces here.
    const transportErrors: Error[] = [];
    const client = new Client({ name: "mcp-stdio-test", version: "0" });
    client.onerror = (error) => transportErrors.push(error);
    await client.connect(transport);
    clients.push(client);

    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).toEqual(
      (await op.tools.list({ as: MCP_KEY })).tools.map((t) => t.name),
    );
    const listed = await client.callTool({ name: "sessions_list", arguments: { limit: 5 } });
    expect(listed.structuredContent).toMatchObject({ status: "ok" });
    // The bound session read CONFIDENTIAL data above: the write-down rule holds over stdio too.
    const refused = await client.callTool({
      name: "sessions_send",
      arguments: { sessionKey: BOB, message: "ping", timeoutSeconds: 5 },
    });
    expect(refused.isError).toBe(true);
    expect(text(refused)).toMatch(/write-down blocked/);
    const history = await client.callTool({ name: "sessions_history", arguments: { sessionKey: VAULT } });
    expect(history.structuredContent).toMatchObject({ status: "ok" });

    await client.close();
    expect(transportErrors).toEqual([]);
    expect(stderr).toContain("switchboard mcp: serving the session tools");
    const audit = await auditEntries();
    expect(audit).toContainEqual(
      expect.objectContaining({
        kind: "mcp.call",
        actor: "desktop",
        data: expect.objectContaining({ tool: "sessions_history", status: "ok", transport: "websocket" }),
      }),
    );
  });

  it("stops a call the host cancels at the gateway too (tools.cancel)", async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI_PATH, "mcp", "--url", gw.url],
      env: cleanEnv({ SWITCHBOARD_TOKEN: LAPTOP_TOKEN }) as Record<string, string>,
      stderr: "pipe",
    });
    const client = new Client({ name: "mcp-stdio-test", version: "0" });
    await client.connect(transport);
    clients.push(client);
    await expectCancelledCallStopped(client, "websocket");
  });

  it("exits with a clear message on stderr when the gateway refuses the token", async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI_PATH, "mcp", "--url", gw.url, "--token", "not-a-token-0123456789"],
      env: cleanEnv() as Record<string, string>,
      stderr: "pipe",
    });
    let stderr = "";
    transport.stderr?.on("data", (chunk: Buffer) => {
      stderr += String(chunk);
    });
    const client = new Client({ name: "mcp-stdio-test", version: "0" });
    await expect(client.connect(transport)).rejects.toThrow();
    await client.close().catch(() => undefined);
    expect(stderr).toMatch(/refused the token: invalid token/);
  });
});
