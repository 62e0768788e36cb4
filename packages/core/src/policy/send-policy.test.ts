import { describe, expect, it } from "vitest";
import { resolveSendPolicy, type SendPolicyConfig, SendPolicySchema } from "./send-policy";

const group = { key: "agent:main:discord:group:dev", channel: "discord", chatType: "group" as const };
const dm = { key: "agent:main:discord:dm:7", channel: "discord", chatType: "direct" as const };
const cron = { key: "agent:main:cron:nightly" };

describe("resolveSendPolicy", () => {
  it("allows with no policy and with an empty policy", () => {
    expect(resolveSendPolicy(undefined, group).action).toBe("allow");
    expect(resolveSendPolicy({}, group)).toEqual({ action: "allow", reason: "default" });
  });

  it("lets the session override win over everything", () => {
    const denyAll: SendPolicyConfig = { default: "deny", rules: [{ action: "deny" }] };
    expect(resolveSendPolicy(undefined, { ...group, override: "deny" })).toEqual({
      action: "deny",
      reason: "override",
    });
    expect(resolveSendPolicy({ rules: [{ action: "allow" }] }, { ...group, override: "deny" }).action).toBe(
      "deny",
    );
    expect(resolveSendPolicy(denyAll, { ...group, override: "allow" }).action).toBe("allow");
  });

  it("denies discord groups with a channel + chatType rule and leaves discord DMs alone", () => {
    const policy: SendPolicyConfig = {
      rules: [{ action: "deny", match: { channel: "discord", chatType: "group" } }],
    };
    expect(resolveSendPolicy(policy, group)).toEqual({ action: "deny", reason: "rule", matchedRule: 0 });
    expect(resolveSendPolicy(policy, dm).action).toBe("allow");
  });

  it("fails closed on an unknown chat type: a deny rule naming one matches it, an allow rule does not", () => {
    const unknown = { channel: "discord", chatType: "unknown" as const, to: "dev-team" };
    const denyGroups: SendPolicyConfig = {
      rules: [{ action: "deny", match: { channel: "discord", chatType: "group" } }],
    };
    expect(resolveSendPolicy(denyGroups, unknown)).toEqual({
      action: "deny",
      reason: "rule",
      matchedRule: 0,
    });
    expect(resolveSendPolicy(denyGroups, { ...unknown, channel: "telegram" }).action).toBe("allow");
    const onlyDirect: SendPolicyConfig = {
      default: "deny",
      rules: [{ action: "allow", match: { chatType: "direct" } }],
    };
    expect(resolveSendPolicy(onlyDirect, unknown)).toEqual({ action: "deny", reason: "default" });
    expect(resolveSendPolicy(onlyDirect, dm).action).toBe("allow");
  });

  it("derives channel and chat type from the key when they are not given", () => {
    const policy: SendPolicyConfig = {
      rules: [{ action: "deny", match: { channel: "Discord", chatType: "group" } }],
    };
    expect(resolveSendPolicy(policy, { key: "agent:main:discord:group:dev" }).action).toBe("deny");
  });

  it("matches keyPrefix against <rest> and against the full key", () => {
    expect(
      resolveSendPolicy({ rules: [{ action: "deny", match: { keyPrefix: "cron:" } }] }, cron).action,
    ).toBe("deny");
    expect(
      resolveSendPolicy({ rules: [{ action: "deny", match: { keyPrefix: "agent:main:cron:" } }] }, cron)
        .action,
    ).toBe("deny");
    expect(
      resolveSendPolicy({ rules: [{ action: "deny", match: { keyPrefix: "cron:" } }] }, group).action,
    ).toBe("allow");
  });

  it("matches `to` against the recipient", () => {
    const policy: SendPolicyConfig = {
      rules: [{ action: "deny", match: { channel: "telegram", to: "42" } }],
    };
    expect(resolveSendPolicy(policy, { channel: "telegram", to: "42" }).action).toBe("deny");
    expect(resolveSendPolicy(policy, { channel: "telegram", to: "43" }).action).toBe("allow");
    expect(resolveSendPolicy(policy, { channel: "telegram" }).action).toBe("allow");
  });

  it("lets any matching deny beat an earlier allow, and a matching allow beat a deny default", () => {
    const policy: SendPolicyConfig = {
      default: "deny",
      rules: [
        { action: "allow", match: { channel: "discord" } },
        { action: "deny", match: { chatType: "group" } },
      ],
    };
    expect(resolveSendPolicy(policy, group)).toEqual({ action: "deny", reason: "rule", matchedRule: 1 });
    expect(resolveSendPolicy(policy, dm)).toEqual({ action: "allow", reason: "rule", matchedRule: 0 });
    expect(resolveSendPolicy(policy, cron)).toEqual({ action: "deny", reason: "default" });
  });

  it("schema rejects typos and bad actions", () => {
    expect(SendPolicySchema.safeParse({ rules: [{ action: "deny", match: { chanel: "x" } }] }).success).toBe(
      false,
    );
    expect(SendPolicySchema.safeParse({ default: "block" }).success).toBe(false);
    expect(SendPolicySchema.safeParse({ default: "deny", rules: [{ action: "allow" }] }).success).toBe(true);
  });
  it("applies a rule naming a chat to the chat's threads, and a rule naming a thread to that thread only", () => {
    const policy: SendPolicyConfig = {
      rules: [
        { action: "deny", match: { channel: "discord", to: "announcements" } },
        { action: "deny", match: { to: "dev:thread:9" } },
      ],
    };
    const action = (to: string) => resolveSendPolicy(policy, { channel: "discord", to }).action;
    expect(action("announcements")).toBe("deny");
    expect(action("Announcements:Thread:7")).toBe("deny");
    expect(action("announcements:thread:7:thread:1")).toBe("deny");
    expect(action("announcements-old")).toBe("allow");
    expect(action("dev:thread:9")).toBe("deny");
    expect(action("dev")).toBe("allow");
    expect(action("dev:thread:10")).toBe("allow");
  });
});
