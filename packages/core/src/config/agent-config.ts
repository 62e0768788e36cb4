import { DEFAULT_AGENT_ID } from "../keys/agent-id";
import type { Level } from "../labels/index";
import type { Config, ConfigAgent } from "./config-schema";
import { type AgentModelConfig, defaultAgentModel, type SubagentModel } from "./model-config";

/** An agent's settings with `agents.defaults` applied: what the gateway and workers act on. */
export interface ResolvedAgentConfig {
  id: string;
  name?: string;
  /** True for the agent `defaultAgentId` returns. */
  default: boolean;
  clearance: Level;
  sandboxed: boolean;
  timeoutSeconds: number;
  model: AgentModelConfig;
  subagents: {
    /** Lower-case ids, globs or `"*"`; default: only the agent itself. */
    allowAgents: string[];
    model: SubagentModel;
    archiveAfterMinutes: number;
    maxSpawnDepth: number;
    maxChildren: number;
  };
}

/** The agent marked `default: true`, else the first configured, else `main`. */
export function defaultAgentId(config: Config): string {
  const list = config.agents.list;
  return (list.find((agent) => agent.default === true) ?? list[0])?.id ?? DEFAULT_AGENT_ID;
}

function findAgent(config: Config, id: string): ConfigAgent | undefined {
  const wanted = id.toLowerCase();
  return config.agents.list.find((agent) => agent.id === wanted);
}

/** A configured agent (id case-insensitive) with defaults applied; undefined when not configured. */
export function agentConfig(config: Config, id: string): ResolvedAgentConfig | undefined {
  const agent = findAgent(config, id);
  if (!agent) return undefined;
  const defaults = config.agents.defaults;
  const subagents = agent.subagents ?? {};
  const resolved: ResolvedAgentConfig = {
    id: agent.id,
    default: agent.id === defaultAgentId(config),
    clearance: agent.clearance ?? defaults.clearance,
    sandboxed: agent.sandboxed ?? false,
    timeoutSeconds: agent.timeoutSeconds ?? defaults.timeoutSeconds,
    model: agent.model ?? defaultAgentModel(),
    subagents: {
      allowAgents: subagents.allowAgents ?? [agent.id],
      model: subagents.model !== undefined ? subagents.model : defaults.subagents.model,
      archiveAfterMinutes: subagents.archiveAfterMinutes ?? defaults.subagents.archiveAfterMinutes,
      maxSpawnDepth: subagents.maxSpawnDepth ?? defaults.subagents.maxSpawnDepth,
      maxChildren: subagents.maxChildren ?? defaults.subagents.maxChildren,
    },
  };
  if (agent.name !== undefined) resolved.name = agent.name;
  return resolved;
}

/**
 * An agent's clearance: its own, else `agents.defaults.clearance`. An agent id that is not configured
 * (a key may name one) gets the default clearance too.
 */
export function agentClearance(config: Config, id: string): Level {
  return findAgent(config, id)?.clearance ?? config.agents.defaults.clearance;
}

/**
 * Sessions driven by an MCP host (the `session` of each `mcp` token): the host speaks there, not an
 * agent's worker, so the gateway never starts agent turns in them on its own (reply-back turns,
 * announces); what would have been such a turn is recorded in the transcript for the host to read.
 */
export function hostDrivenSessionKeys(config: Config): ReadonlySet<string> {
  const keys = new Set<string>();
  for (const token of config.auth.tokens) if (token.role === "mcp" && token.session) keys.add(token.session);
  return keys;
}

/**
 * How long after its run ends a sub-agent spawned by `requesterAgentId` is archived (minutes; <= 0:
 * never): that agent's `subagents.archiveAfterMinutes`, else the default.
 */
export function archiveWindowMinutes(config: Config, requesterAgentId: string | undefined): number {
  const own = requesterAgentId === undefined ? undefined : agentConfig(config, requesterAgentId);
  return own?.subagents.archiveAfterMinutes ?? config.agents.defaults.subagents.archiveAfterMinutes;
}

/** The longest archive window of any agent (minutes; <= 0 when no agent's sub-agents are archived). */
export function longestArchiveWindowMinutes(config: Config): number {
  return Math.max(
    config.agents.defaults.subagents.archiveAfterMinutes,
    ...config.agents.list.map((agent) => archiveWindowMinutes(config, agent.id)),
  );
}
