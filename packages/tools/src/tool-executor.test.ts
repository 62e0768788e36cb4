import { HISTORY_MAX_BYTES, recordingLogger, SwitchboardError, type ToolCaller } from "@switchboard/core";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { message, recordingBackend, row } from "./testing/recording-backend";
import { createToolExecutor } from "./tool-executor";

const caller: ToolCaller = { sessionKey: "agent:main:main", agentId: "main", runId: "run-caller" };

async function call(name: string, args: unknown, backend = recordingBackend()) {
  const result = await createToolExecutor(backend).invoke(name, args, caller);
  return { result, backend, request: backend.calls[0]?.request as Record<string, unknown> | undefined };
}

describe("sessions_list", () => {
  it("defaults limit 50 and messageLimit 0 with no filters", async () => {
    const { request } = await call("sessions_list", {});
    expect(request).toEqual({ kinds: undefined, limit: 50, activeMinutes: undefined, messageLimit: 0 });
  });

  it.each([
    [0, 1],
    [-7, 1],
    [201, 200],
    [10_000, 200],
    [12.9, 12],
  ])("clamps limit %s to %s", async (limit, expected) => {
    const { request } = await call("sessions_list", { limit });
    expect(request?.limit).toBe(expected);
  });

  it.each([
    [-1, 0],
    [21, 20],
    [3.5, 3],
  ])("clamps messageLimit %s to %s", async (messageLimit, expected) => {
    const { request } = await call("sessions_list", { messageLimit });
    expect(request?.messageLimit).toBe(expected);
  });

  it("keeps only valid kinds, case-insensitively, ignoring non-strings", async () => {
    const { request } = await call("sessions_list", { kinds: ["Main", "bogus", 3, "subagent", "main"] });
    expect(request?.kinds).toEqual(["main", "subagent"]);
  });

  it("applies no kind filter when no entry is valid", async () => {
    const { request } = await call("sessions_list", { kinds: ["nope", 1] });
    expect(request?.kinds).toBeUndefined();
  });

  it("passes a positive activeMinutes and drops zero or negative ones", async () => {
    expect((await call("sessions_list", { activeMinutes: 15 })).request?.activeMinutes).toBe(15);
    expect((await call("sessions_list", { activeMinutes: 0 })).request?.activeMinutes).toBeUndefined();
    expect((await call("sessions_list", { activeMinutes: -5 })).request?.activeMinutes).toBeUndefined();
  });

  it("returns rows newest first with count and hidden", async () => {
    const backend = recordingBackend({
      listSessions: async () => ({ sessions: [row("a", 1), row("b", 3), row("c", 2)], hidden: 4 }),
    });
    const { result } = await call("sessions_list", {}, backend);
    expect(result.status).toBe("ok");
    expect(result.count).toBe(3);
    expect(result.hidden).toBe(4);
    expect((result.sessions as { key: string }[]).map((s) => s.key)).toEqual(["b", "c", "a"]);
  });

  it("never returns more rows than the limit, nor tool results or extra messages in rows", async () => {
    const messages = [message(1, "user", "q"), message(2, "toolResult", "raw"), message(3, "assistant", "a")];
    const backend = recordingBackend({
      listSessions: async () => ({
        sessions: [row("a", 1, { messages }), row("b", 2, { messages })],
        hidden: 0,
      }),
    });
    const { result } = await call("sessions_list", { limit: 1, messageLimit: 1 }, backend);
    expect(result.count).toBe(1);
    const sessions = result.sessions as { key: string; messages: { role: string }[] }[];
    expect(sessions[0]?.key).toBe("b");
    expect(sessions[0]?.messages.map((m) => m.role)).toEqual(["assistant"]);
  });

  it("omits row messages when messageLimit is 0", async () => {
    const backend = recordingBackend({
      listSessions: async () => ({
        sessions: [row("a", 1, { messages: [message(1, "user", "q")] })],
        hidden: 0,
      }),
    });
    const { result } = await call("sessions_list", {}, backend);
    expect((result.sessions as Record<string, unknown>[])[0]).not.toHaveProperty("messages");
  });
});

describe("sessions_history", () => {
  it("requires sessionKey", async () => {
    const { result, backend } = await call("sessions_history", {});
    expect(result).toEqual({ status: "error", error: "sessionKey: is required" });
    expect(backend.calls).toHaveLength(0);
  });

  it("defaults limit 50, includeTools false, no cursor, 64 KiB cap", async () => {
    const { request } = await call("sessions_history", { sessionKey: " agent:main:main " });
    expect(request).toEqual({
      sessionKey: "agent:main:main",
      limit: 50,
      includeTools: false,
      before: undefined,
      maxBytes: 65536,
    });
    expect(HISTORY_MAX_BYTES).toBe(65536);
  });

  it.each([
    [0, 1],
    [501, 500],
    [99.9, 99],
  ])("clamps limit %s to %s", async (limit, expected) => {
    const { request } = await call("sessions_history", { sessionKey: "main", limit });
    expect(request?.limit).toBe(expected);
  });

  it("floors before and refuses a cursor below 1", async () => {
    expect((await call("sessions_history", { sessionKey: "main", before: 10.7 })).request?.before).toBe(10);
    const { result, backend } = await call("sessions_history", { sessionKey: "main", before: 0 });
    expect(result.status).toBe("error");
    expect(result.error).toMatch(/^before: must be a positive integer/);
    expect(backend.calls).toHaveLength(0);
  });

  it("removes tool results unless includeTools is true", async () => {
    const messages = [message(1, "user", "q"), message(2, "toolResult", "raw"), message(3, "assistant", "a")];
    const backend = () =>
      recordingBackend({
        history: async (_c, q) => ({
          status: "ok",
          sessionKey: q.sessionKey,
          sessionId: "s",
          messages,
          truncated: false,
        }),
      });
    const without = await call("sessions_history", { sessionKey: "main" }, backend());
    expect((without.result.messages as { seq: number }[]).map((m) => m.seq)).toEqual([1, 3]);
    const withTools = await call("sessions_history", { sessionKey: "main", includeTools: true }, backend());
    expect(withTools.request?.includeTools).toBe(true);
    expect((withTools.result.messages as { seq: number }[]).map((m) => m.seq)).toEqual([1, 2, 3]);
  });

  it("caps an oversized backend page and says so", async () => {
    const big = "x".repeat(10_000);
    const messages = Array.from({ length: 10 }, (_, i) => message(i + 1, "user", big));
    const backend = recordingBackend({
      history: async (_c, q) => ({
        status: "ok",
        sessionKey: q.sessionKey,
        sessionId: "s",
        messages,
        truncated: false,
      }),
    });
    const { result } = await call("sessions_history", { sessionKey: "main" }, backend);
    expect(new TextEncoder().encode(JSON.stringify(result)).length).toBeLessThanOrEqual(HISTORY_MAX_BYTES);
    expect(result.truncated).toBe(true);
    const seqs = (result.messages as { seq: number }[]).map((m) => m.seq);
    expect(seqs.at(-1)).toBe(10);
    expect(result.nextBefore).toBe(seqs[0]);
  });

  it("passes a not_found result through", async () => {
    const backend = recordingBackend({
      history: async () => ({ status: "not_found", error: "session not found: x" }),
    });
    expect((await call("sessions_history", { sessionKey: "x" }, backend)).result).toEqual({
      status: "not_found",
      error: "session not found: x",
    });
  });
});

describe("sessions_send", () => {
  it("defaults timeoutSeconds to 30", async () => {
    const { request } = await call("sessions_send", { sessionKey: "agent:main:other", message: "hi" });
    expect(request).toEqual({ sessionKey: "agent:main:other", message: "hi", timeoutSeconds: 30 });
  });

  it.each([
    [-3, 0],
    [0, 0],
    [601, 600],
    [4.9, 5],
    [0.2, 1],
  ])("clamps timeoutSeconds %s to %s", async (timeoutSeconds, expected) => {
    const { request } = await call("sessions_send", { sessionKey: "k", message: "hi", timeoutSeconds });
    expect(request?.timeoutSeconds).toBe(expected);
  });

  it("refuses an empty or blank message without calling the backend", async () => {
    for (const text of ["", "   \n"]) {
      const { result, backend } = await call("sessions_send", { sessionKey: "k", message: text });
      expect(result).toEqual({ status: "error", error: "message: must not be empty" });
      expect(backend.calls).toHaveLength(0);
    }
  });

  it("requires sessionKey and message", async () => {
    expect((await call("sessions_send", { message: "hi" })).result.error).toBe("sessionKey: is required");
    expect((await call("sessions_send", { sessionKey: "k" })).result.error).toBe("message: is required");
  });

  it("returns the backend's timeout result with its delivery status", async () => {
    const backend = recordingBackend({
      send: async (_c, r) => ({
        status: "timeout",
        runId: "run-9",
        sessionKey: r.sessionKey,
        error: "no reply within 5s",
        delivery: { status: "delivered" },
      }),
    });
    const { result } = await call(
      "sessions_send",
      { sessionKey: "k", message: "hi", timeoutSeconds: 5 },
      backend,
    );
    expect(result).toMatchObject({ status: "timeout", runId: "run-9", delivery: { status: "delivered" } });
  });
});

describe("sessions_spawn", () => {
  it("defaults runTimeoutSeconds 0 and cleanup keep, leaving optional fields out", async () => {
    const { request, result } = await call("sessions_spawn", { task: "research X" });
    expect(request).toEqual({
      task: "research X",
      label: undefined,
      agentId: undefined,
      model: undefined,
      runTimeoutSeconds: 0,
      cleanup: "keep",
    });
    expect(result).toMatchObject({ status: "accepted", childSessionKey: "agent:main:subagent:0000" });
  });

  it("passes label, agentId, model, a floored timeout and cleanup delete", async () => {
    const { request } = await call("sessions_spawn", {
      task: "t",
      label: " scout ",
      agentId: "research",
      model: "gpt-x",
      runTimeoutSeconds: 90.5,
      cleanup: "DELETE",
    });
    expect(request).toMatchObject({
      label: "scout",
      agentId: "research",
      model: "gpt-x",
      runTimeoutSeconds: 91,
      cleanup: "delete",
    });
  });

  it("clamps a negative runTimeoutSeconds to 0", async () => {
    expect(
      (await call("sessions_spawn", { task: "t", runTimeoutSeconds: -10 })).request?.runTimeoutSeconds,
    ).toBe(0);
  });

  it("requires a non-empty task", async () => {
    expect((await call("sessions_spawn", {})).result.error).toBe("task: is required");
    expect((await call("sessions_spawn", { task: "  " })).result.error).toBe("task: must not be empty");
  });

  it("accepts a 64-character label and refuses a 65-character one naming label", async () => {
    expect((await call("sessions_spawn", { task: "t", label: "a".repeat(64) })).result.status).toBe(
      "accepted",
    );
    const { result, backend } = await call("sessions_spawn", { task: "t", label: "a".repeat(65) });
    expect(result).toEqual({ status: "error", error: "label: must be at most 64 characters, got 65" });
    expect(backend.calls).toHaveLength(0);
  });

  it("refuses an unknown cleanup value naming cleanup", async () => {
    const { result } = await call("sessions_spawn", { task: "t", cleanup: "archive" });
    expect(result).toEqual({
      status: "error",
      error: 'cleanup: expected one of "delete", "keep", got "archive"',
    });
  });

  it("passes the invalid-model warning through", async () => {
    const backend = recordingBackend({
      spawn: async () => ({
        status: "accepted",
        runId: "r",
        childSessionKey: "agent:main:subagent:1",
        modelApplied: false,
        warning: "unknown model nope",
      }),
    });
    const { result } = await call("sessions_spawn", { task: "t", model: "nope" }, backend);
    expect(result).toMatchObject({ status: "accepted", modelApplied: false, warning: "unknown model nope" });
  });
});

describe("session_status, agents_list, message, simulate_tool_call, summarize", () => {
  it("session_status defaults to the caller's own session", async () => {
    const { request, result } = await call("session_status", {});
    expect(request).toEqual({ sessionKey: undefined });
    expect(result.sessionKey).toBe("agent:main:main");
    expect((await call("session_status", { sessionKey: "agent:main:x" })).request).toEqual({
      sessionKey: "agent:main:x",
    });
  });

  it("agents_list takes no parameters and accepts missing arguments", async () => {
    const { result, backend } = await call("agents_list", undefined);
    expect(result).toMatchObject({ status: "ok", agents: [{ id: "main" }] });
    expect(backend.calls.map((c) => c.method)).toEqual(["agents"]);
  });

  it("message requires channel, to and non-empty text", async () => {
    const { request, result } = await call("message", { channel: "telegram", to: "42", text: "hello" });
    expect(request).toEqual({ channel: "telegram", to: "42", text: "hello" });
    expect(result).toEqual({ status: "ok", deliveryId: "delivery-1" });
    expect((await call("message", { to: "42", text: "x" })).result.error).toBe("channel: is required");
    expect((await call("message", { channel: "telegram", text: "x" })).result.error).toBe("to: is required");
    expect((await call("message", { channel: "telegram", to: "42", text: "" })).result.error).toBe(
      "text: must not be empty",
    );
  });

  it("simulate_tool_call defaults args to {} and maps tool_name to toolName", async () => {
    expect((await call("simulate_tool_call", { tool_name: "web_fetch" })).request).toEqual({
      toolName: "web_fetch",
      args: {},
    });
    const args = { url: "https://example.com", nested: { a: [1] } };
    expect((await call("simulate_tool_call", { tool_name: "web_fetch", args })).request).toEqual({
      toolName: "web_fetch",
      args,
    });
  });

  it.each([
    [[1, 2], "array"],
    ["{}", "string"],
    [5, "number"],
    [true, "boolean"],
  ])("simulate_tool_call refuses args %j naming args", async (args, got) => {
    const { result, backend } = await call("simulate_tool_call", { tool_name: "x", args });
    expect(result).toEqual({ status: "error", error: `args: expected object, got ${got}` });
    expect(backend.calls).toHaveLength(0);
  });

  it("simulate_tool_call requires a non-empty tool_name", async () => {
    expect((await call("simulate_tool_call", {})).result.error).toBe("tool_name: is required");
    expect((await call("simulate_tool_call", { tool_name: " " })).result.error).toBe(
      "tool_name: must not be empty",
    );
  });

  it("summarize defaults scope to session, accepts topic and refuses others naming scope", async () => {
    expect((await call("summarize", {})).request).toEqual({ scope: "session", sessionKey: undefined });
    expect((await call("summarize", { scope: "topic", sessionKey: "k" })).request).toEqual({
      scope: "topic",
      sessionKey: "k",
    });
    expect((await call("summarize", { scope: "week" })).result).toEqual({
      status: "error",
      error: 'scope: expected one of "session", "topic", got "week"',
    });
  });
});

describe("argument checking", () => {
  it.each([
    ["sessions_list", { limit: "10" }, "limit: expected number, got string"],
    ["sessions_list", { limit: Number.NaN }, "limit: expected number, got NaN"],
    [
      "sessions_list",
      { messageLimit: Number.POSITIVE_INFINITY },
      "messageLimit: expected number, got Infinity",
    ],
    ["sessions_list", { activeMinutes: true }, "activeMinutes: expected number, got boolean"],
    ["sessions_list", { kinds: "main" }, "kinds: expected array, got string"],
    ["sessions_history", { sessionKey: 42 }, "sessionKey: expected string, got number"],
    [
      "sessions_history",
      { sessionKey: "k", includeTools: "yes" },
      "includeTools: expected boolean, got string",
    ],
    ["sessions_history", { sessionKey: "k", before: "5" }, "before: expected number, got string"],
    ["sessions_send", { sessionKey: "k", message: ["hi"] }, "message: expected string, got array"],
    [
      "sessions_send",
      { sessionKey: "k", message: "hi", timeoutSeconds: "30" },
      "timeoutSeconds: expected number, got string",
    ],
    ["sessions_spawn", { task: "t", label: 5 }, "label: expected string, got number"],
    [
      "sessions_spawn",
      { task: "t", runTimeoutSeconds: {} },
      "runTimeoutSeconds: expected number, got object",
    ],
    ["sessions_spawn", { task: "t", cleanup: false }, "cleanup: expected string, got boolean"],
    ["session_status", { sessionKey: 1 }, "sessionKey: expected string, got number"],
    ["message", { channel: "c", to: 42, text: "x" }, "to: expected string, got number"],
    ["simulate_tool_call", { tool_name: 7 }, "tool_name: expected string, got number"],
    ["summarize", { scope: 1 }, "scope: expected string, got number"],
  ])("%s %j → %s", async (name, args, error) => {
    const { result, backend } = await call(name, args);
    expect(result).toEqual({ status: "error", error });
    expect(backend.calls).toHaveLength(0);
  });

  it("names every bad parameter at once", async () => {
    const { result } = await call("sessions_send", { sessionKey: 1, message: 2 });
    expect(result.error).toBe(
      "sessionKey: expected string, got number; message: expected string, got number",
    );
  });

  it("refuses arguments that are not an object", async () => {
    for (const [args, got] of [
      [[], "array"],
      ["{}", "string"],
      [3, "number"],
    ] as const) {
      const { result, backend } = await call("sessions_list", args);
      expect(result).toEqual({ status: "error", error: `arguments: expected object, got ${got}` });
      expect(backend.calls).toHaveLength(0);
    }
  });

  it("ignores unknown parameters and treats null as not given", async () => {
    const { request, result } = await call("sessions_send", {
      sessionKey: "k",
      message: "hi",
      timeoutSeconds: null,
      priority: "high",
      extra: { deep: true },
    });
    expect(result.status).toBe("accepted");
    expect(request).toEqual({ sessionKey: "k", message: "hi", timeoutSeconds: 30 });
  });

  it("reads no parameter from an own __proto__ key (a policy rule, looking at own keys, never saw it)", async () => {
    const args = JSON.parse('{"message":"hi","__proto__":{"sessionKey":"agent:other:main"}}');
    const { result, backend } = await call("sessions_send", args);
    expect(result).toEqual({ status: "error", error: "sessionKey: is required" });
    expect(backend.calls).toHaveLength(0);
  });

  it("returns unknown tool for a name outside the nine", async () => {
    for (const name of ["web_fetch", "", "SESSIONS_LIST", "__proto__"]) {
      const { result, backend } = await call(name, {});
      expect(result).toEqual({ status: "error", error: `unknown tool: ${name}` });
      expect(backend.calls).toHaveLength(0);
    }
  });

  it("clamps any finite limit into range as an integer (property)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.double({ noNaN: true, noDefaultInfinity: true }), async (limit) => {
        const { request } = await call("sessions_history", { sessionKey: "k", limit });
        const sent = request?.limit as number;
        expect(Number.isInteger(sent)).toBe(true);
        expect(sent).toBeGreaterThanOrEqual(1);
        expect(sent).toBeLessThanOrEqual(500);
      }),
      { numRuns: 200 },
    );
  });
});

describe("caller identity", () => {
  it("hands the run's caller to the backend untouched, whatever the arguments say", async () => {
    const backend = recordingBackend();
    const executor = createToolExecutor(backend);
    await executor.invoke(
      "session_status",
      { caller: { sessionKey: "agent:evil:main", agentId: "evil" }, as: "agent:evil:main", agentId: "evil" },
      caller,
    );
    await executor.invoke(
      "sessions_send",
      { sessionKey: "agent:main:x", message: "hi", caller: "agent:evil:main" },
      caller,
    );
    await executor.invoke("agents_list", { sessionKey: "agent:evil:main", as: "agent:evil:main" }, caller);
    expect(backend.calls).toHaveLength(3);
    for (const recorded of backend.calls) {
      expect(recorded.caller).toBe(caller);
      expect(recorded.caller).toEqual({
        sessionKey: "agent:main:main",
        agentId: "main",
        runId: "run-caller",
      });
      expect(JSON.stringify(recorded.request ?? {})).not.toContain("evil");
    }
  });
});

describe("backend failures", () => {
  it.each([
    ["FORBIDDEN", "forbidden"],
    ["NOT_FOUND", "not_found"],
    ["TIMEOUT", "timeout"],
    ["INVALID_REQUEST", "error"],
    ["UNAVAILABLE", "error"],
    ["INTERNAL", "error"],
  ] as const)("maps SwitchboardError %s to status %s with its message", async (code, status) => {
    const backend = recordingBackend({
      send: async () => {
        throw new SwitchboardError(code, `boom ${code}`);
      },
    });
    const { result } = await call("sessions_send", { sessionKey: "k", message: "hi" }, backend);
    expect(result).toEqual({ status, error: `boom ${code}` });
  });

  // Before session 23 the result carried the error's own text ("internal error: connect
  // ECONNREFUSED 10.0.3.7:5432 (user=…)") to the agent or MCP host, and into the transcript.
  it("turns any other thrown error into an internal error without its text, and tells the logger", async () => {
    const { logger, entries } = recordingLogger();
    const backend = recordingBackend({
      agents: async () => {
        throw new TypeError("cannot read properties of undefined");
      },
    });
    const result = await createToolExecutor(backend, { logger: logger.child({ component: "tools" }) }).invoke(
      "agents_list",
      {},
      caller,
    );
    expect(result).toEqual({ status: "error", error: "internal error" });
    expect(entries).toEqual([
      {
        level: "warn",
        fields: { component: "tools", tool: "agents_list", error: "cannot read properties of undefined" },
        message: "tool backend failed unexpectedly",
      },
    ]);
  });

  it("handles a thrown non-Error and a synchronous throw", async () => {
    const backend = recordingBackend({
      summarize: () => {
        throw "plain string";
      },
    });
    expect((await call("summarize", {}, backend)).result).toEqual({
      status: "error",
      error: "internal error",
    });
  });

  it("treats a backend result without a valid status as an internal error", async () => {
    const backend = recordingBackend({ message: async () => ({ deliveryId: "d" }) as never });
    expect((await call("message", { channel: "c", to: "t", text: "x" }, backend)).result).toEqual({
      status: "error",
      error: "internal error",
    });
  });
});
