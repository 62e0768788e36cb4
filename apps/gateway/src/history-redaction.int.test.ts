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

describe("simulate_tool_call and PRE_HISTORY redact rules", () => {
  type Simulated = {
    status: string;
    decision: string;
    ruleId: string | null;
    message: string;
    evaluated: { ruleId: string; matched: boolean; action: string }[];
  };
  const simulate = (as: string, tool_name: string, args: Record<string, unknown>) =>
    invoke<Simulated>("simulate_tool_call", { tool_name, args }, as);

  // Before: a simulated read reported ALLOW (the redact rule listed as matched), a waiting send did
  // not evaluate the reply's take-in at all, while the real calls rewrote what they handed over.
  it("reports the REDACT a read of another session and a waiting send's reply get", async () => {
    await start();
    const read = await simulate(READER, "sessions_history", { sessionKey: SOURCE, includeTools: true });
    expect(Object.keys(read).sort()).toEqual([
      "decision",
      "evaluated",
      "message",
      "ruleId",
      "status",
      "taint",
    ]);
    expect(read).toMatchObject({ status: "ok", decision: "REDACT", ruleId: "no-keys" });
    expect(read.message).toContain("no-keys");
    expect(read.evaluated).toContainEqual({ ruleId: "no-keys", matched: true, action: "redact" });
    expect(JSON.stringify(read)).not.toContain(SECRET);

    // A summary of another session is taken in as its history is.
    const summary = await simulate(READER, "summarize", { sessionKey: SOURCE });
    expect(summary).toMatchObject({ status: "ok", decision: "REDACT", ruleId: "no-keys" });

    const ask = { sessionKey: SOURCE, message: "what key?", timeoutSeconds: 20 };
    const send = await simulate(READER, "sessions_send", ask);
    expect(send).toMatchObject({ status: "ok", decision: "REDACT", ruleId: "no-keys" });
    expect(send.evaluated).toContainEqual({ ruleId: "no-keys", matched: true, action: "redact" });
    // The real calls: both rewrite with that rule.
    expect(await invoke("sessions_send", ask, READER)).toMatchObject({ reply: "the key is [REDACTED]" });
    const audit = await op.call<{ entries: Array<{ kind: string; data: Record<string, unknown> }> }>(
      "audit.tail",
      { limit: 50 },
    );
    expect(audit.entries).toContainEqual(
      expect.objectContaining({
        kind: "policy.redacted",
        data: expect.objectContaining({ hook: "PRE_HISTORY", ruleId: "no-keys" }),
      }),
    );
  });

  it("reports no REDACT where nothing of another session is handed over", async () => {
    await start();
    // One's own history is not a read of another session; a send that does not wait takes nothing in.
    expect(await simulate(SOURCE, "sessions_history", { sessionKey: SOURCE })).toMatchObject({
      decision: "ALLOW",
    });
    expect(
      await simulate(READER, "sessions_send", { sessionKey: SOURCE, message: "hi", timeoutSeconds: 0 }),
    ).toMatchObject({ decision: "ALLOW" });
    expect(await simulate(SOURCE, "summarize", {})).toMatchObject({ decision: "ALLOW" });
    expect(await simulate(READER, "session_status", { sessionKey: SOURCE })).toMatchObject({
      decision: "ALLOW",
    });
  });
});

describe("a history page rewritten by PRE_HISTORY redact rules", () => {
  // Before: the page was cut to `maxBytes` as stored and then rewritten. The tool's executor cut it
  // again, but the redactions audited were those of the whole read: messages the cut left out were
  // counted on this page and again on the page that handed them over.
  it("is cut to maxBytes as rewritten, pages through every message once and audits each replacement once", async () => {
    const gw = await edge.start(
      {
        auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
        agents: { list: [{ id: "main", default: true }] },
        policy: {
          // 15 000 replacements a read: on a slow, loaded machine past the default 50 ms budget,
          // which would refuse the page (fail closed); the budget is not what this test is about.
          hookBudgetMs: 10_000,
          rules: [
            {
              id: "spell-out",
              hook: "PRE_HISTORY",
              action: "redact",
              redact: { patterns: ["K9"], replacement: "[K9 REDACTED]" },
            },
          ],
        },
      },
      { store: testStoreKind() },
    );
    op = await gw.operator();
    await edge.startWorker(() => "noted", ["main"]);
    for (const key of [SOURCE, READER]) await op.call("sessions.create", { key });
    // 10 × 4.5 KB as stored (one read of 64 KB holds them all), 10 × 19.5 KB as rewritten.
    const sent = 10;
    for (let i = 0; i < sent; i++) {
      const { runId } = await op.call<{ runId: string }>("chat.send", {
        sessionKey: SOURCE,
        message: `message ${i}: ${"K9 ".repeat(1_500)}`,
      });
      await op.call("agent.wait", { runId, timeoutMs: 10_000 });
    }
    type Page = { status: string; messages: { seq: number }[]; truncated: boolean; nextBefore?: number };
    const pages: Page[] = [];
    let before: number | undefined;
    do {
      const page = await invoke<Page>(
        "sessions_history",
        { sessionKey: SOURCE, limit: 500, ...(before !== undefined ? { before } : {}) },
        READER,
      );
      expect(page.status).toBe("ok");
      pages.push(page);
      before = page.nextBefore;
    } while (before !== undefined && pages.length < 20);

    for (const page of pages) expect(Buffer.byteLength(JSON.stringify(page))).toBeLessThanOrEqual(65_536);
    expect(pages.length).toBeGreaterThan(1);
    expect(pages[0]!.truncated).toBe(true);
    const seqs = pages.flatMap((page) => page.messages.map((message) => message.seq));
    expect(new Set(seqs).size).toBe(seqs.length);
    expect(seqs).toHaveLength(2 * sent);
    const shown = JSON.stringify(pages);
    for (let i = 0; i < sent; i++) expect(shown).toContain(`message ${i}: [K9 REDACTED]`);
    expect(shown).not.toMatch(/K9 K9/);

    const handedOver = pages
      .map((page) => JSON.stringify(page).split("[K9 REDACTED]").length - 1)
      .filter((count) => count > 0);
    const audit = await op.call<{
      entries: Array<{ kind: string; sessionKey?: string; data: Record<string, unknown> }>;
    }>("audit.tail", { limit: 200 });
    const audited = audit.entries
      .filter((entry) => entry.kind === "policy.redacted" && entry.sessionKey === READER)
      .map((entry) => entry.data.redactions as number);
    expect(audited.sort()).toEqual(handedOver.sort());
    expect(audited.reduce((sum, count) => sum + count, 0)).toBe(sent * 1_500);
  });
});
