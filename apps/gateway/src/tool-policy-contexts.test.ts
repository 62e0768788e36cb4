import { SEND_TIMEOUT_SECONDS, TOOL_NAMES } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { parseToolCall } from "./tool-policy-contexts";

const caller = { sessionKey: "agent:main:main", agentId: "main", runId: "r1" };

describe("parseToolCall", () => {
  it("hands over the arguments exactly as the executor parsed them (defaults, clamping)", async () => {
    expect(await parseToolCall("sessions_send", { sessionKey: "lab", message: "hi" }, caller)).toEqual({
      tool: "sessions_send",
      request: { sessionKey: "lab", message: "hi", timeoutSeconds: SEND_TIMEOUT_SECONDS.default },
    });
    // A short positive wait rounds up: it still waits, as in the real call.
    const short = await parseToolCall(
      "sessions_send",
      { sessionKey: "lab", message: "hi", timeoutSeconds: 0.2 },
      caller,
    );
    expect(short && "request" in short && short.request).toMatchObject({ timeoutSeconds: 1 });
    expect(await parseToolCall("session_status", {}, caller)).toEqual({
      tool: "session_status",
      request: { sessionKey: undefined },
    });
  });

  it("fails as the real call fails on bad arguments, and leaves unknown tools to the executor", async () => {
    const missing = await parseToolCall("sessions_history", {}, caller);
    expect(missing).toMatchObject({ status: "error" });
    expect((missing as { error: string }).error).toContain("sessionKey");
    expect(await parseToolCall("message", { channel: "discord", to: "lab" }, caller)).toMatchObject({
      status: "error",
    });
    expect(await parseToolCall("no_such_tool", {}, caller)).toBeUndefined();
  });

  it("parses a call of every tool without reaching a backend", async () => {
    const args: Record<string, Record<string, unknown>> = {
      sessions_history: { sessionKey: "lab" },
      sessions_send: { sessionKey: "lab", message: "m" },
      sessions_spawn: { task: "t" },
      message: { channel: "c", to: "t", text: "x" },
      simulate_tool_call: { tool_name: "sessions_list" },
    };
    for (const tool of TOOL_NAMES) {
      const parsed = await parseToolCall(tool, args[tool] ?? {}, caller);
      expect(parsed && "tool" in parsed ? parsed.tool : parsed).toBe(tool);
    }
  });
});
