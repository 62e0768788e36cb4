import type { ConfigInput } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker, testStoreKind } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";

// keys.md: a `:thread:<id>` suffix keeps the parent's kind. A thread is read by the members of its
// chat, so what the config says of the chat (its recipient label, a send-policy rule naming it)
// must hold in the chat's threads; before, the suffix made the recipient id miss both.

const STORE = testStoreKind();
const WORKER = "worker-token-0123456789";

function config(overrides: Partial<ConfigInput>): ConfigInput {
  return {
    auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
    agents: { list: [{ id: "main", default: true }] },
    ...overrides,
  };
}

type Result = Record<string, unknown> & { status: string; error?: string };

let gw: TestGateway;
let op: TestPeer;
let worker: TestWorker | undefined;

async function setup(input: ConfigInput) {
  gw = await startTestGateway(input, { store: STORE });
  op = await gw.operator();
  worker = await TestWorker.start(gw.url, WORKER, ["main"], behaviour());
}

afterEach(async () => {
  await gw?.gateway.flows.idle();
  worker?.close();
  worker = undefined;
  await gw?.close();
});

const tool = (as: string, name: string, args: Record<string, unknown>) =>
  op.call<Result>("tools.invoke", { tool: name, args, as });

describe("threads of a chat", () => {
  it("take the chat's recipient label: clearance, and no write-down into the thread", async () => {
    await setup(
      config({
        labels: {
          channels: { slack: "CONFIDENTIAL", vault: "CONFIDENTIAL" },
          recipients: { "slack:lobby": "PUBLIC" },
        },
      }),
    );
    const lobby = "agent:main:slack:group:lobby";
    const thread = `${lobby}:thread:42`;
    const nested = `${thread}:thread:7`;
    for (const key of [lobby, thread, nested]) await op.call("sessions.create", { key, channel: "slack" });
    const clearances = await Promise.all(
      [lobby, thread, nested].map(async (key) => {
        const status = await op.call<{ clearance: string }>("sessions.status", { sessionKey: key });
        return status.clearance;
      }),
    );
    expect(clearances).toEqual(["PUBLIC", "PUBLIC", "PUBLIC"]);

    // A CONFIDENTIAL session may not post into the lobby, nor into any thread of it.
    const vault = "agent:main:vault:dm:cfo";
    await op.call("sessions.create", { key: vault, channel: "vault" });
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: vault,
      message: "embargoed",
    });
    await op.call("agent.wait", { runId });
    for (const to of ["lobby", "lobby:thread:42", "LOBBY:Thread:9"]) {
      const sent = await tool(vault, "message", { channel: "slack", to, text: "Q3 -38%" });
      expect(sent.status, to).toBe("forbidden");
      expect(sent.error, to).toContain("write-down blocked");
    }
  });

  it("a thread's own label cannot raise it above its chat; a lower one still applies", async () => {
    await setup(
      config({
        labels: {
          channels: { slack: "RESTRICTED" },
          recipients: {
            "slack:lobby": "INTERNAL",
            "slack:lobby:thread:1": "CONFIDENTIAL",
            "slack:lobby:thread:2": "PUBLIC",
          },
        },
      }),
    );
    const levels: string[] = [];
    for (const suffix of ["", ":thread:1", ":thread:2", ":thread:3"]) {
      const key = `agent:main:slack:group:lobby${suffix}`;
      await op.call("sessions.create", { key, channel: "slack" });
      levels.push((await op.call<{ clearance: string }>("sessions.status", { sessionKey: key })).clearance);
    }
    expect(levels).toEqual(["INTERNAL", "INTERNAL", "PUBLIC", "INTERNAL"]);
  });

  it("are covered by a send-policy rule naming the chat", async () => {
    await setup(
      config({
        session: {
          sendPolicy: { rules: [{ action: "deny", match: { channel: "discord", to: "announcements" } }] },
        },
      }),
    );
    await op.call("sessions.create", { key: "main" });
    const channel = "agent:main:discord:channel:announcements";
    for (const key of [channel, `${channel}:thread:7`]) {
      await op.call("sessions.create", { key, channel: "discord" });
      expect(
        await tool("main", "sessions_send", { sessionKey: key, message: "x", timeoutSeconds: 0 }),
        key,
      ).toMatchObject({
        status: "forbidden",
        error: "send blocked by session policy",
      });
    }
    for (const to of ["announcements", "announcements:thread:7"]) {
      expect(await tool("main", "message", { channel: "discord", to, text: "hi" }), to).toMatchObject({
        status: "forbidden",
        error: "send blocked by session policy",
      });
    }
    // Another chat whose name merely starts the same is not covered.
    expect(
      (await tool("main", "message", { channel: "discord", to: "announcements-old", text: "hi" })).status,
    ).toBe("ok");
  });
});
