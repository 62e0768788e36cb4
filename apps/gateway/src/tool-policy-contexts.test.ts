import { type PolicyDecision, type RuleAction, SEND_TIMEOUT_SECONDS, TOOL_NAMES } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { parseToolCall, readDecision } from "./tool-policy-contexts";

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

describe("readDecision", () => {
  const decision = (
    action: PolicyDecision["action"],
    evaluated: Array<[ruleId: string, matched: boolean, action: RuleAction]>,
  ): PolicyDecision => ({
    action,
    ruleId: null,
    message: "no policy rule matched; policy.default is allow",
    labels: { before: "PUBLIC", after: "INTERNAL" },
    evaluated: evaluated.map(([ruleId, matched, ruleAction]) => ({
      ruleId,
      hook: "PRE_HISTORY",
      matched,
      action: ruleAction,
    })),
  });

  it("is a REDACT by the first matching redact rule when the read is let through", () => {
    const read = readDecision(
      decision("ALLOW", [
        ["flow.no-read-up", false, "deny"],
        ["unmatched", false, "redact"],
        ["no-keys", true, "redact"],
        ["no-mail", true, "redact"],
      ]),
    );
    expect(read).toMatchObject({
      action: "REDACT",
      ruleId: "no-keys",
      labels: { before: "PUBLIC", after: "INTERNAL" },
    });
    expect(read.message).toContain("rules: no-keys, no-mail");
  });

  it("leaves a refusal, and a read no redact rule matched, as they are", () => {
    const blocked = decision("BLOCK", [
      ["no-keys", true, "redact"],
      ["no-vault", true, "deny"],
    ]);
    expect(readDecision(blocked)).toBe(blocked);
    const plain = decision("ALLOW", [["no-keys", false, "redact"]]);
    expect(readDecision(plain)).toBe(plain);
  });
});
