import { describe, expect, it } from "vitest";
import type { PolicyContext } from "./context";
import { createPolicyEngine, evaluateHooks, type PolicyDecision } from "./engine";
import type { PolicyRuleInput } from "./rule-schema";
import { DISCORD_GROUP, MAIN, sendContext, sessionFacts } from "./test-fixtures";

const SECRET = "sk-ABCDEFGHIJKLMNOPQRSTUVWX";
const OTHER_SECRET = "sk-0123456789abcdefghijKLMN";

describe("flow rules", () => {
  it("blocks a CONFIDENTIAL session writing into a PUBLIC target, naming both levels", () => {
    const engine = createPolicyEngine();
    const decision = engine.evaluate(sendContext({ taint: "CONFIDENTIAL" }, { clearance: "PUBLIC" }));
    expect(decision).toMatchObject({
      action: "BLOCK",
      ruleId: "flow.no-write-down",
      message:
        "write-down blocked: session taint CONFIDENTIAL cannot flow to agent:main:discord:group:dev (clearance PUBLIC)",
      labels: { before: "CONFIDENTIAL", after: "CONFIDENTIAL", targetAfter: "PUBLIC" },
    });
  });

  it("allows a write at or below the target's clearance and reports the target's new taint", () => {
    const decision = createPolicyEngine().evaluate(
      sendContext({ taint: "INTERNAL" }, { clearance: "CONFIDENTIAL", taint: "PUBLIC" }),
    );
    expect(decision.action).toBe("ALLOW");
    expect(decision.labels).toEqual({ before: "INTERNAL", after: "INTERNAL", targetAfter: "INTERNAL" });
  });

  it("cannot be overridden by a user allow rule, whatever its priority", () => {
    const engine = createPolicyEngine({
      rules: [{ id: "allow-everything", hook: "PRE_SEND", priority: 1_000_000, action: "allow" }],
    });
    const decision = engine.evaluate(sendContext({ taint: "RESTRICTED" }, { clearance: "INTERNAL" }), {
      explain: true,
    });
    expect(decision.action).toBe("BLOCK");
    expect(decision.ruleId).toBe("flow.no-write-down");
    expect(decision.evaluated?.map((e) => e.ruleId)).not.toContain("allow-everything");
  });

  it("blocks output to a channel classified below the session's taint", () => {
    const decision = createPolicyEngine().evaluate({
      hook: "PRE_OUTPUT",
      caller: sessionFacts(MAIN, { taint: "CONFIDENTIAL" }),
      recipient: { channel: "telegram", to: "42", level: "INTERNAL" },
      text: "hello",
    });
    expect(decision).toMatchObject({
      action: "BLOCK",
      ruleId: "flow.no-write-down",
      message:
        "write-down blocked: session taint CONFIDENTIAL cannot flow to telegram:42 (classification INTERNAL)",
    });
    expect(decision.text).toBeUndefined();
  });

  it("blocks a spawn whose task would carry the requester's taint above the child's clearance", () => {
    const decision = createPolicyEngine().evaluate({
      hook: "PRE_SPAWN",
      caller: sessionFacts(MAIN, { taint: "CONFIDENTIAL" }),
      target: sessionFacts("agent:main:subagent:1b2c", { clearance: "INTERNAL" }),
    });
    expect(decision.ruleId).toBe("flow.no-write-down");
    expect(decision.message).toContain("CONFIDENTIAL");
    expect(decision.message).toContain("(clearance INTERNAL)");
  });

  it("blocks reading a session above the caller's clearance and raises taint on an allowed read", () => {
    const engine = createPolicyEngine();
    const read = (targetTaint: "RESTRICTED" | "CONFIDENTIAL") =>
      engine.evaluate({
        hook: "PRE_HISTORY",
        caller: sessionFacts(DISCORD_GROUP, { taint: "INTERNAL", clearance: "CONFIDENTIAL" }),
        target: sessionFacts(MAIN, { taint: targetTaint }),
      });
    expect(read("RESTRICTED")).toMatchObject({
      action: "BLOCK",
      ruleId: "flow.no-read-up",
      message:
        "read-up blocked: agent:main:main (taint RESTRICTED) cannot flow to agent:main:discord:group:dev (clearance CONFIDENTIAL)",
      labels: { before: "INTERNAL", after: "INTERNAL" },
    });
    expect(read("CONFIDENTIAL")).toMatchObject({
      action: "ALLOW",
      labels: { before: "INTERNAL", after: "CONFIDENTIAL" },
    });
  });

  it("lists without escalating: rows above the current taint are hidden, and taint stays", () => {
    const engine = createPolicyEngine();
    const row = (taint: "INTERNAL" | "PUBLIC") =>
      engine.evaluate({
        hook: "PRE_HISTORY",
        caller: sessionFacts(MAIN, { taint: "PUBLIC", clearance: "RESTRICTED" }),
        target: sessionFacts("agent:main:cron:x", { taint }),
        facts: { discovery: true },
      });
    expect(row("INTERNAL")).toMatchObject({ action: "BLOCK", ruleId: "flow.no-read-up" });
    expect(row("PUBLIC")).toMatchObject({ action: "ALLOW", labels: { before: "PUBLIC", after: "PUBLIC" } });
  });

  it("blocks a tool call whose results would be above clearance (PRE_TOOL_CALL with dataLabel)", () => {
    const engine = createPolicyEngine();
    const call = (dataLabel: "CONFIDENTIAL" | "INTERNAL") =>
      engine.evaluate({
        hook: "PRE_TOOL_CALL",
        caller: sessionFacts(DISCORD_GROUP, { clearance: "INTERNAL" }),
        tool: { name: "web_fetch", args: {} },
        dataLabel,
      });
    expect(call("CONFIDENTIAL")).toMatchObject({ action: "BLOCK", ruleId: "flow.no-read-up" });
    expect(call("INTERNAL").labels).toEqual({ before: "PUBLIC", after: "INTERNAL" });
  });

  it("checks operator input by its data label", () => {
    const decision = createPolicyEngine().evaluate({
      hook: "PRE_SEND",
      target: sessionFacts(DISCORD_GROUP, { clearance: "PUBLIC" }),
      dataLabel: "CONFIDENTIAL",
    });
    expect(decision.message).toBe(
      "write-down blocked: data label CONFIDENTIAL cannot flow to agent:main:discord:group:dev (clearance PUBLIC)",
    );
  });

  it("fails closed on a malformed context", () => {
    const decision = createPolicyEngine().evaluate({ hook: "PRE_SEND", caller: sessionFacts(MAIN) });
    expect(decision).toMatchObject({ action: "BLOCK", ruleId: "flow.no-write-down" });
    expect(decision.message).toContain("PRE_SEND context has no target");
  });
});

describe("built-in policies", () => {
  it("send-policy: a denied send says exactly `send blocked by session policy`", () => {
    const engine = createPolicyEngine({
      sendPolicy: { rules: [{ action: "deny", match: { channel: "discord", chatType: "group" } }] },
    });
    expect(engine.evaluate(sendContext({}, {}))).toMatchObject({
      action: "BLOCK",
      ruleId: "send-policy",
      message: "send blocked by session policy",
    });
    expect(engine.evaluate(sendContext({}, { key: "agent:main:discord:dm:1" })).action).toBe("ALLOW");
    expect(engine.evaluate(sendContext({}, { sendPolicy: "allow" })).action).toBe("ALLOW");
  });

  it("send-policy: a session's deny override blocks its own outbound replies", () => {
    const engine = createPolicyEngine();
    const output = (sendPolicy?: "deny") =>
      engine.evaluate({
        hook: "PRE_OUTPUT",
        caller: sessionFacts(DISCORD_GROUP, sendPolicy ? { sendPolicy } : {}),
        recipient: { channel: "discord", to: "dev", level: "PUBLIC" },
      });
    expect(output("deny")).toMatchObject({ action: "BLOCK", ruleId: "send-policy" });
    expect(output().action).toBe("ALLOW");
  });

  it("a2a: cross-agent access is forbidden unless tools.agentToAgent allows both agents", () => {
    const ctx = sendContext({}, { key: "agent:research:main" });
    const blocked = createPolicyEngine().evaluate(ctx);
    expect(blocked.ruleId).toBe("a2a");
    expect(blocked.message).toContain("tools.agentToAgent");
    expect(
      createPolicyEngine({ agentToAgent: { enabled: true, allow: ["main", "res*"] } }).evaluate(ctx).action,
    ).toBe("ALLOW");
    const partial = createPolicyEngine({ agentToAgent: { enabled: true, allow: ["main"] } }).evaluate(ctx);
    expect(partial.message).toContain('agent "research" is not in tools.agentToAgent.allow');
    expect(createPolicyEngine().evaluate(sendContext({}, { key: "agent:main:cron:x" })).action).toBe("ALLOW");
  });

  it("a2a: hop limit and cycles", () => {
    const engine = createPolicyEngine({ maxHops: 4 });
    expect(engine.evaluate(sendContext({}, { key: "agent:main:x" }, { facts: { hop: 4 } })).action).toBe(
      "ALLOW",
    );
    expect(engine.evaluate(sendContext({}, { key: "agent:main:x" }, { facts: { hop: 5 } }))).toMatchObject({
      action: "BLOCK",
      ruleId: "a2a.hop-limit",
      message: "agent-to-agent hop limit reached (4)",
    });
    const cycle = engine.evaluate(
      sendContext(
        {},
        { key: "agent:main:x" },
        { facts: { cycle: [MAIN, "agent:main:x", MAIN], chainId: "c1" } },
      ),
    );
    expect(cycle.ruleId).toBe("a2a.cycle");
    expect(cycle.message).toContain("agent:main:main -> agent:main:x -> agent:main:main");
  });

  describe("spawn", () => {
    const spawnCtx = (
      caller: Parameters<typeof sessionFacts>[1],
      targetAgent: string,
      activeChildren?: number,
    ) =>
      ({
        hook: "PRE_SPAWN",
        caller: sessionFacts(caller?.key ?? MAIN, caller),
        target: sessionFacts(`agent:${targetAgent}:subagent:abc`),
        ...(activeChildren === undefined ? {} : { facts: { activeChildren } }),
      }) satisfies PolicyContext;

    it("allows only the same agent by default, case-insensitively", () => {
      const engine = createPolicyEngine();
      expect(engine.evaluate(spawnCtx({}, "main")).action).toBe("ALLOW");
      expect(engine.evaluate(spawnCtx({}, "research"))).toMatchObject({ action: "BLOCK", ruleId: "spawn" });
      const allowing = createPolicyEngine({ spawn: { Main: { allowAgents: ["RESEARCH"] } } });
      expect(allowing.evaluate(spawnCtx({}, "research")).action).toBe("ALLOW");
      expect(allowing.evaluate(spawnCtx({}, "ops")).action).toBe("BLOCK");
      const any = createPolicyEngine({ spawn: () => ({ allowAgents: ["*"] }) });
      expect(any.evaluate(spawnCtx({}, "ops")).action).toBe("ALLOW");
    });

    it("stops sub-agents from spawning at the default depth 1", () => {
      const child = { key: "agent:main:subagent:parent", spawnDepth: 1 };
      const decision = createPolicyEngine().evaluate(spawnCtx(child, "main"));
      expect(decision).toMatchObject({ action: "BLOCK", ruleId: "spawn" });
      expect(decision.message).toContain("maxSpawnDepth is 1");
      expect(createPolicyEngine({ maxSpawnDepth: 2 }).evaluate(spawnCtx(child, "main")).action).toBe("ALLOW");
      expect(
        createPolicyEngine({ spawn: { main: { maxSpawnDepth: 0 } } }).evaluate(spawnCtx({}, "main")).action,
      ).toBe("BLOCK");
    });

    it("refuses an agent that is not configured, even one the allowlist matches", () => {
      const engine = createPolicyEngine({
        spawn: () => ({ allowAgents: ["*"] }),
        configuredAgents: ["main", "Research"],
      });
      expect(engine.evaluate(spawnCtx({}, "research")).action).toBe("ALLOW");
      expect(engine.evaluate(spawnCtx({}, "ghost"))).toMatchObject({
        action: "BLOCK",
        ruleId: "spawn",
        message: 'spawn not allowed: agent "ghost" is not configured',
      });
    });

    it("limits active children (default 5)", () => {
      const engine = createPolicyEngine();
      expect(engine.evaluate(spawnCtx({}, "main", 4)).action).toBe("ALLOW");
      expect(engine.evaluate(spawnCtx({}, "main", 5)).message).toContain("5 active children (maxChildren 5)");
    });
  });

  it("visibility: a sandboxed session addresses only itself and sessions it spawned", () => {
    const caller = sessionFacts("agent:main:subagent:me", { sandboxed: true });
    const history = (target: ReturnType<typeof sessionFacts>) =>
      createPolicyEngine().evaluate({ hook: "PRE_HISTORY", caller, target });
    expect(history(sessionFacts(MAIN))).toMatchObject({ action: "BLOCK", ruleId: "visibility" });
    expect(history(sessionFacts("agent:main:subagent:kid", { spawnedBy: caller.key })).action).toBe("ALLOW");
    expect(history(caller).action).toBe("ALLOW");
    const all = createPolicyEngine({ sandboxVisibility: "all" });
    expect(all.evaluate({ hook: "PRE_HISTORY", caller, target: sessionFacts(MAIN) }).action).toBe("ALLOW");
  });

  it("addressing refusals (a2a, visibility) decide before any rule on what the target holds", () => {
    /** What a caller is told of a decision (a real call's refusal, a simulation). */
    const shown = ({ action, ruleId, message, evaluated }: PolicyDecision) => ({
      action,
      ruleId,
      message,
      evaluated,
    });
    // A caller refused the key must hear the same whatever the session there holds, or whether one is
    // there at all: before, a tainted target answered with its taint (read-up/write-down) instead.
    const secret = {
      key: "agent:research:notes",
      taint: "RESTRICTED" as const,
      clearance: "PUBLIC" as const,
    };
    const empty = { key: "agent:research:notes" };
    const crossAgent = createPolicyEngine({ sendPolicy: { default: "deny" } });
    const caller = sessionFacts(MAIN, { clearance: "PUBLIC", taint: "CONFIDENTIAL" });
    for (const hook of ["PRE_HISTORY", "PRE_SEND"] as const) {
      const decide = (target: Partial<ReturnType<typeof sessionFacts>>) =>
        crossAgent.evaluate({ hook, caller, target: sessionFacts(target.key!, target) }, { explain: true });
      const held = decide(secret);
      expect(held, hook).toMatchObject({ action: "BLOCK", ruleId: "a2a" });
      expect(held.message).toContain("tools.agentToAgent.enabled");
      expect(shown(held), hook).toEqual(shown(decide(empty)));
    }
    const sandboxed = sessionFacts("agent:main:subagent:me", { sandboxed: true, clearance: "PUBLIC" });
    for (const hook of ["PRE_HISTORY", "PRE_SEND"] as const) {
      const decide = (target: Partial<ReturnType<typeof sessionFacts>>) =>
        createPolicyEngine().evaluate(
          { hook, caller: sandboxed, target: sessionFacts(MAIN, target) },
          { explain: true },
        );
      const held = decide({ taint: "RESTRICTED", clearance: "PUBLIC" });
      expect(held, hook).toMatchObject({ action: "BLOCK", ruleId: "visibility" });
      expect(held.message).toContain("agents.defaults.sandbox.sessionToolsVisibility");
      expect(shown(held), hook).toEqual(shown(decide({})));
    }
  });

  it("gateway follow-up steps skip addressing checks but never the flow rules", () => {
    const engine = createPolicyEngine({ sendPolicy: { default: "deny" } });
    const announce = sendContext(
      { key: "agent:research:subagent:kid", sandboxed: true },
      { key: MAIN },
      { facts: { origin: "gateway" } },
    );
    expect(engine.evaluate(announce).action).toBe("ALLOW");
    const tooHigh = sendContext(
      { key: "agent:research:subagent:kid", taint: "RESTRICTED" },
      { key: MAIN, clearance: "CONFIDENTIAL" },
      { facts: { origin: "gateway" } },
    );
    expect(engine.evaluate(tooHigh).ruleId).toBe("flow.no-write-down");
  });
});

describe("user rules", () => {
  const outputCtx = (text: string, extra: Partial<PolicyContext> = {}): PolicyContext => ({
    hook: "PRE_OUTPUT",
    caller: sessionFacts(MAIN),
    recipient: { channel: "telegram", to: "42", level: "PUBLIC" },
    text,
    ...extra,
  });

  // Before session 23 a rule on `recipient.to: "lobby"` let `lobby:thread:7` and `LOBBY` through,
  // though labels and send policy read both as the lobby.
  it("a rule on recipient.to holds for the chat's threads and any case; `not` excludes them too", () => {
    const engine = createPolicyEngine({
      rules: [{ id: "no-lobby", hook: "PRE_OUTPUT", action: "deny", when: { "recipient.to": "lobby" } }],
    });
    const to = (recipient: string) =>
      engine.evaluate(outputCtx("hi", { recipient: { channel: "discord", to: recipient, level: "PUBLIC" } }))
        .action;
    for (const blocked of ["lobby", "LOBBY", "lobby:thread:7", "Lobby:Thread:7:thread:8"])
      expect(to(blocked), blocked).toBe("BLOCK");
    for (const other of ["lobby2", "dev:thread:lobby", "lob"]) expect(to(other), other).not.toBe("BLOCK");
    const allowOnly = createPolicyEngine({
      rules: [
        { id: "only-lobby", hook: "PRE_OUTPUT", action: "deny", when: { "recipient.to": { not: "Lobby" } } },
      ],
    });
    const only = (recipient: string) =>
      allowOnly.evaluate(
        outputCtx("hi", { recipient: { channel: "discord", to: recipient, level: "PUBLIC" } }),
      ).action;
    expect(only("lobby:thread:3")).not.toBe("BLOCK");
    expect(only("dev")).toBe("BLOCK");
  });

  it("a redact rule really rewrites the text and counts replacements", () => {
    const engine = createPolicyEngine({
      rules: [
        {
          id: "no-keys-out",
          hook: "PRE_OUTPUT",
          action: "redact",
          redact: { patterns: ["sk-[A-Za-z0-9]{20,}"] },
        },
      ],
    });
    const decision = engine.evaluate(outputCtx(`first ${SECRET}, then ${OTHER_SECRET}.`));
    expect(decision).toMatchObject({
      action: "REDACT",
      ruleId: "no-keys-out",
      text: "first [REDACTED], then [REDACTED].",
      redactions: 2,
    });
    const clean = engine.evaluate(outputCtx("nothing secret"));
    expect(clean).toMatchObject({ action: "ALLOW", text: "nothing secret", redactions: 0 });
  });

  it("applies every matching redact rule, with a literal replacement, then keeps evaluating", () => {
    const engine = createPolicyEngine({
      rules: [
        {
          id: "keys",
          hook: "PRE_OUTPUT",
          priority: 10,
          action: "redact",
          redact: { patterns: ["sk-\\w+"], replacement: "$&" },
        },
        {
          id: "emails",
          hook: "PRE_OUTPUT",
          priority: 5,
          action: "redact",
          redact: { patterns: ["\\S+@\\S+"], replacement: "<email>" },
        },
        {
          id: "no-bombs",
          hook: "PRE_OUTPUT",
          priority: 1,
          action: "deny",
          when: { text: { matches: "bomb" } },
        },
      ],
    });
    const redacted = engine.evaluate(outputCtx(`${SECRET} to a@b.c`), { explain: true });
    expect(redacted.text).toBe("$& to <email>");
    expect(redacted.redactions).toBe(2);
    expect(redacted.message).toBe("redacted 2 matches (rules: keys, emails)");
    const blocked = engine.evaluate(outputCtx(`${SECRET} bomb`));
    expect(blocked).toMatchObject({ action: "BLOCK", ruleId: "no-bombs", redactions: 1 });
    expect(blocked.text).toBeUndefined();
  });

  it("PRE_HISTORY redact rules rewrite each text a read hands over and count them all", () => {
    const engine = createPolicyEngine({
      rules: [
        { id: "keys", hook: "PRE_HISTORY", action: "redact", redact: { patterns: ["sk-[A-Za-z0-9]{20,}"] } },
        { id: "quiet", hook: "PRE_HISTORY", action: "deny", when: { "target.channel": "vault" } },
      ],
    });
    expect(engine.redactsOn("PRE_HISTORY")).toBe(true);
    expect(engine.redactsOn("PRE_SEND")).toBe(false);
    const read = (channel: string, texts: string[]) =>
      engine.evaluate({
        hook: "PRE_HISTORY",
        caller: sessionFacts(MAIN),
        target: sessionFacts("agent:main:discord:group:dev", { channel }),
        texts,
      });
    const decision = read("discord", [`key ${SECRET}`, "plain", `${OTHER_SECRET} and ${SECRET}`]);
    expect(decision).toMatchObject({
      action: "REDACT",
      ruleId: "keys",
      texts: ["key [REDACTED]", "plain", "[REDACTED] and [REDACTED]"],
      redactions: 3,
    });
    expect(read("discord", ["plain"])).toMatchObject({ action: "ALLOW", texts: ["plain"], redactions: 0 });
    // Blocked: nothing is handed over.
    const blocked = read("vault", [SECRET]);
    expect(blocked.action).toBe("BLOCK");
    expect(blocked.texts).toBeUndefined();
  });

  it("runs by descending priority, first matching allow/deny decides, ties keep config order", () => {
    const rules: PolicyRuleInput[] = [
      { id: "low-deny", hook: "PRE_SEND", priority: 1, action: "deny" },
      {
        id: "high-allow-cron",
        hook: "PRE_SEND",
        priority: 50,
        action: "allow",
        when: { "target.kind": "cron" },
      },
      {
        id: "tie-first",
        hook: "PRE_SEND",
        priority: 10,
        action: "deny",
        message: "first of the tie",
        when: { "caller.agentId": "main" },
      },
      { id: "tie-second", hook: "PRE_SEND", priority: 10, action: "allow" },
    ];
    const engine = createPolicyEngine({ rules });
    expect(engine.evaluate(sendContext({}, { key: "agent:main:cron:x" }))).toMatchObject({
      action: "ALLOW",
      ruleId: "high-allow-cron",
      message: "allowed by policy rule high-allow-cron",
    });
    expect(engine.evaluate(sendContext({}, { key: "agent:main:x" }))).toMatchObject({
      action: "BLOCK",
      ruleId: "tie-first",
      message: "first of the tie",
    });
    expect(engine.rules.map((rule) => rule.id)).toEqual([
      "high-allow-cron",
      "tie-first",
      "tie-second",
      "low-deny",
    ]);
  });

  it("needs every condition of a rule to hold; operators compare levels by rank", () => {
    const engine = createPolicyEngine({
      default: "deny",
      rules: [
        {
          id: "internal-to-cron",
          hook: "PRE_SEND",
          action: "allow",
          when: {
            "caller.taint": { gte: "INTERNAL", lt: "RESTRICTED" },
            "target.key": { prefix: "agent:main:cron:" },
            "caller.agentId": { in: ["main", "ops"] },
            "caller.kind": { not: ["cron", "hook"] },
            "caller.sandboxed": null,
          },
        },
      ],
    });
    const ctx = (
      taint: "PUBLIC" | "INTERNAL" | "CONFIDENTIAL" | "RESTRICTED",
      target = "agent:main:cron:x",
    ) => sendContext({ taint }, { key: target });
    expect(engine.evaluate(ctx("INTERNAL")).action).toBe("ALLOW");
    expect(engine.evaluate(ctx("CONFIDENTIAL")).action).toBe("ALLOW");
    expect(engine.evaluate(ctx("PUBLIC"))).toMatchObject({ action: "BLOCK", ruleId: null });
    expect(engine.evaluate(ctx("RESTRICTED")).action).toBe("BLOCK");
    expect(engine.evaluate(ctx("INTERNAL", "agent:main:x")).action).toBe("BLOCK");
    expect(
      engine.evaluate(sendContext({ taint: "INTERNAL", sandboxed: true }, { key: "agent:main:cron:x" }))
        .action,
    ).toBe("BLOCK");
  });

  it("matches tool arguments but never inherited properties", () => {
    const engine = createPolicyEngine({
      rules: [
        {
          id: "no-long-waits",
          hook: "PRE_TOOL_CALL",
          action: "deny",
          when: { "tool.name": "sessions_send", "tool.args.timeoutSeconds": { gt: 60 } },
        },
        {
          id: "proto",
          hook: "PRE_TOOL_CALL",
          action: "deny",
          when: { "tool.args.constructor": { not: null } },
        },
      ],
    });
    const call = (args: Record<string, unknown>) =>
      engine.evaluate({
        hook: "PRE_TOOL_CALL",
        caller: sessionFacts(MAIN),
        tool: { name: "sessions_send", args },
      });
    expect(call({ timeoutSeconds: 600 }).ruleId).toBe("no-long-waits");
    expect(call({ timeoutSeconds: 30 }).action).toBe("ALLOW");
    expect(call({ timeoutSeconds: "600" }).action).toBe("ALLOW");
  });

  it("no match falls back to policy.default", () => {
    expect(createPolicyEngine().evaluate(sendContext({}, {}))).toMatchObject({
      action: "ALLOW",
      ruleId: null,
    });
    expect(createPolicyEngine({ default: "deny" }).evaluate(sendContext({}, {}))).toMatchObject({
      action: "BLOCK",
      ruleId: null,
      message: "no policy rule matched; policy.default is deny",
    });
  });

  it("a rule that throws decides deny and names itself", () => {
    const engine = createPolicyEngine({
      rules: [
        { id: "reads-args", hook: "PRE_TOOL_CALL", action: "allow", when: { "tool.args.target": "x" } },
      ],
    });
    const args = {};
    Object.defineProperty(args, "target", {
      enumerable: true,
      get: () => {
        throw new Error("boom");
      },
    });
    const decision = engine.evaluate(
      { hook: "PRE_TOOL_CALL", caller: sessionFacts(MAIN), tool: { name: "t", args } },
      { explain: true },
    );
    expect(decision).toMatchObject({ action: "BLOCK", ruleId: "reads-args" });
    expect(decision.message).toBe("policy rule reads-args failed (boom); denied");
    expect(decision.evaluated?.at(-1)).toMatchObject({ ruleId: "reads-args", error: "boom" });
  });

  it("a built-in that throws on a corrupted label denies too", () => {
    const ctx = sendContext({ taint: "SECRET" as never }, {});
    const decision = createPolicyEngine().evaluate(ctx);
    expect(decision).toMatchObject({ action: "BLOCK", ruleId: "flow.no-write-down" });
    expect(decision.message).toContain("failed");
  });

  it("a hook that exceeds its time budget denies, naming the hook", () => {
    let clock = 0;
    const engine = createPolicyEngine({
      hookBudgetMs: 250,
      now: () => (clock += 100),
      rules: [
        { id: "one", hook: "PRE_HISTORY", action: "deny", when: { "caller.agentId": "nobody" } },
        { id: "two", hook: "PRE_HISTORY", action: "deny", when: { "caller.agentId": "nobody" } },
        { id: "three", hook: "PRE_HISTORY", action: "allow" },
      ],
    });
    const ctx: PolicyContext = {
      hook: "PRE_HISTORY",
      caller: sessionFacts(MAIN),
      target: sessionFacts(MAIN),
    };
    const decision = engine.evaluate(ctx, { explain: true });
    expect(decision.action).toBe("BLOCK");
    expect(decision.ruleId).toBe("budget");
    expect(decision.message).toMatch(/^policy hook PRE_HISTORY exceeded its time budget of 250 ms/);
    // Same rules with a generous budget decide normally.
    clock = 0;
    const relaxed = createPolicyEngine({
      hookBudgetMs: 10_000,
      now: () => (clock += 100),
      rules: engine.rules,
    });
    expect(relaxed.evaluate(ctx).ruleId).toBe("three");
  });

  it("times the user rules only: a pause during the built-ins (a loaded machine, a GC) denies nothing", () => {
    let clock = 0;
    // Every reading a second later than the one before, as if the process stalled between them.
    const engine = createPolicyEngine({ hookBudgetMs: 50, now: () => (clock += 1_000) });
    expect(engine.evaluate(sendContext({}, {})).action).toBe("ALLOW");
    const ruled = createPolicyEngine({
      hookBudgetMs: 50,
      now: () => (clock += 1_000),
      rules: [{ id: "only", hook: "PRE_SEND", action: "allow" }],
    });
    expect(ruled.evaluate(sendContext({}, {}))).toMatchObject({ action: "BLOCK", ruleId: "budget" });
  });

  it("`evaluated` lists exactly what ran, in order, and only on request", () => {
    const engine = createPolicyEngine({
      rules: [
        { id: "skip-me", hook: "PRE_SEND", priority: 5, action: "deny", when: { "target.kind": "cron" } },
        { id: "decides", hook: "PRE_SEND", priority: 4, action: "allow" },
        { id: "never-runs", hook: "PRE_SEND", priority: 3, action: "deny" },
        { id: "other-hook", hook: "PRE_OUTPUT", action: "deny" },
      ],
    });
    const decision = engine.evaluate(sendContext({}, {}), { explain: true });
    expect(decision.evaluated).toEqual([
      { ruleId: "a2a", hook: "PRE_SEND", matched: false, action: "deny" },
      { ruleId: "visibility", hook: "PRE_SEND", matched: false, action: "deny" },
      { ruleId: "flow.no-write-down", hook: "PRE_SEND", matched: false, action: "deny" },
      { ruleId: "send-policy", hook: "PRE_SEND", matched: false, action: "deny" },
      { ruleId: "a2a.hop-limit", hook: "PRE_SEND", matched: false, action: "deny" },
      { ruleId: "a2a.cycle", hook: "PRE_SEND", matched: false, action: "deny" },
      { ruleId: "a2a.budget", hook: "PRE_SEND", matched: false, action: "deny" },
      { ruleId: "skip-me", hook: "PRE_SEND", matched: false, action: "deny" },
      { ruleId: "decides", hook: "PRE_SEND", matched: true, action: "allow" },
    ]);
    expect(engine.evaluate(sendContext({}, {})).evaluated).toBeUndefined();
  });

  it("a2a.budget refuses a tool's send or spawn once the session used its budget, naming it", () => {
    const engine = createPolicyEngine({ budgetPerMinute: 2 });
    const within = engine.evaluate(sendContext({}, {}, { facts: { origin: "tool", budgetUsed: 1 } }));
    expect(within.action).not.toBe("BLOCK");
    const over = engine.evaluate(sendContext({}, {}, { facts: { origin: "tool", budgetUsed: 2 } }));
    expect(over).toMatchObject({ action: "BLOCK", ruleId: "a2a.budget" });
    expect(over.message).toContain("session.agentToAgent.budgetPerMinute is 2");
    // The gateway's own follow-up steps are not the session's calls.
    const gateway = engine.evaluate(sendContext({}, {}, { facts: { origin: "gateway", budgetUsed: 9 } }));
    expect(gateway.action).not.toBe("BLOCK");
  });

  it("rejects invalid rules when the engine is built", () => {
    expect(() => createPolicyEngine({ rules: [{ id: "bad", hook: "PRE_SEND", action: "redact" }] })).toThrow(
      /rule "bad"/,
    );
  });
});

describe("evaluateHooks", () => {
  const engine = createPolicyEngine({
    rules: [
      {
        id: "no-send-tool",
        hook: "PRE_TOOL_CALL",
        action: "deny",
        when: { "tool.args.message": { matches: "forbidden" } },
      },
    ],
  });
  const contexts = (message: string, targetClearance: "PUBLIC" | "RESTRICTED"): PolicyContext[] => {
    const caller = sessionFacts(MAIN, { taint: "CONFIDENTIAL" });
    const tool = { name: "sessions_send", args: { sessionKey: DISCORD_GROUP, message } };
    return [
      { hook: "PRE_TOOL_CALL", caller, tool },
      { hook: "PRE_SEND", caller, tool, target: sessionFacts(DISCORD_GROUP, { clearance: targetClearance }) },
    ];
  };

  it("stops at the first BLOCK and merges the explanation", () => {
    const blockedEarly = evaluateHooks(engine, contexts("forbidden", "RESTRICTED"), { explain: true });
    expect(blockedEarly.ruleId).toBe("no-send-tool");
    expect(blockedEarly.decisions).toHaveLength(1);
    const blockedLate = evaluateHooks(engine, contexts("fine", "PUBLIC"), { explain: true });
    expect(blockedLate.ruleId).toBe("flow.no-write-down");
    expect(blockedLate.evaluated?.map((e) => `${e.hook}:${e.ruleId}`).slice(0, 2)).toEqual([
      "PRE_TOOL_CALL:flow.no-read-up",
      "PRE_TOOL_CALL:no-send-tool",
    ]);
    expect(blockedLate.evaluated?.at(-1)).toMatchObject({
      ruleId: "flow.no-write-down",
      hook: "PRE_SEND",
      matched: true,
    });
    expect(evaluateHooks(engine, contexts("fine", "RESTRICTED")).action).toBe("ALLOW");
  });
});
