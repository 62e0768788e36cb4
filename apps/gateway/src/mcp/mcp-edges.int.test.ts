import { request as httpRequest } from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { SwitchboardClient } from "@switchboard/client";
import type { ConfigInput, ScriptedRuleInput } from "@switchboard/core";
import { beforeAll, describe, expect, it } from "vitest";
import type { TestGateway } from "../testing/test-gateway";
import { useMcpGateway } from "./mcp-test-gateway";

/**
 * A hostile MCP client against `/mcp`: identity, policy, malformed input, faults. Each test uses
 * its own mcp token (and so its own bound session) so that taint raised by one does not change
 * what another may do.
 */

const WORKER_TOKEN = "mcp-edges-worker-0123456789";
const tokens = {
  a: { name: "host-a", token: "mcp-edges-a-0123456789", session: "agent:main:mcp:a" },
  b: { name: "host-b", token: "mcp-edges-b-0123456789", session: "agent:main:mcp:b" },
  c: { name: "host-c", token: "mcp-edges-c-0123456789", session: "agent:main:mcp:c" },
  d: { name: "host-d", token: "mcp-edges-d-0123456789", session: "agent:main:mcp:d" },
  e: { name: "host-e", token: "mcp-edges-e-0123456789", session: "agent:main:mcp:e" },
  f: { name: "host-f", token: "mcp-edges-f-0123456789", session: "agent:main:mcp:f" },
  g: { name: "host-g", token: "mcp-edges-g-0123456789", session: "agent:main:mcp:g" },
  h: { name: "host-h", token: "mcp-edges-h-0123456789", session: "agent:main:mcp:h" },
} as const;
type Host = keyof typeof tokens;

const BOB = "agent:main:webchat:dm:bob";
const CAROL = "agent:main:webchat:dm:carol";
const VAULT = "agent:main:vault:dm:1";
const DAVE = "agent:main:webchat:dm:dave";
const ERIN = "agent:main:webchat:dm:erin";

const RULES: ScriptedRuleInput[] = [
  { context: "Agent-to-agent reply step", reply: "REPLY_SKIP" },
  { context: "announce step", reply: "ANNOUNCE_SKIP" },
  { when: "^ping$", reply: "pong" },
  { when: "^slow ping", delayMs: 2_600, reply: "slow pong" },
  { reply: "echo: {{message}}" },
];

const CONFIG: ConfigInput = {
  auth: {
    tokens: [
      { name: "worker", token: WORKER_TOKEN, role: "agent", agents: ["main"] },
      ...Object.values(tokens).map((t) => ({ ...t, role: "mcp" as const })),
    ],
  },
  agents: { list: [{ id: "main", default: true, model: { provider: "scripted", rules: RULES } }] },
  labels: { channels: { mcp: "CONFIDENTIAL", vault: "CONFIDENTIAL" } },
  policy: {
    rules: [
      {
        id: "carol-is-private",
        hook: "PRE_TOOL_CALL",
        when: { "tool.name": "sessions_history", "tool.args.sessionKey": CAROL },
        action: "deny",
        message: "carol's history is off-limits to tools",
      },
    ],
  },
};

const shared = useMcpGateway(CONFIG, WORKER_TOKEN, [
  [BOB, "webchat"],
  [CAROL, "webchat"],
  [VAULT, "vault"],
  [DAVE, "webchat"],
  [ERIN, "webchat"],
]);
const clients = shared.clients;
let gw: TestGateway;
let op: SwitchboardClient;
beforeAll(() => {
  ({ gw, op } = shared);
});

const httpUrl = () => gw.url.replace(/^ws/, "http");

async function mcp(host: Host, headers: Record<string, string> = {}): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${httpUrl()}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${tokens[host].token}`, ...headers } },
  });
  const client = new Client({ name: "mcp-hostile", version: "0" });
  await client.connect(transport);
  clients.push(client);
  return client;
}

interface RawAnswer {
  status: number;
  headers: Record<string, unknown>;
  body: string;
}

/** A raw POST to /mcp; `abortAfterMs` destroys the request (the client goes away mid-call). */
function rawPost(
  host: Host | undefined,
  body: string,
  headers: Record<string, string | undefined> = {},
  options: { abortAfterMs?: number; timeoutMs?: number } = {},
): Promise<RawAnswer | "aborted" | "hung"> {
  const merged: Record<string, string> = {};
  for (const [key, value] of Object.entries({
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": "2025-06-18",
    ...(host ? { authorization: `Bearer ${tokens[host].token}` } : {}),
    ...headers,
  }))
    if (value !== undefined) merged[key] = value;
  return new Promise((resolve, reject) => {
    const req = httpRequest(new URL(`${httpUrl()}/mcp`), { method: "POST", headers: merged }, (res) => {
      let data = "";
      res.setEncoding("utf8").on("data", (chunk: string) => {
        data += chunk;
      });
      res.on("end", () => {
        clearTimeout(hang);
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: data });
      });
      res.on("error", () => undefined);
    });
    const hang = setTimeout(() => {
      req.destroy();
      resolve("hung");
    }, options.timeoutMs ?? 8_000);
    req.on("error", (error) => {
      clearTimeout(hang);
      if (options.abortAfterMs !== undefined) resolve("aborted");
      else reject(error);
    });
    if (options.abortAfterMs !== undefined)
      setTimeout(() => {
        clearTimeout(hang);
        req.destroy();
        resolve("aborted");
      }, options.abortAfterMs);
    req.end(body);
  });
}

function answered(answer: RawAnswer | "aborted" | "hung"): RawAnswer {
  if (typeof answer === "string") throw new Error(`no answer: ${answer}`);
  return answer;
}

/** A JSON-RPC message or audit record, read ad hoc by the assertions. */
// biome-ignore lint/suspicious/noExplicitAny: answers of any shape are probed field by field
type Loose = Record<string, any>;

/** The JSON-RPC messages of an answer (an SSE stream or a JSON body). */
function frames(answer: RawAnswer): Array<Loose> {
  if (String(answer.headers["content-type"]).startsWith("text/event-stream")) {
    return [...answer.body.matchAll(/^data: (.+)$/gm)].map((m) => JSON.parse(m[1]!));
  }
  const parsed = JSON.parse(answer.body);
  return Array.isArray(parsed) ? parsed : [parsed];
}

function call(id: number | string, name: string, args: unknown, meta?: Record<string, unknown>): string {
  return JSON.stringify({
    jsonrpc: "2.0",
    id,
    method: "tools/call",
    params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) },
  });
}

type ToolCallResult = Awaited<ReturnType<Client["callTool"]>>;
const textOf = (result: ToolCallResult) => (result.content as Array<{ text: string }>)[0]!.text;

async function auditEntries(): Promise<Array<Loose>> {
  return (await op.audit.tail({ limit: 1000 })).entries as Array<Loose>;
}

async function transcript(key: string): Promise<string> {
  return JSON.stringify(
    (await op.sessions.history({ sessionKey: key, includeTools: true, limit: 200 })).messages,
  );
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("hostile MCP client: identity", { timeout: 30_000 }, () => {
  it("ignores every caller-naming argument and header: the caller is always the token's session", async () => {
    const client = await mcp("a", {
      "mcp-session-id": "forged-session-id",
      "x-switchboard-session": VAULT,
      "x-switchboard-as": VAULT,
    });
    const status = await client.callTool({
      name: "session_status",
      arguments: { as: VAULT, runId: "run-of-someone-else", callerSessionKey: VAULT, caller: VAULT },
    });
    expect(status.isError).toBeFalsy();
    const body = JSON.stringify(status.structuredContent);
    expect(body).toContain("mcp:a");
    expect(body).not.toContain("vault");
    // The bound session's taint did not move (VAULT was not read through an argument).
    expect((await op.sessions.status({ sessionKey: tokens.a.session })).taint).toBe("PUBLIC");
  });

  it("a token cannot cancel another token's call, even naming its exact JSON-RPC id", async () => {
    const id = "shared-id-1";
    const pending = rawPost(
      "b",
      call(id, "sessions_send", { sessionKey: BOB, message: "slow ping b", timeoutSeconds: 20 }),
      {},
      { timeoutMs: 15_000 },
    );
    await sleep(300);
    const cancel = answered(
      await rawPost(
        "c",
        JSON.stringify({
          jsonrpc: "2.0",
          method: "notifications/cancelled",
          params: { requestId: id, reason: "hostile" },
        }),
      ),
    );
    expect(cancel.status).toBe(202);
    const answer = answered(await pending);
    const result = frames(answer).find((frame) => frame.id === id)!;
    expect(result.result.structuredContent).toMatchObject({ status: "ok", reply: "slow pong" });
  });
});

describe("hostile MCP client: policy and labels", { timeout: 30_000 }, () => {
  // Guard: `prepareArguments` (packages/tools/src/parse-tool-params.ts) copies arguments with
  // `input[key] = value`, so an own `__proto__` key would become the prototype zod reads `sessionKey`
  // from, while the PRE_TOOL_CALL rule looks only at own keys (`Object.hasOwn`). Today the SDK's zod
  // parse of the request drops `__proto__` first, so the smuggled key never arrives.
  it("a PRE_TOOL_CALL rule on tool.args cannot be dodged by hiding the argument under __proto__", async () => {
    const plain = answered(await rawPost("d", call(1, "sessions_history", { sessionKey: CAROL })));
    const refused = frames(plain)[0]!.result;
    expect(refused.isError).toBe(true);
    expect(refused.content[0].text).toMatch(/^forbidden: carol's history is off-limits/);

    const smuggled = answered(
      await rawPost(
        "d",
        `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sessions_history","arguments":{"__proto__":{"sessionKey":"${CAROL}"}}}}`,
      ),
    );
    const result = frames(smuggled)[0]!.result;
    expect(JSON.stringify(result)).not.toContain("hello webchat agent:main:webchat:dm:carol");
    expect(result.isError).toBe(true);
  });

  it("resources/list and resources/read keep the read rules and raise taint like the tools", async () => {
    const client = await mcp("e");
    const { resources } = await client.listResources();
    // Discovery without escalation: the CONFIDENTIAL chat is not listed while the session is PUBLIC.
    expect(resources.map((r) => r.name)).not.toContain(VAULT);
    const read = await client.readResource({
      uri: `switchboard://session/${encodeURIComponent(VAULT)}/history`,
    });
    expect(JSON.parse((read.contents[0] as { text: string }).text)).toMatchObject({
      status: "ok",
      dataLabel: "CONFIDENTIAL",
    });
    expect((await op.sessions.status({ sessionKey: tokens.e.session })).taint).toBe("CONFIDENTIAL");
    // And the write-down rule now holds for the host.
    const refused = await client.callTool({
      name: "sessions_send",
      arguments: { sessionKey: BOB, message: "vault leak", timeoutSeconds: 0 },
    });
    expect(refused.isError).toBe(true);
    expect(textOf(refused)).toMatch(/write-down blocked/);
    expect(await transcript(BOB)).not.toContain("vault leak");
    await expect(client.readResource({ uri: "switchboard://session/%E0%A4%A/history" })).rejects.toThrow(
      /percent-encoding/,
    );
    await expect(client.readResource({ uri: "file:///etc/passwd" })).rejects.toThrow(/uri: must be/);
  });
});

describe("hostile MCP client: bad input", { timeout: 30_000 }, () => {
  it("answers malformed JSON-RPC with a 4xx JSON error, never a 500 or a stack", async () => {
    const cases: Array<[string, string, Record<string, string | undefined>?]> = [
      ["null body", "null"],
      ["a string", '"tools/list"'],
      ["a number", "42"],
      ["an empty object", "{}"],
      ["no jsonrpc field", JSON.stringify({ id: 1, method: "tools/list" })],
      ["jsonrpc 1.0", JSON.stringify({ jsonrpc: "1.0", id: 1, method: "tools/list" })],
      ["an object id", JSON.stringify({ jsonrpc: "2.0", id: { x: 1 }, method: "tools/list" })],
      ["truncated JSON", '{"jsonrpc":"2.0","id":1,'],
      [
        "text/plain",
        JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
        { "content-type": "text/plain" },
      ],
      ["no accept", JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }), { accept: undefined }],
      [
        "bogus protocol version",
        JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
        { "mcp-protocol-version": "1999-01-01" },
      ],
      [
        "101 messages",
        JSON.stringify(
          Array.from({ length: 101 }, (_, i) => ({ jsonrpc: "2.0", id: i, method: "tools/list" })),
        ),
      ],
    ];
    for (const [label, body, headers] of cases) {
      const answer = answered(await rawPost("a", body, headers ?? {}));
      expect(answer.status, label).toBeGreaterThanOrEqual(400);
      expect(answer.status, label).toBeLessThan(500);
      const error = JSON.parse(answer.body).error;
      expect(error?.message, label).toEqual(expect.any(String));
      expect(answer.body, label).not.toMatch(/\n\s+at /);
    }
  });

  // JSON-RPC 2.0: an empty batch is answered with one Invalid Request error (the SDK's transport, seeing
  // no request, answered 202 Accepted: no error at all).
  it("answers an empty batch with an Invalid Request error", async () => {
    const answer = answered(await rawPost("a", "[]"));
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body || "{}").error?.code).toBe(-32600);
  });

  it("answers wrong params shapes with a JSON-RPC error or an isError result naming the field", async () => {
    const bodies = [
      call(1, "sessions_list", [1, 2, 3]),
      call(2, "sessions_list", "not an object"),
      JSON.stringify({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { arguments: {} } }),
      JSON.stringify({ jsonrpc: "2.0", id: 4, method: "tools/call", params: { name: 42 } }),
      JSON.stringify({ jsonrpc: "2.0", id: 5, method: "tools/call" }),
      JSON.stringify({ jsonrpc: "2.0", id: 6, method: "no/such/method", params: {} }),
      JSON.stringify({ jsonrpc: "2.0", id: 7, method: "resources/read", params: { uri: 7 } }),
      call(9, "sessions_send", { sessionKey: BOB, message: "m".repeat(900_000) }),
    ];
    for (const body of bodies) {
      const answer = answered(await rawPost("a", body));
      expect(answer.status, body.slice(0, 80)).toBeLessThan(500);
      const [frame] = frames(answer);
      const message: string = frame!.error?.message ?? frame!.result?.content?.[0]?.text;
      expect(frame!.error !== undefined || frame!.result?.isError === true, body.slice(0, 80)).toBe(true);
      expect(message, body.slice(0, 80)).toEqual(expect.any(String));
      expect(message).not.toMatch(/INTERNAL|\n\s+at /);
      // Params that do not fit the method's schema: invalid params naming the field, not the SDK's
      // -32603 with zod's issues as a JSON dump.
      if ([3, 4, 5, 7].includes(frame!.id)) {
        expect(frame!.error?.code, body).toBe(-32602);
        expect(message, body).toMatch(/^(tools\/call|resources\/read): params(\.name|\.uri)?: /);
        expect(message, body).not.toMatch(/"code"/);
      }
      // An error does not echo an attacker's 200 KB back whole.
      expect(message.length, body.slice(0, 80)).toBeLessThan(20_000);
    }
    expect(await transcript(BOB)).not.toContain("m".repeat(1_000));
  });

  // Bounded as the WebSocket `tools.invoke` bounds it (128 characters). Was: any length, echoed three
  // times in the answer (`unknown tool: …`) and stored whole in the audit log (`mcp.call` data.tool).
  it("refuses a tool name beyond the protocol's bound without echoing or storing it whole", async () => {
    const name = `evil_${"x".repeat(200_000)}`;
    const answer = answered(await rawPost("a", call("long-name", name, {})));
    expect(answer.status).toBeLessThan(500);
    const [frame] = frames(answer);
    expect(frame!.error?.code).toBe(-32602);
    expect(frame!.error?.message).toContain("name: ");
    expect(answer.body.length, "answer size").toBeLessThan(20_000);
    const stored = (await auditEntries()).filter(
      (entry) => entry.kind === "mcp.call" && String(entry.data?.tool ?? "").startsWith("evil_"),
    );
    for (const entry of stored)
      expect(String(entry.data.tool).length, "audit data.tool").toBeLessThanOrEqual(128);
  });

  // Was: the unknown key was dropped, the message delivered, then recording the call overflowed the
  // stack: the host heard `INTERNAL: Maximum call stack size exceeded` for a send that happened (and
  // might retry it), and the call was missing from its own transcript.
  it("refuses a send with arguments nested too deep before anything is delivered", async () => {
    const depth = 200_000;
    const deep = `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sessions_send","arguments":{"sessionKey":"${BOB}","message":"deep nesting","timeoutSeconds":0,"pad":${deep}}}}`;
    const answer = answered(await rawPost("f", body));
    expect(answer.status).toBeLessThan(500);
    const [frame] = frames(answer);
    expect(frame!.error?.code).toBe(-32602);
    expect(frame!.error?.message).toContain("arguments: must not nest deeper than 64 levels");
    expect(await transcript(BOB)).not.toContain("deep nesting");
    // The gateway is still up and serving.
    const after = answered(await rawPost("f", call(2, "agents_list", {})));
    expect(frames(after)[0]!.result.structuredContent).toMatchObject({ status: "ok" });
  });

  // The SDK's transport keeps one answer slot per id: the first answer to id 1 counted for both
  // requests, the stream ended with it, and the other call, which had run too, was answered nowhere.
  it("refuses a batch that reuses an id, naming the id, and runs nothing of it", async () => {
    const send = (message: string) =>
      call("same", "sessions_send", { sessionKey: ERIN, message, timeoutSeconds: 0 });
    const answer = answered(
      await rawPost(
        "h",
        `[${send("first with id same")},${call(2, "agents_list", {})},${send("second with id same")}]`,
      ),
    );
    expect(answer.status).toBe(400);
    const [refused] = frames(answer);
    expect(refused).toMatchObject({ id: null, error: { code: -32600 } });
    expect(refused!.error.message).toBe(
      'Invalid Request: id: must be unique within a batch; "same" repeats (nothing of this batch was run)',
    );
    await gw.gateway.flows.idle();
    expect(await transcript(ERIN)).not.toContain("with id same");
  });

  it("answers a batch that cancels one of its own requests, and ends the stream", async () => {
    // The SDK's transport waited for an answer to the cancelled request, which never came: the
    // POST stayed open, with keep-alive comments only, until the client gave up.
    const cancel = (requestId: number) =>
      JSON.stringify({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId } });
    const alone = `[${call(1, "agents_list", {})},${cancel(1)}]`;
    const first = await rawPost("a", alone, {}, { timeoutMs: 6_000 });
    expect(first).not.toBe("hung");
    expect(answered(first).status).toBeLessThan(300);
    const mixed = `[${call(1, "agents_list", {})},${call(2, "session_status", {})},${cancel(1)}]`;
    const second = answered(await rawPost("a", mixed, {}, { timeoutMs: 6_000 }));
    expect(frames(second).map((frame) => frame.id)).toEqual([2]);
  });

  it("refuses a POST past the token's in-flight budget with 429, and frees the budget as answers go out", async () => {
    // Like the WebSocket path's maxInFlight (256): each message of an open POST counts until its
    // response is written. Before session 21 POSTs were unbounded, and a token's clients that never
    // read their answers made the gateway hold gigabytes.
    const batch = (size: number) =>
      `[${Array.from({ length: size }, (_, i) => call(i + 1, "agents_list", {})).join(",")}]`;
    const refused = answered(await rawPost("a", batch(257)));
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body).error.message).toContain("gateway.limits.maxInFlight");
    const posts = await Promise.all([rawPost("a", batch(100)), rawPost("a", batch(100))]);
    for (const post of posts) expect(answered(post).status).toBe(200);
    expect(answered(await rawPost("a", batch(100))).status).toBe(200);
  });

  it("survives a body cut off mid-way and a flood of cancellations naming no call", async () => {
    const cut = await rawPost(
      "a",
      `${call(1, "agents_list", {}).slice(0, 30)}`,
      { "content-length": "5000" },
      {
        abortAfterMs: 200,
      },
    );
    expect(cut).toBe("aborted");
    const flood = JSON.stringify(
      Array.from({ length: 100 }, (_, i) => ({
        jsonrpc: "2.0",
        method: "notifications/cancelled",
        params: { requestId: `nope-${i}` },
      })),
    );
    for (let i = 0; i < 20; i++) expect(answered(await rawPost("a", flood)).status).toBe(202);
    const after = answered(await rawPost("a", call(2, "agents_list", {})));
    expect(frames(after)[0]!.result.structuredContent).toMatchObject({ status: "ok" });
  });
});

describe("hostile MCP client: faults", { timeout: 60_000 }, () => {
  it("counts a batch of sends against the session's per-minute send budget", async () => {
    const batch = Array.from({ length: 35 }, (_, i) =>
      JSON.parse(call(i, "sessions_send", { sessionKey: DAVE, message: `burst ${i}`, timeoutSeconds: 0 })),
    );
    const answer = answered(await rawPost("g", JSON.stringify(batch), {}, { timeoutMs: 20_000 }));
    const statuses = frames(answer).map((frame) => frame.result?.structuredContent?.status);
    expect(statuses).toHaveLength(35);
    expect(statuses.filter((status) => status === "accepted" || status === "ok").length).toBeLessThanOrEqual(
      30,
    );
    expect(statuses).toContain("forbidden");
    await gw.gateway.flows.idle();
  });

  it("a host that disconnects mid-send releases the wait and does not take in the late reply", async () => {
    const started = Date.now();
    const gone = await rawPost(
      "c",
      call(
        11,
        "sessions_send",
        { sessionKey: BOB, message: "slow ping c", timeoutSeconds: 20 },
        {
          progressToken: "p1",
        },
      ),
      {},
      { abortAfterMs: 300 },
    );
    expect(gone).toBe("aborted");
    let record: Loose | undefined;
    while (!record && Date.now() - started < 2_000) {
      await sleep(50);
      record = (await auditEntries()).find(
        (entry) =>
          entry.kind === "mcp.call" &&
          entry.actor === tokens.c.name &&
          entry.data.tool === "sessions_send" &&
          entry.data.status !== "ok",
      );
    }
    expect(record, "the abandoned call went on waiting").toBeDefined();
    await sleep(Math.max(0, started + 3_200 - Date.now()));
    expect(await transcript(tokens.c.session)).not.toContain("slow pong");
    // The gateway is still up.
    const after = answered(await rawPost("c", call(12, "agents_list", {})));
    expect(frames(after)[0]!.result.structuredContent).toMatchObject({ status: "ok" });
  });
});
