import { matchesAnyAgentPattern } from "./agent-to-agent";
import type { SessionFacts } from "./context";

export const DEFAULT_MAX_SPAWN_DEPTH = 1;
export const DEFAULT_MAX_CHILDREN = 5;

/** Spawn limits of one requester agent (`agents.list[].subagents`, over `agents.defaults.subagents`). */
export interface SpawnLimits {
  /** Agents this agent may spawn besides itself: ids, globs, or `*`. Default: only itself. */
  allowAgents?: readonly string[];
  /** Deepest spawn depth a child may have (default 1: sub-agents cannot spawn). */
  maxSpawnDepth?: number;
  /** Most active children per requester session (default 5). */
  maxChildren?: number;
}

export type SpawnLimitsSource =
  | Readonly<Record<string, SpawnLimits>>
  | ((agentId: string) => SpawnLimits | undefined);

export function spawnLimitsFor(source: SpawnLimitsSource | undefined, agentId: string): SpawnLimits {
  if (!source) return {};
  if (typeof source === "function") return source(agentId) ?? {};
  const id = agentId.toLowerCase();
  for (const [key, limits] of Object.entries(source)) if (key.toLowerCase() === id) return limits;
  return {};
}

/** Spawn depth of a session: its recorded depth, else 1 for a sub-agent and 0 for anything else. */
export function spawnDepthOf(session: Pick<SessionFacts, "kind" | "spawnDepth">): number {
  return session.spawnDepth ?? (session.kind === "subagent" ? 1 : 0);
}

/** May `requesterAgentId` spawn `targetAgentId`? Same agent always; else allowAgents (`*` = any). */
export function spawnAgentAllowed(
  allowAgents: readonly string[] | undefined,
  requesterAgentId: string,
  targetAgentId: string,
): boolean {
  if (requesterAgentId.toLowerCase() === targetAgentId.toLowerCase()) return true;
  return matchesAnyAgentPattern(allowAgents ?? [], targetAgentId);
}

export interface SpawnCheckInput {
  requester: Pick<SessionFacts, "key" | "agentId" | "kind" | "spawnDepth">;
  targetAgentId: string;
  /** The configured agents' ids: a spawn of any other is refused. Unset: not checked. */
  configuredAgents?: readonly string[];
  activeChildren?: number;
  limits: SpawnLimits;
  /** Fallbacks when `limits` leaves a number unset. */
  defaults?: { maxSpawnDepth?: number; maxChildren?: number };
}

/**
 * The reason a spawn is refused, or undefined when it is allowed. Depth, then whether the agent is
 * configured, then the allowlist, then the count.
 */
export function spawnProblem(input: SpawnCheckInput): string | undefined {
  const { requester, targetAgentId, limits } = input;
  const maxDepth = limits.maxSpawnDepth ?? input.defaults?.maxSpawnDepth ?? DEFAULT_MAX_SPAWN_DEPTH;
  const maxChildren = limits.maxChildren ?? input.defaults?.maxChildren ?? DEFAULT_MAX_CHILDREN;
  const depth = spawnDepthOf(requester);
  if (depth + 1 > maxDepth) {
    return `spawn not allowed: ${requester.key} is at spawn depth ${depth} and maxSpawnDepth is ${maxDepth}`;
  }
  const target = targetAgentId.toLowerCase();
  if (input.configuredAgents && !input.configuredAgents.some((id) => id.toLowerCase() === target)) {
    return `spawn not allowed: agent "${targetAgentId}" is not configured`;
  }
  if (!spawnAgentAllowed(limits.allowAgents, requester.agentId, targetAgentId)) {
    return (
      `spawn not allowed: agent "${targetAgentId}" is not in the subagents.allowAgents ` +
      `of agent "${requester.agentId}"`
    );
  }
  if (input.activeChildren !== undefined && input.activeChildren >= maxChildren) {
    return (
      `spawn not allowed: ${requester.key} already has ${input.activeChildren} active children ` +
      `(maxChildren ${maxChildren})`
    );
  }
  return undefined;
}
