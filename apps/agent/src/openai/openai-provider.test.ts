import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { executeRun } from "../run/execute-run";
import { fakeRunContext, modelRequest, runPayload } from "../testing/run-fixtures";
import {
  DEFAULT_MAX_RESPONSE_BYTES,
  type OpenAIModelConfigInput,
  OpenAIModelProvider,
  type OpenAIProviderOptions,
  retryAfterMs,
} from "./openai-provider";
import {
  completion,
  finishDelta,
  type OpenAITestServer,
  type RecordedRequest,
  type Responder,
  sendJson,
  sendPieces,
  sendRaw,
  sendStream,
  startOpenAITestServer,
  textDelta,
  toolCallDelta,
} from "./openai-test-server";

let server: OpenAITestServer;
let delays: number[];

beforeEach(async () => {
  server = await startOpenAITestServer();
  delays = [];
});
afterEach(async () => {
  await server.close();
});

function provider(
  config: Partial<OpenAIModelConfigInput> = {},
  env: Record<string, string> = {},
  options: OpenAIProviderOptions = {},
) {
  return new OpenAIModelProvider(
    { provider: "openai", baseUrl: server.baseUrl, model: "test-model", ...config },
    {
      ...options,
      env,
      // Records the wait instead of sleeping it, so retry tests are fast and not timing-sensitive.
      sleep: async (ms) => {
        delays.push(ms);
      },
    },
  );
}

describe("openai provider: replies", () => {
  it("non-streamed: sends the chat, tools and key, and returns the reply with usage", async () => {
    server.enqueue(
      sendJson(200, completion({ content: "Hello there." }, { prompt_tokens: 12, completion_tokens: 3 })),
    );
    const model = provider(
      { stream: false, apiKeyEnv: "TEST_KEY", temperature: 0.2 },
      { TEST_KEY: "sk-test" },
    );
    const turn = await model.complete(modelRequest(runPayload("hi"), { system: "Be nice." }));

    expect(turn).toEqual({ text: "Hello there.", usage: { inputTokens: 12, outputTokens: 3 } });
    const request = server.requests[0]!;
    expect(request.path).toBe("/v1/chat/completions");
    expect(request.headers.authorization).toBe("Bearer sk-test");
    expect(request.body).toMatchObject({
      model: "test-model",
      stream: false,
      temperature: 0.2,
      messages: [
        { role: "system", content: "Be nice." },
        { role: "user", content: "hi" },
      ],
    });
    expect((request.body.tools as unknown[])[0]).toEqual({
      type: "function",
      function: {
        name: "sessions_send",
        description: "Send a message",
        parameters: { type: "object", properties: {} },
      },
    });
  });

  it("streamed: reports each text delta and assembles the reply and usage", async () => {
    server.enqueue(
      sendStream([
        textDelta("Hel"),
        textDelta("lo, "),
        textDelta("world", "stop"),
        { choices: [], usage: { prompt_tokens: 7, completion_tokens: 4 } },
      ]),
    );
    const deltas: string[] = [];
    const turn = await provider().complete(
      modelRequest(runPayload("hi"), { onTextDelta: (text) => deltas.push(text) }),
    );
    expect(deltas).toEqual(["Hel", "lo, ", "world"]);
    expect(turn).toEqual({ text: "Hello, world", usage: { inputTokens: 7, outputTokens: 4 } });
    expect(server.requests[0]?.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  it("uses the run's model override when the run names one", async () => {
    server.enqueue(sendJson(200, completion({ content: "ok" })));
    await provider({ stream: false }).complete(modelRequest(runPayload("hi", { model: "other-model" })));
    expect(server.requests[0]?.body.model).toBe("other-model");
  });
});

describe("openai provider: tool calls through executeRun", () => {
  it("streamed: assembles tool-call deltas by index, runs the tools and sends the results back", async () => {
    server.enqueue(
      sendStream([
        toolCallDelta(0, { id: "call_a", name: "sessions_send", arguments: "" }),
        toolCallDelta(0, { arguments: '{"sessionKey":"agent:b:main",' }),
        toolCallDelta(1, { id: "call_b", name: "sessions_list", arguments: '{"limit":' }),
        toolCallDelta(0, { arguments: '"message":"hi","timeoutSeconds":5}' }),
        toolCallDelta(1, { arguments: "3}" }),
        finishDelta("tool_calls"),
      ]),
      sendStream([textDelta("B says hi back."), finishDelta("stop")]),
    );
    const { ctx, calls, progress } = fakeRunContext({
      sessions_send: () => ({ status: "ok", reply: "hi back" }),
      sessions_list: () => ({ status: "ok", count: 1 }),
    });
    const result = await executeRun(runPayload("greet b"), provider(), ctx);

    expect(result.reply).toBe("B says hi back.");
    expect(calls).toEqual([
      { name: "sessions_send", args: { sessionKey: "agent:b:main", message: "hi", timeoutSeconds: 5 } },
      { name: "sessions_list", args: { limit: 3 } },
    ]);
    const followUp = server.requests[1]?.body.messages as Record<string, unknown>[];
    expect(followUp.slice(-3)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [
          {
            id: "call_a",
            type: "function",
            function: {
              name: "sessions_send",
              arguments: '{"sessionKey":"agent:b:main","message":"hi","timeoutSeconds":5}',
            },
          },
          { id: "call_b", type: "function", function: { name: "sessions_list", arguments: '{"limit":3}' } },
        ],
      },
      { role: "tool", tool_call_id: "call_a", content: '{"status":"ok","reply":"hi back"}' },
      { role: "tool", tool_call_id: "call_b", content: '{"status":"ok","count":1}' },
    ]);
    expect(progress.map((p) => p.kind)).toEqual([
      "tool-call",
      "tool-result",
      "tool-call",
      "tool-result",
      "text-delta",
    ]);
  });

  it("non-streamed: runs the tool call and replies from its result", async () => {
    server.enqueue(
      sendJson(
        200,
        completion({
          tool_calls: [
            {
              id: "call_1",
              type: "function",
              function: { name: "sessions_spawn", arguments: '{"task":"research"}' },
            },
          ],
        }),
      ),
      sendJson(200, completion({ content: "Spawned agent:main:subagent:1." })),
    );
    const { ctx, calls } = fakeRunContext({
      sessions_spawn: () => ({ status: "accepted", childSessionKey: "agent:main:subagent:1" }),
    });
    const result = await executeRun(runPayload("spawn"), provider({ stream: false }), ctx);
    expect(calls).toEqual([{ name: "sessions_spawn", args: { task: "research" } }]);
    expect(result.reply).toBe("Spawned agent:main:subagent:1.");
    const followUp = server.requests[1]!.body.messages as Record<string, unknown>[];
    expect(followUp.at(-1)).toEqual({
      role: "tool",
      tool_call_id: "call_1",
      content: '{"status":"accepted","childSessionKey":"agent:main:subagent:1"}',
    });
  });
});

describe("openai provider: failures", () => {
  it("retries a 429 after the server's retry-after, then succeeds", async () => {
    server.enqueue(
      sendJson(429, { error: { message: "slow down" } }, { "retry-after": "2" }),
      sendJson(200, completion({ content: "finally" })),
    );
    const turn = await provider({ stream: false }).complete(modelRequest(runPayload("hi")));
    expect(turn.text).toBe("finally");
    expect(delays).toEqual([2000]);
    expect(server.requests).toHaveLength(2);
  });

  it("a 500 that persists ends with an error naming the status, the server's message and the attempts", async () => {
    server.enqueue(
      sendJson(500, { error: { message: "boom" } }),
      sendJson(500, { error: { message: "boom" } }),
    );
    const call = provider({ stream: false }, {}, { maxRetries: 1 }).complete(modelRequest(runPayload("hi")));
    await expect(call).rejects.toThrow(
      `model call to ${server.baseUrl}/chat/completions failed: HTTP 500 Internal Server Error: boom (after 2 attempts)`,
    );
    expect(delays).toEqual([500]);
  });

  it("does not wait for a retry-after that would pass the run deadline", async () => {
    server.enqueue(sendJson(503, "overloaded", { "retry-after": "30" }));
    const run = runPayload("hi", { deadline: Date.now() + 5_000 });
    await expect(provider({ stream: false }).complete(modelRequest(run))).rejects.toThrow(
      /HTTP 503 Service Unavailable: overloaded \(gave up after 1 attempt: retrying after 30 s would pass the run deadline\)/,
    );
    expect(delays).toEqual([]);
  });

  it("a malformed body ends with an error saying what is wrong", async () => {
    server.enqueue(sendRaw(200, "<html>not json</html>"));
    await expect(provider({ stream: false }).complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "malformed response: the body is not JSON: <html>not json</html>",
    );
    server.enqueue(sendJson(200, { choices: [] }));
    await expect(provider({ stream: false }).complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "malformed response: choices:",
    );
    server.enqueue(sendStream([textDelta("a"), "{not json"]));
    await expect(provider().complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "malformed response: a stream event is not JSON: {not json",
    );
    server.enqueue(sendStream([textDelta("cut")], { done: false }));
    await expect(provider().complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "malformed response: the stream ended before the response was complete",
    );
  });

  it("an unauthorised request names the API key variable", async () => {
    server.enqueue(sendJson(401, { error: { message: "invalid api key" } }));
    await expect(
      provider({ stream: false, apiKeyEnv: "MY_KEY" }).complete(modelRequest(runPayload("hi"))),
    ).rejects.toThrow(
      "HTTP 401 Unauthorized: invalid api key (the API key comes from the environment variable MY_KEY, which is not set)",
    );
  });

  it("an unreachable server ends with a network error after the retries", async () => {
    const baseUrl = server.baseUrl;
    await server.close();
    const model = new OpenAIModelProvider(
      { provider: "openai", baseUrl, model: "m" },
      { maxRetries: 1, sleep: async (ms) => void delays.push(ms) },
    );
    await expect(model.complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      /failed: cannot reach the server: fetch failed \(.*ECONNREFUSED.*\) \(after 2 attempts\)/,
    );
  });

  it("a response slower than timeoutMs ends the call with a timeout, without retrying", async () => {
    server.enqueue(sendStream([textDelta("slow")], { hang: true }));
    await expect(provider({ timeoutMs: 50 }).complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "failed: no complete response within 50 ms (timeoutMs)",
    );
    expect(server.requests).toHaveLength(1);
  });

  it("a retry-after longer than the allowed wait ends the call at once", async () => {
    server.enqueue(sendJson(429, { error: { message: "quota" } }, { "retry-after": "3600" }));
    await expect(provider({ stream: false }).complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "HTTP 429 Too Many Requests: quota (gave up after 1 attempt: server asked to retry after 3600 s, more than the 30 s allowed)",
    );
    expect(delays).toEqual([]);
  });

  it("aborting mid-stream ends the run as aborted", async () => {
    server.enqueue(sendStream([textDelta("Thinking")], { hang: true }));
    const controller = new AbortController();
    const { ctx, progress } = fakeRunContext({}, controller.signal);
    const wrapped = {
      ...ctx,
      progress: (kind: "text-delta" | "tool-call" | "tool-result", data: Record<string, unknown>) => {
        ctx.progress(kind, data);
        controller.abort(new Error("worker shutting down"));
      },
    };
    await expect(executeRun(runPayload("hi"), provider(), wrapped)).rejects.toThrow(
      "run aborted: worker shutting down",
    );
    expect(progress).toEqual([{ kind: "text-delta", data: { text: "Thinking" } }]);
  });
});

describe("openai provider: hostile and odd responses", () => {
  const lastMessage = (request: RecordedRequest) =>
    (request.body.messages as { content: string }[]).at(-1)?.content;

  it("a many-MB line without a newline fails its run at the default limit while another run completes", async () => {
    const huge = DEFAULT_MAX_RESPONSE_BYTES + 4 * 1024 * 1024;
    const piece = "x".repeat(64 * 1024);
    const hostile = sendPieces([
      'data: {"choices":[{"index":0,"delta":{"content":"',
      ...Array.from({ length: huge / piece.length }, () => piece),
    ]);
    const normal = sendStream([textDelta("still "), textDelta("here", "stop")]);
    // The two requests race: each is answered by what its message asks for.
    const route: Responder = (res, request) =>
      (lastMessage(request) === "flood" ? hostile : normal)(res, request);
    server.enqueue(route, route);
    const model = provider();
    const deltas: string[] = [];
    const [flooded, calm] = await Promise.allSettled([
      model.complete(modelRequest(runPayload("flood"), { onTextDelta: (text) => deltas.push(text) })),
      model.complete(modelRequest(runPayload("calm"))),
    ]);
    expect(flooded.status).toBe("rejected");
    const error = (flooded as PromiseRejectedResult).reason;
    expect(error).toMatchObject({ code: "PAYLOAD_TOO_LARGE" });
    expect(error.message).toContain(
      `failed: the response exceeded 8 MiB (maxResponseBytes ${DEFAULT_MAX_RESPONSE_BYTES}); the rest was not read`,
    );
    expect(deltas).toEqual([]);
    expect(calm).toEqual({ status: "fulfilled", value: { text: "still here" } });
  });

  it("a configured maxResponseBytes bounds streamed and plain bodies alike", async () => {
    const many = Array.from({ length: 200 }, () => textDelta("a"));
    server.enqueue(sendStream([...many, finishDelta("stop")]));
    await expect(
      provider({ maxResponseBytes: 4096 }).complete(modelRequest(runPayload("hi"))),
    ).rejects.toThrow("the response exceeded 4 KiB (maxResponseBytes 4096)");

    server.enqueue(sendJson(200, completion({ content: "b".repeat(5000) })));
    await expect(
      provider({ stream: false, maxResponseBytes: 4096 }).complete(modelRequest(runPayload("hi"))),
    ).rejects.toThrow("the response exceeded 4 KiB (maxResponseBytes 4096)");
    expect(server.requests).toHaveLength(2); // not retried
  });

  it("a run's streamed text is bounded across tool rounds, and nothing past the limit is reported", async () => {
    server.enqueue(
      sendStream([
        textDelta("a".repeat(1500)),
        toolCallDelta(0, { id: "call_1", name: "sessions_list", arguments: "{}" }),
        finishDelta("tool_calls"),
      ]),
      sendStream([textDelta("b".repeat(1500), "stop")]),
    );
    const { ctx, progress } = fakeRunContext({ sessions_list: () => ({ status: "ok" }) });
    await expect(executeRun(runPayload("hi"), provider({ maxResponseBytes: 2048 }), ctx)).rejects.toThrow(
      "run stopped: the model's reply text exceeded 2048 characters (maxResponseBytes)",
    );
    const reported = progress.filter((p) => p.kind === "text-delta").map((p) => p.data.text as string);
    expect(reported.join("")).toBe("a".repeat(1500));
  });

  it("ignores an empty data: event", async () => {
    server.enqueue(sendStream([textDelta("a"), "", textDelta("b", "stop")]));
    expect(await provider().complete(modelRequest(runPayload("hi")))).toEqual({ text: "ab" });
  });

  it("a stream whose chunks never carry a choice is an error, as it is unstreamed", async () => {
    server.enqueue(
      sendStream([{ choices: [] }, { choices: [], usage: { prompt_tokens: 1, completion_tokens: 0 } }]),
    );
    await expect(provider().complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "malformed response: no stream event carried a choice (every chunk had `choices: []`)",
    );
  });

  it("a 200 that is neither an event stream nor JSON says what came back", async () => {
    const page = `<html><head><title>Sign in</title></head><body>${"Please log in. ".repeat(40)}</body></html>`;
    server.enqueue(sendRaw(200, page, "text/html; charset=utf-8"));
    const error = await provider()
      .complete(modelRequest(runPayload("hi")))
      .catch((e: Error) => e);
    expect((error as Error).message).toContain(
      "malformed response: expected text/event-stream, got text/html: <html><head><title>Sign in</title>",
    );
    expect((error as Error).message).toMatch(/Please log in\. Ple…$/); // the first 200 characters
    expect((error as Error).message.length).toBeLessThan(400);

    server.enqueue(sendRaw(200, "<html>login</html>", "text/html"));
    await expect(provider({ stream: false }).complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "malformed response: the body (text/html) is not JSON: <html>login</html>",
    );
  });

  it("an event stream without any event quotes how the body began", async () => {
    server.enqueue(sendRaw(200, "upstream connect error", "text/event-stream"));
    await expect(provider().complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "the stream ended before the response was complete; no event came, the body began: upstream connect error",
    );
  });

  it("refuses a tool-call index far beyond any real response", async () => {
    server.enqueue(sendStream([toolCallDelta(1_000_000_000, { id: "c", name: "x" }), finishDelta("stop")]));
    await expect(provider().complete(modelRequest(runPayload("hi")))).rejects.toThrow(
      "malformed response: tool call index 1000000000: one response may make at most 128 calls",
    );
  });
});

describe("retryAfterMs", () => {
  it("reads retry-after-ms, seconds and HTTP dates", () => {
    const now = Date.parse("2025-01-01T00:00:00Z");
    expect(retryAfterMs(new Headers({ "retry-after-ms": "250" }), now)).toBe(250);
    expect(retryAfterMs(new Headers({ "retry-after": "1.5" }), now)).toBe(1500);
    expect(retryAfterMs(new Headers({ "retry-after": "Wed, 01 Jan 2025 00:00:10 GMT" }), now)).toBe(10_000);
    expect(retryAfterMs(new Headers(), now)).toBeUndefined();
  });
});
