import { describe, expect, it } from "vitest";
import { parseConfig } from "../config/parse-config";
import {
  channelLevel,
  DEFAULT_CLEARANCE,
  type LabelsConfig,
  resolveClearance,
  spawnClearance,
  toolLevel,
} from "./labels-config";
import { escalateTaint } from "./taint";

const labels: LabelsConfig = {
  channels: { discord: "PUBLIC", telegram: "INTERNAL", webchat: "CONFIDENTIAL" },
  recipients: { "telegram:42": "CONFIDENTIAL", "webchat:kiosk": "PUBLIC", "sms:+1555": "INTERNAL" },
  tools: { web_fetch: "INTERNAL" },
};

describe("channelLevel", () => {
  it("is PUBLIC for unlabelled channels and with no labels at all", () => {
    expect(channelLevel(labels, "irc")).toBe("PUBLIC");
    expect(channelLevel(undefined, "webchat", "x")).toBe("PUBLIC");
  });
  it("takes the lower of channel and recipient when both are set", () => {
    expect(channelLevel(labels, "telegram", "42")).toBe("INTERNAL");
    expect(channelLevel(labels, "webchat", "kiosk")).toBe("PUBLIC");
  });
  it("uses whichever of the two is set", () => {
    expect(channelLevel(labels, "telegram", "7")).toBe("INTERNAL");
    expect(channelLevel(labels, "sms", "+1555")).toBe("INTERNAL");
  });
  it("ignores case so a channel cannot dodge its label", () => {
    expect(channelLevel(labels, "WebChat")).toBe("CONFIDENTIAL");
  });
  it("gives a thread the lowest label of its own and of the chats it is in", () => {
    expect(channelLevel(labels, "webchat", "kiosk:thread:9")).toBe("PUBLIC");
    expect(channelLevel(labels, "telegram", "42:thread:1:thread:2")).toBe("INTERNAL");
    const threads: LabelsConfig = {
      recipients: {
        "slack:lobby": "INTERNAL",
        "slack:lobby:thread:1": "RESTRICTED",
        "slack:lobby:thread:2": "PUBLIC",
      },
    };
    expect(channelLevel(threads, "slack", "lobby:thread:1")).toBe("INTERNAL");
    expect(channelLevel(threads, "slack", "lobby:thread:2")).toBe("PUBLIC");
    expect(channelLevel(threads, "slack", "lobby:thread:2:thread:5")).toBe("PUBLIC");
  });
});

describe("toolLevel", () => {
  it("is the configured label, else PUBLIC", () => {
    expect(toolLevel(labels, "web_fetch")).toBe("INTERNAL");
    expect(toolLevel(labels, "other")).toBe("PUBLIC");
    expect(toolLevel(labels, "toString")).toBe("PUBLIC");
  });
});

describe("resolveClearance", () => {
  it("caps outside-channel sessions at the channel", () => {
    expect(resolveClearance({ kind: "group", agentClearance: "CONFIDENTIAL", channelLevel: "PUBLIC" })).toBe(
      "PUBLIC",
    );
    expect(resolveClearance({ kind: "other", agentClearance: "INTERNAL", channelLevel: "RESTRICTED" })).toBe(
      "INTERNAL",
    );
  });
  it("gives main, cron, hook, node and sub-agent sessions the agent's clearance", () => {
    for (const kind of ["main", "cron", "hook", "node", "subagent"] as const) {
      expect(resolveClearance({ kind, agentClearance: "CONFIDENTIAL", channelLevel: "PUBLIC" })).toBe(
        "CONFIDENTIAL",
      );
    }
  });
  it("defaults the agent clearance to RESTRICTED and lets an operator override win", () => {
    expect(DEFAULT_CLEARANCE).toBe("RESTRICTED");
    expect(resolveClearance({ kind: "main", channelLevel: "PUBLIC" })).toBe("RESTRICTED");
    expect(resolveClearance({ kind: "group", channelLevel: "PUBLIC", override: "CONFIDENTIAL" })).toBe(
      "CONFIDENTIAL",
    );
  });
  it("spawns children at min(requester, target agent)", () => {
    expect(spawnClearance("CONFIDENTIAL", "INTERNAL")).toBe("INTERNAL");
    expect(spawnClearance("PUBLIC")).toBe("PUBLIC");
  });
});

describe("escalateTaint", () => {
  it("records an event only on a real rise", () => {
    const cause = { at: 1000, reason: "read history", source: "agent:main:secret" };
    expect(escalateTaint("INTERNAL", "CONFIDENTIAL", cause)).toEqual({
      taint: "CONFIDENTIAL",
      event: {
        at: 1000,
        from: "INTERNAL",
        to: "CONFIDENTIAL",
        reason: "read history",
        source: "agent:main:secret",
      },
    });
    expect(escalateTaint("CONFIDENTIAL", "CONFIDENTIAL", cause)).toEqual({ taint: "CONFIDENTIAL" });
    expect(escalateTaint("CONFIDENTIAL", "PUBLIC", cause)).toEqual({ taint: "CONFIDENTIAL" });
  });
});

// Before session 23 `{"webchat:Guest": "CONFIDENTIAL", "webchat:guest": "PUBLIC"}` loaded, and the
// case-insensitive lookup then gave `Guest` one label and `guest` the other.
describe("label tables in the config", () => {
  it("refuse two names that differ only in case, naming both", () => {
    const parsed = parseConfig.bind(null, {
      labels: { recipients: { "webchat:Guest": "CONFIDENTIAL", "webchat:guest": "PUBLIC" } },
    });
    expect(parsed).toThrow('labels.recipients.webchat:guest: names the same as "webchat:Guest"');
    expect(() => parseConfig({ labels: { channels: { Discord: "PUBLIC", discord: "PUBLIC" } } })).toThrow(
      /labels\.channels\.discord: names the same as "Discord"/,
    );
    expect(
      parseConfig({ labels: { channels: { discord: "PUBLIC", slack: "INTERNAL" } } }).labels.channels,
    ).toEqual({
      discord: "PUBLIC",
      slack: "INTERNAL",
    });
  });
});
