import {
  type Config,
  type RunRecord,
  type SessionEntry,
  TOOL_NAMES,
  type ToolDefinition,
} from "@switchboard/core";
import { toolDefinitions, toolsForSession } from "@switchboard/tools";
import type { SessionsService } from "./sessions-service";

/** Whether a session may call a tool at all (before any policy rule); shared by calls and simulation. */
export type ToolGate = (
  entry: SessionEntry,
  tool: string,
  origin?: RunRecord["origin"],
) => { allowed: boolean; message?: string };

export interface ToolDefinitions {
  list: ToolDefinition[];
  /** The list serialised once, spliced into every `run.assigned` of the same tool set. */
  json: string;
}

const ALWAYS_SUBAGENT_KIND = "subagent";

/** Which tools a session gets (tools.md "What a sub-agent gets") and their definitions. */
export class ToolCatalog {
  /** Definitions are immutable per tool set, so each distinct set (and its JSON) is built once. */
  private readonly definitionCache = new Map<string, ToolDefinitions>();

  constructor(
    private readonly config: Config,
    private readonly sessions: SessionsService,
  ) {}

  /**
   * The tools a session may call right now, in a run of `origin` when given: a summary run is
   * offered none (it condenses a transcript; calling a tool would let it act as the session, and its
   * sends would start chains of their own).
   */
  toolsFor(entry: SessionEntry, origin?: RunRecord["origin"]): string[] {
    if (origin === "summarize") return [];
    const isSubagent = this.sessions.kind(entry) === ALWAYS_SUBAGENT_KIND;
    const agent = this.sessions.agentConfig(entry.agentId);
    const maxSpawnDepth =
      agent?.subagents?.maxSpawnDepth ?? this.config.agents.defaults.subagents.maxSpawnDepth;
    return toolsForSession({
      isSubagent,
      spawnDepth: entry.spawnDepth ?? (isSubagent ? 1 : 0),
      maxSpawnDepth,
      allow: this.config.tools.subagents.tools.allow,
      deny: this.config.tools.subagents.tools.deny,
    });
  }

  definitionsFor(entry: SessionEntry, origin?: RunRecord["origin"]): ToolDefinitions {
    const names = this.toolsFor(entry, origin);
    const cacheKey = names.join(",");
    let definitions = this.definitionCache.get(cacheKey);
    if (!definitions) {
      const list = toolDefinitions(names);
      definitions = { list, json: JSON.stringify(list) };
      this.definitionCache.set(cacheKey, definitions);
    }
    return definitions;
  }

  /** Unknown tool names pass: the executor answers them with its own error. */
  readonly gate: ToolGate = (entry, tool, origin) => {
    if (!(TOOL_NAMES as readonly string[]).includes(tool)) return { allowed: true };
    if (!this.toolsFor(entry, origin).includes(tool)) {
      return {
        allowed: false,
        message:
          origin === "summarize"
            ? `tool ${tool} is not available to a summary run (it is offered no tools)`
            : `tool ${tool} is not available to session ${entry.key}`,
      };
    }
    return { allowed: true };
  };
}
