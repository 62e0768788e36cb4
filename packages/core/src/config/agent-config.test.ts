import { describe, expect, it } from "vitest";
import {
  agentClearance,
  agentConfig,
  archiveWindowMinutes,
  defaultAgentId,
  longestArchiveWindowMinutes,
} from "./agent-config";
import { parseConfig } from "./parse-config";

describe("agent helpers", () => {
  const config = parseConfig({
    agents: {
      defaults: { clearance: "CONFIDENTIAL", subagents: { maxChildren: 3, model: "small-model" } },
      list: [
        { id: "main", subagents: { allowAgents: ["research"] } },
        {
          id: "research",
          default: true,
          clearance: "PUBLIC",
          sandboxed: true,
          timeoutSeconds: 30,
          subagents: { maxSpawnDepth: 2 },
        },
      ],
    },
  });

  it("picks the agent marked default, else the first, else main", () => {
    expect(defaultAgentId(config)).toBe("research");
    expect(defaultAgentId(parseConfig({ agents: { list: [{ id: "alpha" }, { id: "beta" }] } }))).toBe(
      "alpha",
    );
    expect(defaultAgentId(parseConfig({ agents: { list: [] } }))).toBe("main");
    expect(defaultAgentId(parseConfig({}))).toBe("main");
  });

  it("resolves an agent with agents.defaults applied, case-insensitively", () => {
    expect(agentConfig(config, "RESEARCH")).toEqual({
      id: "research",
      default: true,
      clearance: "PUBLIC",
      sandboxed: true,
      timeoutSeconds: 30,
      model: expect.objectContaining({ provider: "scripted" }),
      subagents: {
        allowAgents: ["research"],
        model: "small-model",
        archiveAfterMinutes: 60,
        maxSpawnDepth: 2,
        maxChildren: 3,
      },
    });
    expect(agentConfig(config, "main")).toMatchObject({
      default: false,
      clearance: "CONFIDENTIAL",
      sandboxed: false,
      timeoutSeconds: 600,
      subagents: { allowAgents: ["research"], maxSpawnDepth: 1, maxChildren: 3 },
    });
    expect(agentConfig(config, "nobody")).toBeUndefined();
  });

  it("gives an agent's clearance, falling back to the default for unconfigured agents", () => {
    expect(agentClearance(config, "research")).toBe("PUBLIC");
    expect(agentClearance(config, "Main")).toBe("CONFIDENTIAL");
    expect(agentClearance(config, "nobody")).toBe("CONFIDENTIAL");
    expect(agentClearance(parseConfig({}), "main")).toBe("RESTRICTED");
  });
});

describe("sub-agent archive windows", () => {
  it("takes the requester agent's own archiveAfterMinutes, else the default, and knows the longest", () => {
    const config = parseConfig({
      agents: {
        defaults: { subagents: { archiveAfterMinutes: 60 } },
        list: [
          { id: "main", default: true },
          { id: "slow", subagents: { archiveAfterMinutes: 20_160 } },
        ],
      },
    });
    expect(archiveWindowMinutes(config, "main")).toBe(60);
    expect(archiveWindowMinutes(config, "slow")).toBe(20_160);
    expect(archiveWindowMinutes(config, undefined)).toBe(60);
    expect(longestArchiveWindowMinutes(config)).toBe(20_160);
  });
});
