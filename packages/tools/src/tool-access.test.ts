import { TOOL_NAMES } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { SUBAGENT_DEFAULT_DENIED_TOOLS, toolsForSession } from "./tool-access";

const topLevel = { isSubagent: false, spawnDepth: 0, maxSpawnDepth: 1, allow: null, deny: [] };
const subagent = { isSubagent: true, spawnDepth: 1, maxSpawnDepth: 1, allow: null, deny: [] };

describe("toolsForSession", () => {
  it("gives a top-level session all nine tools", () => {
    expect(toolsForSession(topLevel)).toEqual([...TOOL_NAMES]);
  });

  it("denies the six session tools to a sub-agent by default", () => {
    expect(SUBAGENT_DEFAULT_DENIED_TOOLS).toEqual([
      "sessions_list",
      "sessions_history",
      "sessions_send",
      "sessions_spawn",
      "session_status",
      "agents_list",
    ]);
    expect(toolsForSession(subagent)).toEqual(["message", "simulate_tool_call", "summarize"]);
  });

  it("offers exactly what allow names to a sub-agent, including default-denied tools", () => {
    expect(toolsForSession({ ...subagent, allow: ["sessions_history", "message"] })).toEqual([
      "sessions_history",
      "message",
    ]);
    expect(toolsForSession({ ...subagent, allow: [] })).toEqual([]);
  });

  it("matches allow and deny patterns with * and case-insensitively", () => {
    expect(toolsForSession({ ...subagent, allow: ["SESSIONS_*"] })).toEqual([
      "sessions_list",
      "sessions_history",
      "sessions_send",
    ]);
    expect(toolsForSession({ ...subagent, allow: ["*"], deny: ["session*"] })).toEqual([
      "agents_list",
      "message",
      "simulate_tool_call",
      "summarize",
    ]);
  });

  it("lets deny win over allow and remove default tools", () => {
    expect(toolsForSession({ ...subagent, allow: ["message", "summarize"], deny: ["summarize"] })).toEqual([
      "message",
    ]);
    expect(toolsForSession({ ...subagent, deny: ["message"] })).toEqual(["simulate_tool_call", "summarize"]);
  });

  it("offers sessions_spawn only while spawnDepth < maxSpawnDepth, even when allowed", () => {
    expect(toolsForSession({ ...subagent, allow: ["sessions_spawn"] })).toEqual([]);
    expect(toolsForSession({ ...subagent, maxSpawnDepth: 2, allow: ["sessions_spawn"] })).toEqual([
      "sessions_spawn",
    ]);
    expect(toolsForSession({ ...subagent, spawnDepth: 2, maxSpawnDepth: 2, allow: ["*"] })).not.toContain(
      "sessions_spawn",
    );
    expect(toolsForSession({ ...topLevel, maxSpawnDepth: 0 })).not.toContain("sessions_spawn");
  });

  it("does not apply the sub-agent allow/deny lists to a top-level session", () => {
    expect(toolsForSession({ ...topLevel, allow: ["message"], deny: ["summarize"] })).toEqual([
      ...TOOL_NAMES,
    ]);
  });

  it("treats omitted allow/deny as the defaults", () => {
    expect(toolsForSession({ isSubagent: true, spawnDepth: 1, maxSpawnDepth: 1 })).toEqual([
      "message",
      "simulate_tool_call",
      "summarize",
    ]);
  });
});
