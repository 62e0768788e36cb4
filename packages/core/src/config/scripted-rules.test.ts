import { describe, expect, it } from "vitest";
import { parseScriptedRulesFile } from "./parse-config";
import { ScriptedRuleSchema, ScriptedRulesFileSchema } from "./scripted-rules";

describe("scripted rules", () => {
  it("accepts the rules of the spec example, normalising tool calls", () => {
    const rules = parseScriptedRulesFile({
      rules: [
        { when: "^ping$", reply: "pong" },
        {
          when: "^ask (\\S+) (.+)$",
          call: { tool: "sessions_send", args: { sessionKey: "$1", message: "$2", timeoutSeconds: 10 } },
          reply: "they said: {{result.reply}}",
        },
        { context: "Agent-to-agent reply step", reply: "REPLY_SKIP" },
        {
          when: "^spawn (.+)$",
          call: { tool: "sessions_spawn", args: { task: "$1" } },
          reply: "started {{result.childSessionKey}}",
        },
        {
          provenance: "subagent",
          call: [{ tool: "sessions_list" }, { tool: "session_status", args: {} }],
          delayMs: 5,
        },
        { when: "^boom$", fail: "model exploded" },
        { reply: "echo: {{message}}" },
      ],
    });
    expect(rules).toHaveLength(7);
    expect(rules[1]!.call).toEqual({
      tool: "sessions_send",
      args: { sessionKey: "$1", message: "$2", timeoutSeconds: 10 },
    });
    expect(rules[4]!.call).toEqual([
      { tool: "sessions_list", args: {} },
      { tool: "session_status", args: {} },
    ]);
  });

  it("names the file, path and reason of each bad rule", () => {
    expect(() =>
      parseScriptedRulesFile(
        {
          rules: [
            { when: "[unclosed", reply: "x" },
            { provenance: "system", reply: "x" },
            { when: "^x$" },
            { call: { tool: "t", arg: {} } },
          ],
        },
        "agents/main.rules.yaml",
      ),
    ).toThrow(
      /invalid agents\/main\.rules\.yaml:\n {2}rules\[0\]\.when: invalid regular expression: .+\n {2}rules\[1\]\.provenance: must be one of "user", "agent", "subagent"\n {2}rules\[2\]: a rule needs "reply", "call" or "fail"\n {2}rules\[3\]\.call\.arg: unknown key \(did you mean "args"\?\)$/,
    );
  });

  it("exports the schemas for reuse", () => {
    expect(ScriptedRuleSchema.safeParse({ when: "(", reply: "x" }).success).toBe(false);
    expect(ScriptedRulesFileSchema.safeParse({ rules: [{ reply: "x" }] }).success).toBe(true);
    expect(ScriptedRulesFileSchema.safeParse([{ reply: "x" }]).success).toBe(false);
  });
});
