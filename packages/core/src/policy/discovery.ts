import { canFlowTo, type Level } from "../labels/level";
import type { SessionVisibility } from "../store/session-visibility";
import { type AgentToAgentConfig, checkAgentToAgent, matchesAnyAgentPattern } from "./agent-to-agent";
import type { SessionFacts } from "./context";
import { discoveryCeiling } from "./flow";

/** The fields of a row that discovery decides on; a store row has them all. */
export interface DiscoveryRow {
  key: string;
  agentId: string;
  taint: Level;
  spawnedBy?: string | undefined;
}

/**
 * `sessions_list` visibility for one caller, compiled once per call so that a list over many rows
 * does not build a policy context per row. `decide(row)` answers with the built-in rules alone
 * (flow.no-read-up for discovery, a2a, visibility): `false` is final; `true` is final only when
 * `exact` (no user rule on PRE_HISTORY and `policy.default` allow), otherwise the row still goes
 * through the engine. A property test holds it equal to `evaluate` on PRE_HISTORY with discovery.
 */
export interface DiscoveryFilter {
  exact: boolean;
  decide(row: DiscoveryRow): boolean;
  /**
   * `decide` as data, for a store to apply in its query: `decide(row) || row.key === caller.key`
   * (the caller always sees its own row). When not `exact`, rows it admits still go through the engine.
   */
  visibility: SessionVisibility;
}

/** Agent ids (as globs) whose rows `checkAgentToAgent` lets the caller see. */
function visibleAgents(
  config: AgentToAgentConfig | undefined,
  callerAgentId: string,
): SessionVisibility["agents"] {
  if (!config?.enabled) return [callerAgentId];
  const patterns = config.allow ?? [];
  if (patterns.length === 0) return "all";
  // Across agents both must be listed: a caller that is not sees only its own agent's rows.
  if (!matchesAnyAgentPattern(patterns, callerAgentId)) return [callerAgentId];
  if (patterns.some((pattern) => pattern.trim() === "*")) return "all";
  return [callerAgentId, ...patterns];
}

export function compileDiscovery(
  settings: {
    agentToAgent?: AgentToAgentConfig | undefined;
    sandboxVisibility?: "spawned" | "all" | undefined;
    defaultAction: "allow" | "deny";
    historyRules: number;
  },
  caller: SessionFacts,
): DiscoveryFilter {
  const agents = new Map<string, boolean>();
  const agentAllowed = (agentId: string): boolean => {
    let allowed = agents.get(agentId);
    if (allowed === undefined) {
      allowed = checkAgentToAgent(settings.agentToAgent, caller.agentId, agentId).allowed;
      agents.set(agentId, allowed);
    }
    return allowed;
  };
  const sandboxed = caller.sandboxed === true && (settings.sandboxVisibility ?? "spawned") === "spawned";
  const ceiling = discoveryCeiling(caller);
  const builtinsPass = (row: DiscoveryRow): boolean =>
    canFlowTo(row.taint, ceiling) &&
    agentAllowed(row.agentId) &&
    (!sandboxed || row.key === caller.key || row.spawnedBy === caller.key);
  const visibility: SessionVisibility = {
    selfKey: caller.key,
    maxTaint: ceiling,
    agents: visibleAgents(settings.agentToAgent, caller.agentId),
    sandboxed,
  };
  if (settings.historyRules === 0 && settings.defaultAction === "deny") {
    return { exact: true, decide: () => false, visibility: { ...visibility, agents: [] } };
  }
  return { exact: settings.historyRules === 0, decide: builtinsPass, visibility };
}
