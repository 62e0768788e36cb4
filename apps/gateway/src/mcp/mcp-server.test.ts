import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { SwitchboardError, type ToolDefinition } from "@switchboard/core";
import { toolDefinitions } from "@switchboard/tools";
import { afterEach, describe, expect, it, vi } from "vitest";
import { isLoopbackAddress, rebindingProblem } from "../http/rebinding";
import { createMcpServer, historyUri, type SessionToolPort } from "./mcp-server";

/** A scripted port: the tests pin how the MCP server turns tool results into MCP answers. */
function fakePort(
  answer: (name: string, args: Record<string, unknown>) => Promise<Record<string, unknown>>,
  definitions: ToolDefinition[] = toolDefinitions([
    "sessions_list",
    "sessions_history",
    "sessions_send",
    "message",
  ]),
): SessionToolPort & { calls: Array<{ name: string; args: Record<string, unknown> }> } {
  const calls: Array<{ name: string; args: Record<string, unknown> }> = [];
  return {
    calls,
    listTools: async () => definitions,
    callTool: (name, args) => {
      calls.push({ name, args });
      return answer(name, args);
    },
  };
}

const clients: Client[] = [];

async function connected(port: SessionToolPort, progressIntervalMs?: number): Promise<Client> {
  const server = createMcpServer(port, {
    sessionKey: "agent:main:mcp:test",
    ...(progressIntervalMs ? { progressIntervalMs } : {}),
  });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: "test", version: "0" });
  await client.connect(clientSide);
  clients.push(client);
  return client;
}

afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
});

describe("MCP server over a session tool port", () => {
  it("lists the native definitions with their JSON Schemas and annotations", async () => {
    const native = toolDefinitions(["sessions_list", "sessions_send", "message"]);
    const client = await connected(fakePort(async () => ({ status: "ok" }), native));
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).toEqual(["sessions_list", "sessions_send", "message"]);
    for (const [index, tool] of tools.entries()) {
      expect(tool.description).toBe(native[index]!.description);
      expect(tool.inputSchema).toEqual({ ...native[index]!.parameters, type: "object" });
    }
    expect(tools[0]!.annotations).toMatchObject({
      readOnlyHint: true,
      destructiveHint: false,
      openWorldHint: false,
    });
    expect(tools[1]!.annotations).toMatchObject({
      readOnlyHint: false,
      destructiveHint: false,
      openWorldHint: false,
    });
    expect(tools[2]!.annotations).toMatchObject({ readOnlyHint: false, openWorldHint: true });
  });

  it("returns a result as structuredContent and as JSON text; a refusal is isError naming the rule", async () => {
    const port = fakePort(async (name) =>
      name === "sessions_list"
        ? { status: "ok", count: 0, sessions: [] }
        : { status: "forbidden", error: "write-down blocked: session taint CONFIDENTIAL cannot flow to x" },
    );
    const client = await connected(port);
    const ok = await client.callTool({ name: "sessions_list", arguments: { limit: 5 } });
    expect(ok.isError).toBeFalsy();
    expect(ok.structuredContent).toEqual({ status: "ok", count: 0, sessions: [] });
    expect(ok.content).toEqual([
      { type: "text", text: JSON.stringify({ status: "ok", count: 0, sessions: [] }) },
    ]);
    expect(port.calls[0]).toEqual({ name: "sessions_list", args: { limit: 5 } });

    const refused = await client.callTool({
      name: "sessions_send",
      arguments: { sessionKey: "x", message: "m" },
    });
    expect(refused.isError).toBe(true);
    expect((refused.content as Array<{ text: string }>)[0]!.text).toBe(
      "forbidden: write-down blocked: session taint CONFIDENTIAL cannot flow to x",
    );
    expect(refused.structuredContent).toMatchObject({ status: "forbidden" });
  });

  it("turns a call the gateway could not make into an isError result with its code", async () => {
    const client = await connected(
      fakePort(async () => {
        throw new SwitchboardError("UNAVAILABLE", "the gateway is restarting");
      }),
    );
    const result = await client.callTool({ name: "sessions_list", arguments: {} });
    expect(result.isError).toBe(true);
    expect((result.content as Array<{ text: string }>)[0]!.text).toBe(
      "error: UNAVAILABLE: the gateway is restarting",
    );
  });

  it("reports progress while a call waits, when the client asked for it", async () => {
    const client = await connected(
      fakePort(async () => {
        await new Promise((resolve) => setTimeout(resolve, 230));
        return { status: "ok", reply: "late" };
      }),
      50,
    );
    const progress: Array<{ progress: number; message?: string }> = [];
    const result = await client.callTool(
      { name: "sessions_send", arguments: { sessionKey: "x", message: "m" } },
      undefined,
      {
        onprogress: (update) => progress.push(update),
      },
    );
    expect(result.structuredContent).toEqual({ status: "ok", reply: "late" });
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(progress[0]!.message).toMatch(/^sessions_send: still waiting after \d+ s$/);
  });

  it("gives progress the wait's total as the tool clamps it", async () => {
    const client = await connected(
      fakePort(async () => {
        await new Promise((resolve) => setTimeout(resolve, 120));
        return { status: "ok", reply: "late" };
      }),
      50,
    );
    const progress: Array<{ progress: number; total?: number }> = [];
    await client.callTool(
      { name: "sessions_send", arguments: { sessionKey: "x", message: "m", timeoutSeconds: 3600 } },
      undefined,
      { onprogress: (update) => progress.push(update) },
    );
    expect(progress[0]).toMatchObject({ total: 600 });
  });

  it("serves visible transcripts as resources through sessions_list and sessions_history", async () => {
    const port = fakePort(async (name, args) => {
      if (name === "sessions_list")
        return {
          status: "ok",
          count: 1,
          sessions: [{ key: "agent:main:main", kind: "main", taint: "CONFIDENTIAL" }],
        };
      if (args.sessionKey === "agent:main:main")
        return { status: "ok", messages: [{ role: "user", text: "hi" }] };
      return { status: "forbidden", error: "read-up blocked: agent:main:secret (taint SECRET) cannot flow" };
    });
    const client = await connected(port);
    const templates = await client.listResourceTemplates();
    expect(templates.resourceTemplates[0]!.uriTemplate).toBe("switchboard://session/{key}/history");
    const { resources } = await client.listResources();
    expect(resources).toEqual([
      {
        uri: "switchboard://session/agent%3Amain%3Amain/history",
        name: "agent:main:main",
        mimeType: "application/json",
        _meta: { "switchboard/taint": "CONFIDENTIAL" },
      },
    ]);
    const read = await client.readResource({ uri: resources[0]!.uri });
    expect(JSON.parse((read.contents[0] as { text: string }).text)).toEqual({
      status: "ok",
      messages: [{ role: "user", text: "hi" }],
    });
    await expect(client.readResource({ uri: historyUri("agent:main:secret") })).rejects.toThrow(
      /read-up blocked/,
    );
    await expect(client.readResource({ uri: "switchboard://elsewhere" })).rejects.toThrow(/uri: must be/);
    expect(port.calls.map((call) => call.name)).toEqual([
      "sessions_list",
      "sessions_history",
      "sessions_history",
    ]);
  });

  // Before session 23 the SDK sent a list handler's thrown error's own text (-32603), and a read
  // that failed inside the gateway answered -32600 "invalid request".
  it("answers a list or read the gateway failed at -32603 without the error's own text", async () => {
    const leak = "connect ECONNREFUSED 10.0.3.7:5432 (user=switchboard_admin)";
    const port: SessionToolPort = {
      listTools: async () => {
        throw new Error(leak);
      },
      callTool: async (name) => {
        if (name === "sessions_list") throw new Error(leak);
        return { status: "error", error: "internal error" };
      },
    };
    const client = await connected(port);
    for (const attempt of [
      () => client.listTools(),
      () => client.listResources(),
      () => client.readResource({ uri: historyUri("agent:main:main") }),
    ]) {
      const error = await attempt().then(
        () => undefined,
        (thrown: unknown) => thrown as { code?: number; message: string },
      );
      expect(error?.code).toBe(-32603);
      expect(error?.message).toContain("internal error");
      expect(error?.message).not.toContain("10.0.3.7");
    }
  });
});

describe("requests that do not fit their method's schema", () => {
  type Answer = { error?: { code: number; message: string }; result?: { structuredContent?: unknown } };

  /** Sends raw JSON-RPC messages to a server over the in-memory transport; answers by id. */
  async function exchange(port: SessionToolPort, messages: object[]): Promise<Map<unknown, Answer>> {
    const server = createMcpServer(port, { sessionKey: "agent:main:mcp:test" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const answers = new Map<unknown, Answer>();
    clientSide.onmessage = (message) => {
      if ("id" in message) answers.set(message.id, message as Answer);
    };
    await clientSide.start();
    for (const message of messages) await clientSide.send({ jsonrpc: "2.0", ...message } as never);
    await vi.waitFor(() => expect(answers.size).toBe(messages.length));
    await clientSide.close();
    return answers;
  }

  // The SDK answered these -32603 (internal error) with zod's issues as a JSON dump.
  it("are answered invalid params naming each field, and reach no tool", async () => {
    const port = fakePort(async () => ({ status: "ok" }));
    const answers = await exchange(port, [
      { id: 1, method: "tools/call", params: { name: 42 } },
      { id: 2, method: "tools/call" },
      { id: 3, method: "tools/call", params: { name: "sessions_list", arguments: "all" } },
      { id: 4, method: "resources/read", params: { uri: 7 } },
      { id: 5, method: "initialize", params: { protocolVersion: 2025 } },
      { id: 6, method: "tools/call", params: { name: "sessions_list", arguments: {} } },
    ]);
    const refusal = (id: number) => {
      const error = answers.get(id)?.error;
      expect(error?.code, `id ${id}`).toBe(-32602);
      const message = error?.message ?? "";
      expect(message, `id ${id}`).not.toMatch(/[[{]\s*"|\n/);
      return message;
    };
    expect(refusal(1)).toMatch(/^tools\/call: params\.name: .*expected string, received number/);
    expect(refusal(2)).toMatch(/^tools\/call: params: .*expected object/);
    expect(refusal(3)).toMatch(/params\.arguments: .*expected record/);
    expect(refusal(4)).toMatch(/^resources\/read: params\.uri: /);
    expect(refusal(5)).toMatch(/^initialize: params\.protocolVersion: .*params\.capabilities: /);
    expect(answers.get(6)?.result?.structuredContent).toEqual({ status: "ok" });
    expect(port.calls).toEqual([{ name: "sessions_list", args: {} }]);
  });

  it("do not echo a client's huge keys back whole", async () => {
    const experimental = Object.fromEntries(
      Array.from({ length: 20 }, (_, i) => [`${i}${"k".repeat(60_000)}`, "not an object"]),
    );
    const answers = await exchange(
      fakePort(async () => ({ status: "ok" })),
      [
        {
          id: 1,
          method: "initialize",
          params: {
            protocolVersion: "2025-06-18",
            clientInfo: { name: "c", version: "1" },
            capabilities: { experimental },
          },
        },
      ],
    );
    const error = answers.get(1)?.error;
    expect(error?.code).toBe(-32602);
    const message = error?.message ?? "";
    expect(message).toMatch(/^initialize: params\.capabilities\.experimental\./);
    expect(message).toMatch(/; and 12 more$/);
    expect(message.length).toBeLessThan(2_500);
  });
});

describe("DNS-rebinding checks on loopback", () => {
  it("accepts loopback Host and Origin on any port, refuses other names", () => {
    expect(rebindingProblem("127.0.0.1:18789", undefined)).toBeUndefined();
    expect(rebindingProblem("localhost:1", "http://localhost:6274")).toBeUndefined();
    expect(rebindingProblem("[::1]:8080", "http://127.0.0.1")).toBeUndefined();
    expect(rebindingProblem("evil.example:18789", undefined)).toBe(
      "Host header: evil.example is not a loopback name",
    );
    expect(rebindingProblem("127.0.0.1:18789", "https://evil.example")).toBe(
      "Origin header: https://evil.example is not a loopback origin",
    );
    expect(rebindingProblem(undefined, undefined)).toBe("Host header: required");
    // Other spellings of the same loopback names (the URL parser turns the mapped address into hex).
    expect(rebindingProblem("localhost.:18789", undefined)).toBeUndefined();
    expect(rebindingProblem("[::ffff:127.0.0.1]:18789", "http://[::ffff:127.0.0.1]:3000")).toBeUndefined();
    expect(rebindingProblem("localhost.evil.example", undefined)).toBe(
      "Host header: localhost.evil.example is not a loopback name",
    );
  });

  it("knows loopback socket addresses", () => {
    expect(isLoopbackAddress("127.0.0.1")).toBe(true);
    expect(isLoopbackAddress("::ffff:127.0.0.1")).toBe(true);
    expect(isLoopbackAddress("::ffff:7f00:1")).toBe(true);
    expect(isLoopbackAddress("0:0:0:0:0:0:0:1")).toBe(true);
    expect(isLoopbackAddress("::ffff:10.0.0.1")).toBe(false);
    expect(isLoopbackAddress("localhost")).toBe(false);
    expect(isLoopbackAddress("::1")).toBe(true);
    expect(isLoopbackAddress("10.0.0.1")).toBe(false);
    expect(isLoopbackAddress(undefined)).toBe(false);
  });
});
