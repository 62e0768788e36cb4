import { DEFAULT_SCRIPTED_RULES, type ScriptedRuleInput } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { executeRun } from "../run/execute-run";
import { fakeRunContext, modelRequest, runPayload } from "../testing/run-fixtures";
import { NO_RULE_MATCHED, ScriptedModelProvider } from "./scripted-provider";

const SPEC_RULES: ScriptedRuleInput[] = [
  { when: "^ping$", reply: "pong" },
  {
    when: "^ask (\\S+) (.+)$",
    call: { tool: "sessions_send", args: { sessionKey: "$1", message: "$2", timeoutSeconds: 10 } },
    reply: "they said: {{result.reply}}",
  },
  { context: "Agent-to-agent reply step", reply: "REPLY_SKIP" },
  { context: "Agent-to-agent announce step", reply: "ANNOUNCE_SKIP" },
  {
    when: "^spawn (.+)$",
    call: { tool: "sessions_spawn", args: { task: "$1" } },
    reply: "started {{result.childSessionKey}}",
  },
  { reply: "echo: {{message}}" },
];

function reply(
  rules: ScriptedRuleInput[],
  message: string,
  overrides: Parameters<typeof runPayload>[1] = {},
) {
  const { ctx } = fakeRunContext();
  return executeRun(runPayload(message, overrides), new ScriptedModelProvider(rules), ctx).then(
    (r) => r.reply,
  );
}

describe("scripted model: matching", () => {
  it("uses the first rule whose `when` matches, with captures in the reply", async () => {
    const rules = [
      { when: "^hi (\\w+)$", reply: "hello $1" },
      { when: "^hi", reply: "too late" },
    ];
    expect(await reply(rules, "hi bob")).toBe("hello bob");
    expect(await reply(rules, "hi there you")).toBe("too late");
    expect(await reply(SPEC_RULES, "ping")).toBe("pong");
    expect(await reply(SPEC_RULES, "ping?")).toBe("echo: ping?");
  });

  it("matches `context` against the injected context, not the message", async () => {
    const context = "Agent-to-agent reply step:\nAgent 1 (requester).\nTurn 1 of 5.";
    expect(await reply(SPEC_RULES, "what they said", { context })).toBe("REPLY_SKIP");
    expect(await reply(SPEC_RULES, "Agent-to-agent reply step")).toBe("echo: Agent-to-agent reply step");
  });

  it("matches `provenance` against the message's origin", async () => {
    const rules: ScriptedRuleInput[] = [
      { provenance: "agent", reply: "from an agent" },
      { provenance: "subagent", reply: "from my sub-agent" },
      { provenance: "user", reply: "from my user" },
    ];
    expect(await reply(rules, "x")).toBe("from my user");
    const agent = {
      kind: "agent" as const,
      fromSessionKey: "agent:b:main",
      fromRunId: "r0",
      chainId: "c",
      hop: 1,
    };
    expect(await reply(rules, "x", { provenance: agent })).toBe("from an agent");
    expect(
      await reply(rules, "x", { provenance: { kind: "subagent", childSessionKey: "k", runId: "r" } }),
    ).toBe("from my sub-agent");
  });

  it("requires every condition of a rule to hold", async () => {
    const rules: ScriptedRuleInput[] = [
      { when: "^go$", context: "announce", provenance: "agent", reply: "all three" },
      { reply: "fallback" },
    ];
    const agent = {
      kind: "agent" as const,
      fromSessionKey: "agent:b:main",
      fromRunId: "r0",
      chainId: "c",
      hop: 1,
    };
    expect(await reply(rules, "go", { provenance: agent, context: "announce step" })).toBe("all three");
    expect(await reply(rules, "go", { provenance: agent })).toBe("fallback");
    expect(await reply(rules, "go", { context: "announce step" })).toBe("fallback");
  });

  it("fails with `no scripted rule matched` when nothing matches", async () => {
    const { ctx } = fakeRunContext();
    const run = executeRun(
      runPayload("nothing"),
      new ScriptedModelProvider([{ when: "^x$", reply: "x" }]),
      ctx,
    );
    await expect(run).rejects.toThrow(NO_RULE_MATCHED);
  });

  it("default rules echo and stay silent in agent-to-agent steps", async () => {
    expect(await reply([...DEFAULT_SCRIPTED_RULES], "hello")).toBe("echo: hello");
    expect(await reply([...DEFAULT_SCRIPTED_RULES], "x", { context: "Agent-to-agent announce step:" })).toBe(
      "ANNOUNCE_SKIP",
    );
  });
});

describe("scripted model: tool calls", () => {
  it("makes the call with templated, typed args and replies from its result", async () => {
    const { ctx, calls } = fakeRunContext({
      sessions_send: (args) => ({ runId: "r9", status: "ok", reply: `got "${args.message}"` }),
    });
    const result = await executeRun(
      runPayload("ask agent:b:main how are you"),
      new ScriptedModelProvider(SPEC_RULES),
      ctx,
    );
    expect(calls).toEqual([
      {
        name: "sessions_send",
        args: { sessionKey: "agent:b:main", message: "how are you", timeoutSeconds: 10 },
      },
    ]);
    expect(result.reply).toBe('they said: got "how are you"');
  });

  it("runs a list of calls in order; later args and the reply read earlier results", async () => {
    const rules: ScriptedRuleInput[] = [
      {
        when: "^delegate (.+)$",
        call: [
          { tool: "sessions_spawn", args: { task: "$1", runTimeoutSeconds: 30 } },
          {
            tool: "sessions_send",
            args: { sessionKey: "{{result.childSessionKey}}", message: "status?", timeoutSeconds: 0 },
          },
          {
            tool: "session_status",
            args: { sessionKey: "{{results.0.childSessionKey}}", depth: "{{results.0.depth}}" },
          },
        ],
        reply: "spawned {{results.0.childSessionKey}}, send {{results.1.status}}, last {{result.status}}",
      },
    ];
    const { ctx, calls } = fakeRunContext({
      sessions_spawn: () => ({ status: "accepted", childSessionKey: "agent:main:subagent:42", depth: 1 }),
      sessions_send: () => ({ status: "accepted", runId: "r2" }),
      session_status: () => ({ status: "ok" }),
    });
    const result = await executeRun(runPayload("delegate find cats"), new ScriptedModelProvider(rules), ctx);
    expect(calls).toEqual([
      { name: "sessions_spawn", args: { task: "find cats", runTimeoutSeconds: 30 } },
      {
        name: "sessions_send",
        args: { sessionKey: "agent:main:subagent:42", message: "status?", timeoutSeconds: 0 },
      },
      { name: "session_status", args: { sessionKey: "agent:main:subagent:42", depth: 1 } },
    ]);
    expect(result.reply).toBe("spawned agent:main:subagent:42, send accepted, last ok");
  });

  it("returns the call on the first model call and the reply once the result is in the chat", async () => {
    const model = new ScriptedModelProvider(SPEC_RULES);
    const run = runPayload("spawn write a poem");
    const first = await model.complete(modelRequest(run));
    expect(first.text).toBeUndefined();
    expect(first.toolCalls).toEqual([
      { id: "run-1:call:0", name: "sessions_spawn", args: { task: "write a poem" } },
    ]);
    const second = await model.complete(
      modelRequest(run, {
        messages: [
          { role: "user", content: "spawn write a poem" },
          { role: "assistant", content: "", toolCalls: first.toolCalls },
          {
            role: "tool",
            toolCallId: "run-1:call:0",
            name: "sessions_spawn",
            result: { childSessionKey: "agent:main:subagent:7" },
          },
        ],
      }),
    );
    expect(second).toMatchObject({ text: "started agent:main:subagent:7" });
    expect(second.toolCalls).toBeUndefined();
  });

  it("feeds a tool that throws back as an error result the reply can show", async () => {
    const { ctx } = fakeRunContext({});
    const rules: ScriptedRuleInput[] = [
      { call: { tool: "nope", args: {} }, reply: "{{result.status}}: {{result.error}}" },
    ];
    const result = await executeRun(runPayload("x"), new ScriptedModelProvider(rules), ctx);
    expect(result.reply).toBe("error: NOT_FOUND: unknown tool nope");
  });
});

describe("scripted model: fail and delay", () => {
  it("`fail` ends the run with its (templated) error, after the rule's calls", async () => {
    const { ctx, calls } = fakeRunContext({ sessions_list: () => ({ status: "ok", count: 0 }) });
    const rules: ScriptedRuleInput[] = [
      {
        when: "^break (\\w+)",
        call: { tool: "sessions_list", args: {} },
        fail: "broken on purpose: $1 ({{result.count}})",
      },
    ];
    await expect(
      executeRun(runPayload("break things"), new ScriptedModelProvider(rules), ctx),
    ).rejects.toThrow("broken on purpose: things (0)");
    expect(calls.map((c) => c.name)).toEqual(["sessions_list"]);
  });

  it("`delayMs` delays the turn and the delay is abortable", async () => {
    const rules: ScriptedRuleInput[] = [
      { when: "^slow$", delayMs: 60_000, reply: "finally" },
      { delayMs: 5, reply: "quick" },
    ];
    expect(await reply(rules, "fast")).toBe("quick");

    const controller = new AbortController();
    const { ctx } = fakeRunContext({}, controller.signal);
    const run = executeRun(runPayload("slow"), new ScriptedModelProvider(rules), ctx);
    setTimeout(() => controller.abort(new Error("worker shutting down")), 10);
    await expect(run).rejects.toThrow("run aborted: worker shutting down");
  });

  it("a delay past the run deadline ends it with `deadline exceeded`", async () => {
    const { ctx } = fakeRunContext();
    const rules: ScriptedRuleInput[] = [{ delayMs: 60_000, reply: "never" }];
    const run = executeRun(
      runPayload("x", { deadline: Date.now() + 20 }),
      new ScriptedModelProvider(rules),
      ctx,
    );
    await expect(run).rejects.toThrow("run aborted: deadline exceeded");
  });
});

describe("scripted model: rule validation", () => {
  it("refuses bad rules with the rule index, field and reason", () => {
    expect(() => new ScriptedModelProvider([{ reply: "ok" }, { when: "(", reply: "x" }])).toThrow(
      /rules\[1\]\.when: invalid regular expression/,
    );
    expect(() => new ScriptedModelProvider([{ when: "x" }])).toThrow(
      'rules[0]: a rule needs "reply", "call" or "fail"',
    );
    expect(() => new ScriptedModelProvider([{ reply: "x", replay: "y" } as ScriptedRuleInput])).toThrow(
      'rules[0].replay: unknown key (did you mean "reply"?)',
    );
  });

  it("refuses templates naming unknown variables, which would otherwise render as nothing", () => {
    expect(
      () =>
        new ScriptedModelProvider([{ reply: "ok" }, { reply: "{{mesage}}" }], "agents.list[0].model.rules"),
    ).toThrow("invalid agents.list[0].model.rules:\n  rules[1].reply: unknown template variable {{mesage}}");
    expect(
      () => new ScriptedModelProvider([{ call: [{ tool: "t", args: { a: ["{{reslt.x}}"] } }] }]),
    ).toThrow("rules[0].call[0].args: unknown template variable {{reslt.x}}");
  });

  it("a rule with calls and no reply replies with nothing; `fail` wins over `reply`", async () => {
    const { ctx, calls } = fakeRunContext({ session_status: () => ({ status: "ok" }) });
    const silent = await executeRun(
      runPayload("x"),
      new ScriptedModelProvider([{ call: { tool: "session_status", args: {} } }]),
      ctx,
    );
    expect(silent.reply).toBe("");
    expect(calls).toHaveLength(1);
    await expect(reply([{ reply: "ok", fail: "nope" }], "x")).rejects.toThrow("nope");
  });
});
