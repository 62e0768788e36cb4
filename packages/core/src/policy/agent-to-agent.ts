import { z } from "zod";
import { compileGlob, type GlobMatcher, matchesAnyGlob } from "../glob";

/** `tools.agentToAgent`. */
export const AgentToAgentConfigSchema = z.strictObject({
  enabled: z.boolean(),
  /** `*`, an exact agent id, or a glob (`res*`, `team-?`); case-insensitive. Empty = any agent. */
  allow: z.array(z.string().min(1, "must not be empty")).optional(),
});
export type AgentToAgentConfig = z.infer<typeof AgentToAgentConfigSchema>;

const AGENT_GLOB = { ignoreCase: true, trimPattern: true } as const;
const singlePatterns = new Map<string, GlobMatcher>();
/** Distinct agent patterns are few (they come from config); the bound only guards odd callers. */
const SINGLE_PATTERN_CACHE_LIMIT = 512;

/** Case-insensitive whole-string glob match: `*` any run of characters, `?` one character. */
export function matchesAgentPattern(pattern: string, agentId: string): boolean {
  let matcher = singlePatterns.get(pattern);
  if (matcher === undefined) {
    if (singlePatterns.size >= SINGLE_PATTERN_CACHE_LIMIT) singlePatterns.clear();
    matcher = compileGlob(pattern, AGENT_GLOB);
    singlePatterns.set(pattern, matcher);
  }
  return matcher(agentId);
}

/** Whether `agentId` matches any of the (config) agent patterns; compiled once per list. */
export function matchesAnyAgentPattern(patterns: readonly string[], agentId: string): boolean {
  return matchesAnyGlob(patterns, agentId, AGENT_GLOB);
}

export type AgentToAgentCheck = { allowed: true } | { allowed: false; reason: string };

/**
 * Whether a session of `callerAgentId` may read, inspect or send to a session of
 * `targetAgentId`. The same agent is always allowed; across agents `enabled` must be true and both
 * agents must match `allow` (an empty or absent list matches any agent, as in OpenClaw).
 */
export function checkAgentToAgent(
  config: AgentToAgentConfig | undefined,
  callerAgentId: string,
  targetAgentId: string,
): AgentToAgentCheck {
  if (callerAgentId.toLowerCase() === targetAgentId.toLowerCase()) return { allowed: true };
  if (!config?.enabled) return { allowed: false, reason: "tools.agentToAgent.enabled is not true" };
  const patterns = config.allow ?? [];
  if (patterns.length === 0) return { allowed: true };
  for (const agent of [callerAgentId, targetAgentId]) {
    if (!matchesAnyAgentPattern(patterns, agent)) {
      return { allowed: false, reason: `agent "${agent}" is not in tools.agentToAgent.allow` };
    }
  }
  return { allowed: true };
}

export function a2aAllowed(
  config: AgentToAgentConfig | undefined,
  callerAgentId: string,
  targetAgentId: string,
): boolean {
  return checkAgentToAgent(config, callerAgentId, targetAgentId).allowed;
}
