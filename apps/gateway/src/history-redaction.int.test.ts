import { describe, expect, it } from "vitest";
import { perTestGateway } from "./testing/per-test-gateway";
import { testStoreKind, WORKER_TOKEN } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";

// labels-and-policy.md: redact rules rewrite content "before it is delivered or returned". Before
// session 21 a redact rule on PRE_HISTORY was refused at config load, since reads rewrote nothing:
// another session's history, list previews and replies handed over every secret as stored. Now the
// texts a read of another session hands over pass through the PRE_HISTORY redact rules.

const SECRET = "sk-live0123456789abcdefghijKLMN";
const SOURCE = "agent:main:discord:group:dev";
const OTHER = "agent:main:discord:group:ops";
const READER = "agent:main:main";

const edge = perTestGateway();
let op: TestPeer;

type History = { status: string; messages: { role: string; content: Record<string, unknown>[] }[] };

async function start() {
  const gw = await edge.start(
    {
      auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
      agents: { list: [{ id: "main", default: true }] },
      session: { agentToAgent: { maxPingPongTurns: 0 } },
      policy: {
        rules: [
          {
            id: "no-keys",
            hook: "PRE_HISTORY",
            action: "redact",
            redact: { patterns: ["sk-[A-Za-z0-9]{20,}"] },
          },
        ],
      },
    },
    { store: testStoreKind() },
  );
  op = await gw.operator();
  await edge.startWorker(
    ({ run }) => (run.input.message === "what key?" ? `the key is ${SECRET}` : "ok"),
    ["main"],
  );
  for (const key of [SOURCE, OTHER, READER]) await op.call("sessions.create", { key });
  // A user message holding the key, and a tool call whose arguments hold it.
  await op.call("chat.send", { sessionKey: SOURCE, message: `deploy with ${SECRET} please` });
  await op.call("tools.invoke", {
    tool: "sessions_send",
    args: { sessionKey: OTHER, message: `fyi ${SECRET}`, timeoutSeconds: 0 },
    as: SOURCE,
  });
}

const invoke = <T>(tool: string, args: Record<string, unknown>, as: string) =>
  op.call<T>("tools.invoke", { tool, args, as });

describe("PRE_HISTORY redact rules", () => {
  it("rewrite another session's history (text and tool arguments), and count the replacements", async () => {
    await start();
    const read = await invoke<History>(
      "sessions_history",
      { sessionKey: SOURCE, includeTools: true },
      READER,
    );
    expect(read.status).toBe("ok");
    const shown = JSON.stringify(read.messages);
    expect(shown).not.toContain(SECRET);
    expect(read.messages[0]?.content[0]).toEqual({ type: "text", text: "deploy with [REDACTED] please" });
    const call = read.messages.find((message) => message.role === "toolCall");
    expect(call?.content[0]).toMatchObject({
      type: "toolCall",
      name: "sessions_send",
      args: { message: "fyi [REDACTED]" },
    });
    const audit = await op.call<{
      entries: Array<{ kind: string; sessionKey?: string; data: Record<string, unknown> }>;
    }>("audit.tail", { limit: 50 });
    expect(audit.entries).toContainEqual(
      expect.objectContaining({
        kind: "policy.redacted",
        sessionKey: READER,
        data: expect.objectContaining({ hook: "PRE_HISTORY", ruleId: "no-keys", redactions: 2 }),
      }),
    );
    // The session's own history is not a read of another session: nothing is rewritten.
    const own = await invoke<History>("sessions_history", { sessionKey: SOURCE }, SOURCE);
    expect(JSON.stringify(own.messages)).toContain(SECRET);
  });

  it("rewrite list previews and a reply taken in from the other session", async () => {
    await start();
    const list = await invoke<{ sessions: { key: string; messages?: History["messages"] }[] }>(
      "sessions_list",
      { messageLimit: 5 },
      READER,
    );
    const row = list.sessions.find((session) => session.key === SOURCE);
    expect(row?.messages?.[0]?.content[0]).toEqual({ type: "text", text: "deploy with [REDACTED] please" });
    expect(JSON.stringify(list)).not.toContain(SECRET);

    const sent = await invoke<{ status: string; reply: string }>(
      "sessions_send",
      { sessionKey: SOURCE, message: "what key?", timeoutSeconds: 20 },
      READER,
    );
    expect(sent).toMatchObject({ status: "ok", reply: "the key is [REDACTED]" });
  });
});
