import { z } from "zod";

/** `tools.agentToAgent`. */
export const AgentToAgentConfigSchema = z.strictObject({
  enabled: z.boolean(),
  /** `*`, an exact agent id, or a glob (`res*`, `team-?`); case-insensitive. Empty = any agent. */
  allow: z.array(z.string().min(1, "must not be empty")).optional(),
});
export type AgentToAgentConfig = z.infer<typeof AgentToAgentConfigSchema>;

/** Case-insensitive whole-string glob match: `*` any run of characters, `?` one character. */
export function matchesAgentPattern(pattern: string, agentId: string): boolean {
  const wanted = pattern.trim().toLowerCase();
  const id = agentId.toLowerCase();
  if (wanted === "*") return true;
  if (!wanted.includes("*") && !wanted.includes("?")) return wanted === id;
  const source = wanted
    .split("")
    .map((char) => (char === "*" ? ".*" : char === "?" ? "." : char.replace(/[\\^$.*+?()[\]{}|/-]/g, "\\$&")))
    .join("");
  return new RegExp(`^${source}$`, "s").test(id);
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
    if (!patterns.some((pattern) => matchesAgentPattern(pattern, agent))) {
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
