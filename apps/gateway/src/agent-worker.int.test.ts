import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { type RunningAgentWorker, startAgentWorker } from "@switchboard/agent";
import { connect, type SwitchboardClient } from "@switchboard/client";
import { type ConfigInput, parseConfig, type ScriptedRuleInput } from "@switchboard/core";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway, testStoreKind } from "./testing/test-gateway";
import { until } from "./testing/until";

const STORE = testStoreKind();
const WORKER_TOKEN = "agent-worker-token-0123456789";

/** A Chat Completions endpoint on 127.0.0.1 answering each request with the next queued reply. */
interface FakeModelServer {
  baseUrl: string;
  requests: Array<{
    path: string;
    body: { messages: Array<Record<string, unknown>>; tools?: Array<{ function: { name: string } }> };
  }>;
  enqueue(...replies: Array<(body: FakeModelServer["requests"][number]["body"]) => unknown>): void;
  close(): Promise<void>;
}

async function startFakeModelServer(): Promise<FakeModelServer> {
  const queue: Array<(body: FakeModelServer["requests"][number]["body"]) => unknown> = [];
  const requests: FakeModelServer["requests"] = [];
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    requests.push({ path: req.url ?? "", body });
    const next = queue.shift();
    res.writeHead(next ? 200 : 500, { "content-type": "application/json" });
    res.end(JSON.stringify(next ? next(body) : { error: { message: "no reply queued" } }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    enqueue: (...replies) => queue.push(...replies),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function completion(message: { content?: string | null; tool_calls?: unknown[] }) {
  return {
    id: "chatcmpl-fake",
    object: "chat.completion",
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: null, ...message },
        finish_reason: message.tool_calls ? "tool_calls" : "stop",
      },
    ],
    usage: { prompt_tokens: 10, completion_tokens: 5 },
  };
}

const MAIN_RULES: ScriptedRuleInput[] = [
  { when: "^ping$", reply: "pong" },
  { when: "^slow$", delayMs: 60_000, reply: "too late" },
  { when: "^brief$", delayMs: 300, reply: "done briefly" },
  {
    when: "^delegate (.+)$",
    call: { tool: "sessions_spawn", args: { task: "research $1" } },
    reply: "spawned {{result.childSessionKey}} as run {{result.runId}}: {{result.status}}",
  },
  { when: "^research (.+)$", reply: "findings about $1" },
  { provenance: "subagent", context: "Sub-agent announce step", reply: "relayed: {{message}}" },
  { reply: "echo: {{message}}" },
];

function gatewayConfig(modelBaseUrl: string): ConfigInput {
  return {
    auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent", agents: ["main", "research"] }] },
    agents: {
      list: [
        { id: "main", default: true, model: { provider: "scripted", rules: MAIN_RULES } },
        {
          id: "research",
          model: { provider: "openai", baseUrl: modelBaseUrl, model: "fake-model", stream: false },
        },
      ],
    },
  };
}

let gw: TestGateway;
let model: FakeModelServer;
let op: SwitchboardClient;
let config: ReturnType<typeof parseConfig>;
const workers: RunningAgentWorker[] = [];

beforeEach(async () => {
  model = await startFakeModelServer();
  const input = gatewayConfig(model.baseUrl);
  config = parseConfig(input);
  gw = await startTestGateway(input, { store: STORE });
  op = await connect({ url: gw.url, token: gw.token, role: "operator", reconnect: { enabled: false } });
});

afterEach(async () => {
  await gw.gateway.flows.idle();
  await Promise.all(workers.splice(0).map((worker) => worker.stop()));
  await op.close();
  await gw.close();
  await model.close();
});

async function startWorker(
  options: Partial<Parameters<typeof startAgentWorker>[0]> = {},
): Promise<RunningAgentWorker> {
  const worker = await startAgentWorker({
    url: gw.url,
    token: WORKER_TOKEN,
    config,
    stopGraceMs: 5_000,
    ...options,
  });
  workers.push(worker);
  return worker;
}

type HistoryMessage = { role: string; content: Array<{ type: string; text?: string; name?: string }> };

async function history(sessionKey: string): Promise<HistoryMessage[]> {
  const result = await op.sessions.history({ sessionKey, includeTools: true });
  return (result as unknown as { messages: HistoryMessage[] }).messages;
}

describe("startAgentWorker against the real gateway", () => {
  it("serves every configured agent and answers ping with pong through chat.send + agent.wait", async () => {
    const worker = await startWorker();
    expect(worker.agents).toEqual(["main", "research"]);
    const listed = await op.agents.list();
    expect(
      listed.agents
        .filter((agent) => agent.connected)
        .map((agent) => agent.id)
        .sort(),
    ).toEqual(["main", "research"]);

    const deltas: Array<{ runId: string; text?: string }> = [];
    op.on("run.progress", (event) => void deltas.push(event.payload));
    await op.subscribe({ sessionKey: "agent:main:main" });

    const { runId } = await op.chat.send({ sessionKey: "main", message: "ping" });
    const result = await op.agent.wait({ runId, timeoutMs: 5_000 });
    expect(result).toMatchObject({ runId, status: "ok", reply: "pong" });
    await until(
      () => deltas.find((delta) => delta.runId === runId && delta.text === "pong"),
      "the streamed reply",
    );
    const messages = await history("agent:main:main");
    expect(messages.map((message) => [message.role, message.content[0]?.text])).toEqual([
      ["user", "ping"],
      ["assistant", "pong"],
    ]);
  });

  it("spawns a sub-agent through sessions_spawn, replies from the template, and relays the child's announce", async () => {
    await startWorker({ agents: ["main"] });
    const ended: Array<{ sessionKey: string; reply?: string }> = [];
    op.on("run.ended", (event) => void ended.push(event.payload));
    await op.subscribe({});

    const { runId } = await op.chat.send({ sessionKey: "main", message: "delegate tides" });
    const result = await op.agent.wait({ runId, timeoutMs: 5_000 });
    expect(result.status).toBe("ok");
    const match = /^spawned (agent:main:subagent:\S+) as run (\S+): accepted$/.exec(result.reply ?? "");
    expect(match, `reply was ${JSON.stringify(result.reply)}`).not.toBeNull();
    const [, childKey, childRunId] = match!;

    const child = await op.agent.wait({ runId: childRunId!, timeoutMs: 5_000 });
    expect(child).toMatchObject({ status: "ok", reply: "findings about tides" });
    const announce = await until(
      () =>
        ended.find((event) => event.sessionKey === "agent:main:main" && event.reply?.startsWith("relayed:")),
      "the announce run on the requester",
    );
    expect(announce.reply).toContain(`Sub-agent ${childKey} completed successfully.`);
    expect(announce.reply).toContain("findings about tides");
  });

  it("runs an openai-compatible model end to end: tool call → tools.invoke → reply", async () => {
    const worker = await startWorker({ agents: ["research"] });
    expect(worker.agents).toEqual(["research"]);
    model.enqueue(
      () =>
        completion({
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "session_status", arguments: "{}" } },
          ],
        }),
      (body) => {
        const toolMessage = body.messages.find((message) => message.role === "tool");
        const status = JSON.parse(String(toolMessage?.content)) as { sessionKey?: string; agentId?: string };
        return completion({ content: `I am ${status.agentId} in ${status.sessionKey}` });
      },
    );

    const { runId } = await op.chat.send({ sessionKey: "agent:research:main", message: "where are you?" });
    const result = await op.agent.wait({ runId, timeoutMs: 5_000 });
    expect(result).toMatchObject({ status: "ok", reply: "I am research in main" });

    expect(model.requests).toHaveLength(2);
    expect(model.requests[0]!.path).toBe("/v1/chat/completions");
    expect(model.requests[0]!.body.tools?.map((tool) => tool.function.name)).toContain("session_status");
    expect(model.requests[0]!.body.messages.at(-1)).toMatchObject({
      role: "user",
      content: "where are you?",
    });

    const messages = await history("agent:research:main");
    expect(messages.at(-1)).toMatchObject({
      role: "assistant",
      content: [{ text: "I am research in main" }],
    });
  });

  it("records each tool call of a run once in the transcript, under the model's call id", async () => {
    // tools.invoke records the call; run.progress tool entries are only for tools a worker runs itself.
    await startWorker({ agents: ["research"] });
    model.enqueue(
      () =>
        completion({
          tool_calls: [
            { id: "call_7", type: "function", function: { name: "session_status", arguments: "{}" } },
          ],
        }),
      () => completion({ content: "checked" }),
    );
    const { runId } = await op.chat.send({ sessionKey: "agent:research:main", message: "check yourself" });
    expect(await op.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "checked",
    });

    const messages = await history("agent:research:main");
    expect(messages.map((message) => message.role)).toEqual(["user", "toolCall", "toolResult", "assistant"]);
    expect(messages[1]!.content[0]).toMatchObject({ type: "toolCall", id: "call_7", name: "session_status" });
  });

  it("ends a run past its deadline with a timeout, and keeps serving", async () => {
    const worker = await startWorker({ agents: ["main"] });
    const { runId } = await op.agent.run({ sessionKey: "main", message: "slow", timeoutSeconds: 0.3 });
    const result = await op.agent.wait({ runId, timeoutMs: 5_000 });
    expect(["timeout", "error"]).toContain(result.status);
    expect(result.error).toMatch(/timed out|deadline exceeded/);
    // The model call was aborted, not left running until its 60 s delay.
    await until(() => worker.activeRuns === 0, "the worker to drop the late run");

    const { runId: next } = await op.chat.send({ sessionKey: "main", message: "ping" });
    expect(await op.agent.wait({ runId: next, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "pong",
    });
  });

  it("stop() lets a current run finish, then disconnects", async () => {
    const worker = await startWorker({ agents: ["main"] });
    const { runId } = await op.chat.send({ sessionKey: "main", message: "brief" });
    await until(() => worker.activeRuns === 1, "the run to start");
    await worker.stop();
    expect(worker.client.state).toBe("closed");
    expect(await op.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "done briefly",
    });
    const listed = await op.agents.list();
    expect(listed.agents.find((agent) => agent.id === "main")?.connected).toBe(false);
  });

  it("stop() fails a run that does not finish within the grace period", async () => {
    const worker = await startWorker({ agents: ["main"], stopGraceMs: 50 });
    const { runId } = await op.chat.send({ sessionKey: "main", message: "slow" });
    await until(() => worker.activeRuns === 1, "the run to start");
    await worker.stop();
    expect(await op.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({
      status: "error",
      error: "run aborted: the agent worker is stopping",
    });
  });

  it("refuses to start for an agent that is not configured, or with a bad model config, before connecting", async () => {
    await expect(startWorker({ agents: ["nobody"] })).rejects.toThrow(
      /agents: "nobody" is not configured \(configured: main, research\)/,
    );
    const broken = parseConfig({
      agents: { list: [{ id: "main", model: { provider: "scripted", rules: [{ reply: "{{nope}}" }] } }] },
    });
    await expect(startWorker({ config: broken })).rejects.toThrow(
      /agents\.list\[0\]\.model\.rules.*rules\[0\]\.reply/s,
    );
    const listed = await op.agents.list();
    expect(listed.agents.every((agent) => !agent.connected)).toBe(true);
  });
});
