import { describe, expect, it } from "vitest";
import {
  chatTypeFromKey,
  classifyKey,
  deriveChannel,
  displayKey,
  isSessionKind,
  recipientChain,
  SESSION_KINDS,
} from "./classify";

describe("classifyKey", () => {
  it.each([
    ["agent:main:main", "main"],
    ["agent:main:cron:x", "cron"],
    ["agent:main:hook:6f1c", "hook"],
    ["agent:main:node-kitchen", "node"],
    ["agent:research:subagent:1b2c", "subagent"],
    ["agent:main:discord:group:dev", "group"],
    ["agent:main:slack:channel:general", "group"],
    ["agent:main:discord:group:dev:thread:99", "group"],
    ["agent:main:telegram:dm:42", "other"],
    ["agent:main:notes", "other"],
    ["cron:nightly", "cron"],
    ["global", "main"],
    ["unknown", "other"],
  ])("%s is %s", (key, kind) => {
    expect(classifyKey(key)).toBe(kind);
  });

  it("decides on <rest>, so an agent named cron does not make everything cron", () => {
    expect(classifyKey("agent:cron:notes")).toBe("other");
  });

  it("uses the configured main key", () => {
    expect(classifyKey("agent:main:home", { mainKey: "home" })).toBe("main");
    expect(classifyKey("agent:main:main", { mainKey: "home" })).toBe("other");
  });

  it("lets an explicit group/channel chatType win", () => {
    expect(classifyKey("agent:main:whatsapp:123", { chatType: "group" })).toBe("group");
    expect(classifyKey("agent:main:whatsapp:123", "channel")).toBe("group");
    expect(classifyKey("agent:main:whatsapp:123", { chatType: "direct" })).toBe("other");
  });
});

describe("chatTypeFromKey", () => {
  it("reads the chat shape", () => {
    expect(chatTypeFromKey("agent:main:discord:group:dev")).toBe("group");
    expect(chatTypeFromKey("agent:main:slack:channel:x:thread:1")).toBe("channel");
    expect(chatTypeFromKey("agent:main:telegram:dm:42")).toBe("direct");
    expect(chatTypeFromKey("agent:main:main")).toBeUndefined();
  });
});

describe("deriveChannel", () => {
  it("is internal for cron, hook and node sessions even with an entry channel", () => {
    expect(deriveChannel("agent:main:cron:x", { channel: "discord" })).toBe("internal");
    expect(deriveChannel("agent:main:hook:x")).toBe("internal");
    expect(deriveChannel("agent:main:node-k")).toBe("internal");
  });
  it("prefers the entry's channel, then its last channel", () => {
    expect(deriveChannel("agent:main:main", { channel: "WebChat", lastChannel: "telegram" })).toBe("webchat");
    expect(deriveChannel("agent:main:main", { lastChannel: "telegram" })).toBe("telegram");
  });
  it("parses group/channel keys and direct-chat keys", () => {
    expect(deriveChannel("agent:main:discord:group:dev")).toBe("discord");
    expect(deriveChannel("agent:main:telegram:dm:42")).toBe("telegram");
  });
  it("is unknown otherwise", () => {
    expect(deriveChannel("agent:main:main")).toBe("unknown");
    expect(deriveChannel("agent:main:subagent:abc")).toBe("unknown");
  });
});

describe("displayKey", () => {
  it("shows the caller's own main session as main, everything else canonical", () => {
    expect(displayKey("agent:main:main", "agent:main:discord:group:dev")).toBe("main");
    expect(displayKey("agent:research:main", "agent:main:main")).toBe("agent:research:main");
    expect(displayKey("agent:main:home", "agent:main:x", "home")).toBe("main");
    expect(displayKey("agent:main:main")).toBe("agent:main:main");
    expect(displayKey("global", "agent:main:x")).toBe("main");
  });
});

describe("isSessionKind", () => {
  it("accepts exactly the listed kinds, case-sensitively", () => {
    for (const kind of SESSION_KINDS) expect(isSessionKind(kind)).toBe(true);
    expect(isSessionKind("Main")).toBe(false);
    expect(isSessionKind("thread")).toBe(false);
    expect(isSessionKind("")).toBe(false);
  });
});

describe("recipientChain", () => {
  it("lists a thread's recipient, then the chats it is in, innermost first", () => {
    expect(recipientChain("lobby")).toEqual(["lobby"]);
    expect(recipientChain("lobby:thread:42")).toEqual(["lobby:thread:42", "lobby"]);
    expect(recipientChain("lobby:thread:42:Thread:7")).toEqual([
      "lobby:thread:42:Thread:7",
      "lobby:thread:42",
      "lobby",
    ]);
  });
  it("keeps ids that only look like a thread", () => {
    expect(recipientChain("thread:42")).toEqual(["thread:42"]);
    expect(recipientChain("lobby-thread-42")).toEqual(["lobby-thread-42"]);
    expect(recipientChain("+1555")).toEqual(["+1555"]);
  });
});
