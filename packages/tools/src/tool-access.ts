import { TOOL_NAMES, type ToolName } from "@switchboard/core";

/** Session tools a sub-agent does not get unless `tools.subagents.tools.allow` names them (tools.md). */
export const SUBAGENT_DEFAULT_DENIED_TOOLS: readonly ToolName[] = [
  "sessions_list",
  "sessions_history",
  "sessions_send",
  "sessions_spawn",
  "session_status",
  "agents_list",
];

export interface ToolAccessInput {
  isSubagent: boolean;
  /** 0 for a top-level session, 1 for its sub-agent, and so on. */
  spawnDepth: number;
  /** `subagents.maxSpawnDepth` of the session's agent: spawning is offered only while spawnDepth < maxSpawnDepth. */
  maxSpawnDepth: number;
  /** `tools.subagents.tools.allow`: null (default) keeps the default set; a list offers exactly the tools it matches. */
  allow?: readonly string[] | null;
  /** `tools.subagents.tools.deny`: always wins over allow. */
  deny?: readonly string[];
}

/**
 * The session tools a session may call, in canonical order: exactly what `tools.list` returns and what
 * the gateway lets through. `allow`/`deny` come from `tools.subagents.tools` and so only shape a
 * sub-agent's list; patterns are exact names, `*` or globs like `sessions_*`, case-insensitive.
 * `sessions_spawn` additionally needs `spawnDepth < maxSpawnDepth`, for every session.
 */
export function toolsForSession(input: ToolAccessInput): ToolName[] {
  const { isSubagent, spawnDepth, maxSpawnDepth } = input;
  const allow = isSubagent ? (input.allow ?? null) : null;
  const deny = isSubagent ? (input.deny ?? []) : [];
  const allowMatchers = allow?.map(globMatcher) ?? null;
  const denyMatchers = deny.map(globMatcher);
  return TOOL_NAMES.filter((name) => {
    if (name === "sessions_spawn" && !(spawnDepth < maxSpawnDepth)) return false;
    if (denyMatchers.some((matches) => matches(name))) return false;
    if (allowMatchers !== null) return allowMatchers.some((matches) => matches(name));
    return !(isSubagent && SUBAGENT_DEFAULT_DENIED_TOOLS.includes(name));
  });
}

function globMatcher(pattern: string): (name: string) => boolean {
  const source = pattern
    .trim()
    .toLowerCase()
    .split("*")
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
    .join(".*");
  const regex = new RegExp(`^${source}$`);
  return (name) => regex.test(name);
}
