import { type AgentToAgentConfig, checkAgentToAgent } from "./agent-to-agent";
import type { PolicyContext } from "./context";
import { readUpViolation, writeDownViolation } from "./flow";
import type { Hook } from "./hooks";
import type { BuiltinRuleId } from "./rule-schema";
import { resolveSendPolicy, SEND_BLOCKED_MESSAGE, type SendPolicyConfig } from "./send-policy";
import { type SpawnLimitsSource, spawnLimitsFor, spawnProblem } from "./spawn";

export const DEFAULT_MAX_HOPS = 4;
export const DEFAULT_BUDGET_PER_MINUTE = 30;

export interface BuiltinSettings {
  sendPolicy?: SendPolicyConfig;
  agentToAgent?: AgentToAgentConfig;
  spawn?: SpawnLimitsSource;
  configuredAgents?: readonly string[];
  maxSpawnDepth?: number;
  maxChildren?: number;
  maxHops?: number;
  budgetPerMinute?: number;
  sandboxVisibility?: "spawned" | "all";
}

/** A built-in rule: it can only deny (a message) or pass (undefined); it never allows. */
export interface BuiltinRule {
  id: BuiltinRuleId;
  hooks: readonly Hook[];
  check: (ctx: PolicyContext) => string | undefined;
}

const fromGateway = (ctx: PolicyContext): boolean => ctx.facts?.origin === "gateway";

export function builtinRules(settings: BuiltinSettings): BuiltinRule[] {
  return [
    // Addressing first (a2a, visibility): whether the caller may reach a session at a key depends on
    // the key's agent and on who spawned the session, never on what it holds, so a refused caller
    // hears the same refusal for an existing session and a missing key (SessionToolsBackend.target).
    // A label rule deciding before them told it that a session was there, and its taint. They only
    // deny: the flow rules still decide everything they let through.
    {
      id: "a2a",
      hooks: ["PRE_HISTORY", "PRE_SEND"],
      check: (ctx) => {
        const { caller, target } = ctx;
        if (!caller || !target || fromGateway(ctx)) return undefined;
        const result = checkAgentToAgent(settings.agentToAgent, caller.agentId, target.agentId);
        return result.allowed
          ? undefined
          : `agent-to-agent access from agent "${caller.agentId}" to agent "${target.agentId}" is forbidden: ${result.reason}`;
      },
    },
    {
      id: "visibility",
      hooks: ["PRE_HISTORY", "PRE_SEND"],
      check: (ctx) => {
        const { caller, target } = ctx;
        if (!caller?.sandboxed || !target || fromGateway(ctx)) return undefined;
        if ((settings.sandboxVisibility ?? "spawned") === "all") return undefined;
        if (target.key === caller.key || target.spawnedBy === caller.key) return undefined;
        return (
          `${target.key} is not visible from sandboxed session ${caller.key} ` +
          `(agents.defaults.sandbox.sessionToolsVisibility is "spawned")`
        );
      },
    },
    { id: "flow.no-read-up", hooks: ["PRE_HISTORY", "PRE_TOOL_CALL"], check: readUpViolation },
    { id: "flow.no-write-down", hooks: ["PRE_SEND", "PRE_SPAWN", "PRE_OUTPUT"], check: writeDownViolation },
    {
      id: "send-policy",
      hooks: ["PRE_SEND", "PRE_OUTPUT"],
      check: (ctx) => {
        let resolution: ReturnType<typeof resolveSendPolicy>;
        if (ctx.hook === "PRE_SEND") {
          if (fromGateway(ctx)) return undefined;
          const target = ctx.target;
          if (!target) throw new Error("PRE_SEND context has no target");
          resolution = resolveSendPolicy(settings.sendPolicy, {
            channel: target.channel,
            chatType: target.chatType,
            key: target.key,
            to: target.to,
            override: target.sendPolicy,
          });
        } else {
          const recipient = ctx.recipient;
          if (!recipient) throw new Error("PRE_OUTPUT context has no recipient");
          resolution = resolveSendPolicy(settings.sendPolicy, {
            channel: recipient.channel,
            chatType: recipient.chatType ?? ctx.caller?.chatType,
            key: ctx.caller?.key,
            to: recipient.to,
            override: ctx.caller?.sendPolicy,
          });
        }
        return resolution.action === "deny" ? SEND_BLOCKED_MESSAGE : undefined;
      },
    },
    {
      // A spawn continues the chain of the run that asked for it, so spawn → announce → spawn ends too.
      id: "a2a.hop-limit",
      hooks: ["PRE_SEND", "PRE_SPAWN"],
      check: (ctx) => {
        const maxHops = settings.maxHops ?? DEFAULT_MAX_HOPS;
        const hop = ctx.facts?.hop;
        return hop !== undefined && hop > maxHops
          ? `agent-to-agent hop limit reached (${maxHops})`
          : undefined;
      },
    },
    {
      id: "a2a.cycle",
      hooks: ["PRE_SEND"],
      check: (ctx) => {
        const cycle = ctx.facts?.cycle;
        if (!cycle || cycle.length === 0) return undefined;
        const chain = ctx.facts?.chainId ? ` in chain ${ctx.facts.chainId}` : "";
        return `agent-to-agent cycle refused${chain}: ${cycle.join(" -> ")} would wait on a session that is already waiting`;
      },
    },
    {
      id: "a2a.budget",
      hooks: ["PRE_SEND", "PRE_SPAWN"],
      check: (ctx) => {
        const used = ctx.facts?.budgetUsed;
        if (used === undefined || fromGateway(ctx)) return undefined;
        const budget = settings.budgetPerMinute ?? DEFAULT_BUDGET_PER_MINUTE;
        const what = ctx.hook === "PRE_SPAWN" ? "spawns" : "agent-to-agent sends";
        return used >= budget
          ? `budget exhausted: ${ctx.caller?.key ?? "this session"} started ${used} ${what} in the last minute (session.agentToAgent.budgetPerMinute is ${budget})`
          : undefined;
      },
    },
    {
      id: "spawn",
      hooks: ["PRE_SPAWN"],
      check: (ctx) => {
        const { caller, target } = ctx;
        if (!caller) return undefined;
        if (!target) throw new Error("PRE_SPAWN context has no target");
        return spawnProblem({
          requester: caller,
          targetAgentId: target.agentId,
          ...(settings.configuredAgents ? { configuredAgents: settings.configuredAgents } : {}),
          activeChildren: ctx.facts?.activeChildren,
          limits: spawnLimitsFor(settings.spawn, caller.agentId),
          defaults: { maxSpawnDepth: settings.maxSpawnDepth, maxChildren: settings.maxChildren },
        });
      },
    },
  ];
}
