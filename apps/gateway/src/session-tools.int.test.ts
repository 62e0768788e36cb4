import { randomUUID } from "node:crypto";
import type { ConfigInput } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import {
  type RunContext,
  startTestGateway,
  type TestGateway,
  TestWorker,
  testStoreKind,
  type WorkerHandler,
} from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

const STORE = testStoreKind();
const WORKER = "worker-token-0123456789";

function config(overrides: Partial<ConfigInput> = {}): ConfigInput {
  return {
    auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
    agents: {
      list: [
        { id: "main", default: true, subagents: { allowAgents: ["research"] } },
        { id: "research" },
        { id: "ops", sandboxed: true },
      ],
    },
    tools: { agentToAgent: { enabled: true, allow: ["*"] } },
    ...overrides,
  };
}

type Result = Record<string, unknown> & { status: string };

let gw: TestGateway;
let op: TestPeer;
const workers: TestWorker[] = [];

async function setup(input: ConfigInput = config(), handler: WorkerHandler = behaviour()) {
  gw = await startTestGateway(input, { store: STORE });
  op = await gw.operator();
  workers.push(await TestWorker.start(gw.url, WORKER, ["main", "research", "ops"], handler));
}

afterEach(async () => {
  // Background flows (reply-back loops, announces) finish while the workers are still there to answer.
  await gw?.gateway.flows.idle();
  for (const worker of workers.splice(0)) worker.close();
  await gw?.close();
});

/** Waits until the worker was assigned a run matching `predicate` (assignment is asynchronous). */
async function assigned(predicate: (run: TestWorker["runs"][number]) => boolean) {
  const event = await workers[0]!.peer.waitForEvent(
    (e) => e.event === "run.assigned" && predicate(e.payload as TestWorker["runs"][number]),
  );
  return event.payload as TestWorker["runs"][number];
}

function tool(as: string, name: string, args: Record<string, unknown> = {}): Promise<Result> {
  return op.call<Result>("tools.invoke", { tool: name, args, as });
}

/** Runs a tool from inside a real run of `sessionKey` (so the caller comes from the run). */
async function toolInRun(sessionKey: string, name: string, args: Record<string, unknown>): Promise<Result> {
  const { runId } = await op.call<{ runId: string }>("agent", {
    sessionKey,
    message: `call ${name} ${JSON.stringify(args)}`,
  });
  const waited = await op.call<{ status: string; reply?: string; error?: string }>("agent.wait", {
    runId,
    timeoutMs: 10_000,
  });
  if (waited.status !== "ok") throw new Error(`run ${waited.status}: ${waited.error}`);
  return JSON.parse(waited.reply!) as Result;
}

async function create(key: string, extra: Record<string, unknown> = {}) {
  return op.call<{ key: string; sessionId: string }>("sessions.create", { key, ...extra });
}

/** Creates `key` bound to `channel` and runs one input there (it takes in the channel's label). */
async function taintWith(key: string, channel: string) {
  await create(key, { channel });
  const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: key, message: "secret" });
  await op.call("agent.wait", { runId });
}

/** Runs `message` as an `agent` input on `sessionKey` and waits for its run to end. */
async function runOn(sessionKey: string, message: string) {
  const { runId } = await op.call<{ runId: string }>("agent", { sessionKey, message });
  return op.call<{ status: string; reply?: string; error?: string }>("agent.wait", {
    runId,
    timeoutMs: 10_000,
  });
}

describe("sessions_list", () => {
  it("accepts any positive activeMinutes (no internal field errors)", async () => {
    await setup();
    await create("main");
    const listed = await tool("main", "sessions_list", { activeMinutes: 1e308 });
    expect(listed).toMatchObject({ status: "ok", count: 1 });
  });

  it("lists rows with kinds derived after the agent prefix, filters kinds, includes messages", async () => {
    await setup();
    await create("main");
    await create("agent:main:discord:group:dev");
    await create("agent:main:cron:nightly");
    await create(`agent:main:hook:${randomUUID()}`);
    await create("agent:main:node-kitchen");
    await create(`agent:main:subagent:${randomUUID()}`);
    await create("agent:main:telegram:dm:42");
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:nightly",
      message: "hello",
    });
    await op.call("agent.wait", { runId });

    const all = await tool("main", "sessions_list", { messageLimit: 5 });
    expect(all.status).toBe("ok");
    const rows = all.sessions as Array<{
      key: string;
      kind: string;
      channel: string;
      messages?: Array<{ role: string }>;
    }>;
    const kinds = Object.fromEntries(rows.map((row) => [row.key, row.kind]));
    expect(kinds).toMatchObject({
      main: "main",
      "agent:main:discord:group:dev": "group",
      "agent:main:cron:nightly": "cron",
      "agent:main:node-kitchen": "node",
      "agent:main:telegram:dm:42": "other",
    });
    expect(rows.filter((row) => row.kind === "hook")).toHaveLength(1);
    expect(rows.filter((row) => row.kind === "subagent")).toHaveLength(1);
    expect(rows.find((row) => row.key === "agent:main:cron:nightly")).toMatchObject({ channel: "internal" });
    expect(rows[0]!.key).toBe("agent:main:cron:nightly");
    expect(rows[0]!.messages?.map((m) => m.role)).toEqual(["user", "assistant"]);
    expect(all.count).toBe(7);

    const crons = await tool("main", "sessions_list", { kinds: ["cron", "bogus"] });
    expect((crons.sessions as unknown[]).length).toBe(1);
    const limited = await tool("main", "sessions_list", { limit: 2 });
    expect((limited.sessions as unknown[]).length).toBe(2);
  });

  it("hides (and counts) rows withheld by agent-to-agent policy and by labels", async () => {
    await setup(
      config({
        tools: { agentToAgent: { enabled: false, allow: [] } },
        labels: { channels: { webchat: "CONFIDENTIAL" } },
      }),
    );
    await create("main");
    await create("agent:research:main");
    await create("agent:main:webchat:dm:carol", { channel: "webchat" });
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:webchat:dm:carol",
      message: "secret",
    });
    await op.call("agent.wait", { runId });
    const listed = await tool("main", "sessions_list");
    const keys = (listed.sessions as Array<{ key: string }>).map((row) => row.key);
    expect(keys).toEqual(["main"]);
    expect(listed.hidden).toBe(2);
    // With agent-to-agent disabled, cross-agent sends and reads are refused, naming the config key.
    const send = await tool("main", "sessions_send", {
      sessionKey: "agent:research:main",
      message: "hi",
      timeoutSeconds: 0,
    });
    expect(send.status).toBe("forbidden");
    expect(send.error).toContain("tools.agentToAgent");
    const read = await tool("main", "sessions_history", { sessionKey: "agent:research:main" });
    expect(read.status).toBe("forbidden");
  });
});

describe("sessions_history", () => {
  // Until session 23 a PRE_TOOL_CALL rule on `tool.args.sessionKey` saw the call's own spelling:
  // `vault`, another case or the sessionId read the session the rule denies.
  it("applies a rule on tool.args.sessionKey to every spelling of that session", async () => {
    await setup(
      config({
        policy: {
          rules: [
            {
              id: "no-vault",
              hook: "PRE_TOOL_CALL",
              action: "deny",
              when: { "tool.name": "sessions_history", "tool.args.sessionKey": "agent:main:vault" },
            },
          ],
        },
      }),
    );
    await create("main");
    const { sessionId } = await create("agent:main:vault");
    for (const spelling of ["agent:main:vault", "vault", "agent:MAIN:vault", "Agent:main:vault", sessionId]) {
      const answer = await tool("main", "sessions_history", { sessionKey: spelling });
      expect(answer.status, spelling).toBe("forbidden");
    }
    expect((await tool("main", "sessions_history", { sessionKey: "main" })).status).toBe("ok");
  });

  it("tells a sandboxed session nothing about keys it may not address, whether a session is there or not", async () => {
    await setup();
    await create("main");
    await create("agent:ops:main");
    await create("agent:ops:cron:elsewhere");
    // Before, a missing key answered not_found and an existing one forbidden: a probe for which exist.
    // Until session 22 the caller's events and the audit chain still told them apart: only a session
    // that was there gave a `policy.blocked` event and record.
    const events = await gw.operator();
    await events.call("events.subscribe", { sessionKey: "agent:ops:main" });
    const seen: Record<string, string[]> = {};
    for (const sessionKey of ["agent:ops:cron:elsewhere", "agent:ops:cron:nothing-here"]) {
      for (const name of ["sessions_history", "session_status", "sessions_send"]) {
        const result = await tool("agent:ops:main", name, { sessionKey, message: "x", timeoutSeconds: 0 });
        expect(result, `${name} ${sessionKey}`).toMatchObject({
          status: "forbidden",
          error: `${sessionKey} is not visible from sandboxed session agent:ops:main (agents.defaults.sandbox.sessionToolsVisibility is "spawned")`,
        });
      }
      const blocked = await until(() => {
        const found = events.events.filter(
          (event) => event.event === "policy.blocked" && event.payload.target === sessionKey,
        );
        return found.length === 3 && found;
      }, `the refusals of ${sessionKey} announced`);
      seen[sessionKey] = blocked.map((event) => `${event.payload.hook} ${event.payload.ruleId}`);
      const audit = await op.call<{ entries: Array<{ kind: string; data: Record<string, unknown> }> }>(
        "audit.tail",
        { limit: 100 },
      );
      expect(
        audit.entries.filter((entry) => entry.kind === "policy.blocked" && entry.data.target === sessionKey),
      ).toHaveLength(3);
    }
    expect(seen["agent:ops:cron:nothing-here"]).toEqual(seen["agent:ops:cron:elsewhere"]);
    // A caller that may address the key still hears that it is not there.
    expect(
      await tool("main", "sessions_history", { sessionKey: "agent:ops:cron:nothing-here" }),
    ).toMatchObject({
      status: "not_found",
    });
    // Named by a sessionId, a session it may not address is one it does not know: the answer is a
    // missing sessionId's, not a refusal naming the session's key.
    const { sessionId } = await op.call<{ sessionId: string }>("sessions.status", {
      sessionKey: "agent:ops:cron:elsewhere",
    });
    for (const id of [sessionId, "6f1c3c2e-0d4b-4c55-9a39-3f0f8f6b7e21"]) {
      for (const name of ["sessions_history", "session_status", "sessions_send"]) {
        const result = await tool("agent:ops:main", name, {
          sessionKey: id,
          message: "x",
          timeoutSeconds: 0,
        });
        expect(result, `${name} ${id}`).toMatchObject({ status: "not_found" });
        expect(JSON.stringify(result)).not.toContain("elsewhere");
      }
    }
  });

  it("answers a caller refused a key the same whatever the session there holds, or if none is there", async () => {
    await setup(
      config({
        tools: { agentToAgent: { enabled: false } },
        labels: { channels: { vault: "RESTRICTED", lobby: "PUBLIC" } },
      }),
    );
    // Sessions holding RESTRICTED data (another agent's, and one the sandboxed agent did not spawn),
    // and another agent's session that may hold only PUBLIC data.
    await taintWith("agent:research:vault:group:notes", "vault");
    await taintWith("agent:ops:vault:group:plans", "vault");
    await create("agent:research:lobby:group:news", { channel: "lobby" });
    // Callers: one that may not read RESTRICTED data, one holding it, a sandboxed one.
    await create("agent:main:lobby:group:hall", { channel: "lobby" });
    await taintWith("agent:main:vault:group:desk", "vault");
    await create("agent:ops:main", { clearance: "PUBLIC" });
    const probes = [
      ["agent:main:lobby:group:hall", "agent:research:vault:group:notes", "tools.agentToAgent.enabled"],
      ["agent:main:vault:group:desk", "agent:research:lobby:group:news", "tools.agentToAgent.enabled"],
      ["agent:ops:main", "agent:ops:vault:group:plans", "agents.defaults.sandbox.sessionToolsVisibility"],
    ] as const;
    const calls = {
      sessions_history: (sessionKey: string) => ({ sessionKey }),
      session_status: (sessionKey: string) => ({ sessionKey }),
      summarize: (sessionKey: string) => ({ sessionKey }),
      sessions_send: (sessionKey: string) => ({ sessionKey, message: "hi", timeoutSeconds: 0 }),
    };
    for (const [caller, existing, configKey] of probes) {
      const missing = `${existing}-nothing-here`;
      for (const [name, args] of Object.entries(calls)) {
        /** The real call's answer and its simulation's, the key asked for written as `<key>`. */
        const answer = async (key: string) => {
          const real = await tool(caller, name, args(key));
          const simulated = await tool(caller, "simulate_tool_call", { tool_name: name, args: args(key) });
          return JSON.parse(JSON.stringify({ real, simulated }).replaceAll(key, "<key>")) as {
            real: Result;
            simulated: Result;
          };
        };
        const there = await answer(existing);
        const what = `${caller} ${name} ${existing}`;
        // Before, a label rule answered first for a session that is there: its taint, read-up or
        // write-down, where a missing key heard the addressing refusal (and simulate: forbidden).
        expect(there.real, what).toMatchObject({ status: "forbidden" });
        expect(String(there.real.error), what).toContain(configKey);
        expect(there.simulated, what).toMatchObject({
          status: "ok",
          decision: "BLOCK",
          message: there.real.error,
        });
        expect(await answer(missing), what).toEqual(there);
      }
    }
  });

  it("drops tool results unless asked, pages with before, and caps output bytes", async () => {
    await setup();
    await create("main");
    await toolInRun("main", "session_status", {});
    const plain = await tool("main", "sessions_history", { sessionKey: "main" });
    const roles = (plain.messages as Array<{ role: string }>).map((m) => m.role);
    expect(roles).not.toContain("toolResult");
    const withTools = await tool("main", "sessions_history", { sessionKey: "main", includeTools: true });
    expect((withTools.messages as Array<{ role: string }>).map((m) => m.role)).toContain("toolResult");

    for (let i = 0; i < 6; i++) {
      const { runId } = await op.call<{ runId: string }>("chat.send", {
        sessionKey: "agent:main:cron:big",
        message: `${i} ${"x".repeat(20_000)}`,
      });
      await op.call("agent.wait", { runId });
    }
    const capped = await tool("main", "sessions_history", { sessionKey: "agent:main:cron:big", limit: 500 });
    expect(capped.truncated).toBe(true);
    expect(JSON.stringify(capped).length).toBeLessThanOrEqual(64 * 1024);
    const page = capped.messages as Array<{ seq: number }>;
    expect(page.length).toBeGreaterThan(0);
    expect(capped.nextBefore).toBe(page[0]!.seq);
    const older = await tool("main", "sessions_history", {
      sessionKey: "agent:main:cron:big",
      before: capped.nextBefore,
      limit: 2,
    });
    const olderSeqs = (older.messages as Array<{ seq: number }>).map((m) => m.seq);
    expect(olderSeqs.every((seq) => seq < (capped.nextBefore as number))).toBe(true);
    expect(olderSeqs).toHaveLength(2);

    expect((await tool("main", "sessions_history", { sessionKey: "agent:main:cron:none" })).status).toBe(
      "not_found",
    );
    expect((await tool("main", "sessions_history", { sessionKey: "../../etc/passwd" })).status).toBe("error");
  });

  it("raises the reader's taint to the target's and refuses a read above clearance", async () => {
    await setup(
      config({
        labels: { channels: { webchat: "CONFIDENTIAL", discord: "PUBLIC" } },
        agents: {
          list: [{ id: "main", default: true, clearance: "CONFIDENTIAL" }, { id: "research" }, { id: "ops" }],
        },
      }),
    );
    await create("main");
    await create("agent:main:discord:group:dev", { channel: "discord" });
    await create("agent:main:webchat:dm:carol", { channel: "webchat" });
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:webchat:dm:carol",
      message: "secret",
    });
    await op.call("agent.wait", { runId });
    expect(await tool("main", "session_status")).toMatchObject({
      taint: "PUBLIC",
      clearance: "CONFIDENTIAL",
    });
    const read = await tool("main", "sessions_history", { sessionKey: "agent:main:webchat:dm:carol" });
    expect(read.status).toBe("ok");
    expect(await tool("main", "session_status")).toMatchObject({ taint: "CONFIDENTIAL" });

    const low = await tool("agent:main:discord:group:dev", "sessions_history", {
      sessionKey: "agent:main:webchat:dm:carol",
    });
    expect(low.status).toBe("forbidden");
    expect(low.error).toContain("CONFIDENTIAL");
  });
});

describe("sessions_send", () => {
  it("stops waiting when the caller cancels the call (tools.cancel), and answers false for no such call", async () => {
    await setup(config({ session: { agentToAgent: { maxPingPongTurns: 0 } } }));
    await create("main");
    await create("agent:main:cron:x");
    const call = op.call<Result>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: "agent:main:cron:x", message: "sleep 2000", timeoutSeconds: 20 },
      as: "main",
      toolCallId: "call-1",
    });
    await assigned((run) => run.input.message === "sleep 2000");
    expect(await op.call("tools.cancel", { toolCallId: "call-1" })).toEqual({ cancelled: true });
    // Ended before the reply (which would have made it `ok`), the run going on.
    expect(await call).toMatchObject({
      status: "timeout",
      error: expect.stringContaining("the run continues"),
    });
    expect(await op.call("tools.cancel", { toolCallId: "call-1" })).toEqual({ cancelled: false });
  });

  it("shows the caller's own main session as main, as history does", async () => {
    await setup(config({ session: { agentToAgent: { maxPingPongTurns: 0 } } }));
    await create("main");
    await create("agent:main:cron:x");
    const history = await tool("agent:main:cron:x", "sessions_history", { sessionKey: "main" });
    expect(history.sessionKey).toBe("main");
    const sent = await tool("agent:main:cron:x", "sessions_send", {
      sessionKey: "main",
      message: "hi",
      timeoutSeconds: 0,
    });
    expect(sent).toMatchObject({ status: "accepted", sessionKey: "main" });
  });

  it("reports accepted, ok, timeout (delivered) and error, and not_found", async () => {
    await setup();
    await create("main");
    await create("agent:research:main");
    const accepted = await tool("main", "sessions_send", {
      sessionKey: "agent:research:main",
      message: "hi",
      timeoutSeconds: 0,
    });
    expect(accepted).toMatchObject({
      status: "accepted",
      sessionKey: "agent:research:main",
      delivery: { status: "delivered" },
    });
    const ok = await tool("main", "sessions_send", {
      sessionKey: "agent:research:main",
      message: "ping",
      timeoutSeconds: 10,
    });
    expect(ok).toMatchObject({ status: "ok", reply: "echo: ping", delivery: { status: "delivered" } });
    const slow = await tool("main", "sessions_send", {
      sessionKey: "agent:research:main",
      message: "sleep 1600",
      timeoutSeconds: 1,
    });
    expect(slow).toMatchObject({ status: "timeout", delivery: { status: "delivered" } });
    const failed = await tool("main", "sessions_send", {
      sessionKey: "agent:research:main",
      message: "fail boom",
      timeoutSeconds: 10,
    });
    expect(failed).toMatchObject({ status: "error", error: "boom" });
    expect(
      (await tool("main", "sessions_send", { sessionKey: "agent:research:nobody", message: "x" })).status,
    ).toBe("not_found");
    expect(
      (await tool("main", "sessions_send", { sessionKey: "agent:research:main", message: "  " })).status,
    ).toBe("error");
  });

  it("records the message as agent-originated with provenance and the context block", async () => {
    await setup();
    await create("main");
    await create("agent:research:main");
    await toolInRun("main", "sessions_send", {
      sessionKey: "agent:research:main",
      message: "hello there",
      timeoutSeconds: 10,
    });
    const run = workers[0]!.runs.find((r) => r.input.message === "hello there")!;
    expect(run.input.context).toContain("Agent-to-agent message context:");
    expect(run.input.context).toContain("Agent 1 (requester) session: agent:main:main.");
    expect(run.input.context).toContain("Agent 2 (target) session: agent:research:main.");
    expect(run.input.provenance).toMatchObject({ kind: "agent", fromSessionKey: "agent:main:main", hop: 1 });
    const history = await op.call<{ messages: Array<{ role: string; provenance?: { kind: string } }> }>(
      "sessions.history",
      {
        sessionKey: "agent:research:main",
      },
    );
    expect(history.messages[0]).toMatchObject({ role: "user", provenance: { kind: "agent" } });
    // A main session has no channel to announce to: no announce run at all.
    await gw.gateway.flows.idle();
    expect(workers[0]!.runs.some((r) => r.input.context.includes("announce step"))).toBe(false);
    // A chat session without a known route gets no announce either, and the skip is on record.
    await create("agent:research:inbox", { chatType: "direct" });
    await tool("main", "sessions_send", {
      sessionKey: "agent:research:inbox",
      message: "note",
      timeoutSeconds: 10,
    });
    await gw.gateway.flows.idle();
    expect(workers[0]!.runs.some((r) => r.input.context.includes("announce step"))).toBe(false);
    const inbox = await gw.gateway.store.sessions.get("agent:research:inbox");
    const events = await gw.gateway.store.transcripts.read(inbox!.sessionId, {
      limit: 10,
      filter: (e) => e.type === "event",
    });
    expect(events.entries.map((e) => e.event?.name)).toContain("announce.skipped");
  });

  it("is forbidden by send policy, a2a, labels, hop limit and cycles", async () => {
    await setup(
      config({
        session: {
          sendPolicy: { rules: [{ action: "deny", match: { channel: "discord", chatType: "group" } }] },
          agentToAgent: { maxHops: 2, maxPingPongTurns: 0 },
        },
        tools: { agentToAgent: { enabled: true, allow: ["main", "research"] } },
        labels: { channels: { discord: "PUBLIC", webchat: "CONFIDENTIAL" } },
      }),
    );
    await create("main");
    await create("agent:main:discord:group:dev", { channel: "discord" });
    await create("agent:ops:main");
    await create("agent:research:main");
    const policy = await tool("main", "sessions_send", {
      sessionKey: "agent:main:discord:group:dev",
      message: "x",
    });
    expect(policy).toMatchObject({ status: "forbidden", error: "send blocked by session policy" });
    const a2a = await tool("main", "sessions_send", { sessionKey: "agent:ops:main", message: "x" });
    expect(a2a.status).toBe("forbidden");
    expect(a2a.error).toContain("tools.agentToAgent");

    // Labels: a CONFIDENTIAL session cannot write into a PUBLIC-clearance session.
    await create("agent:main:webchat:dm:carol", { channel: "webchat" });
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:webchat:dm:carol",
      message: "secret",
    });
    await op.call("agent.wait", { runId });
    await op.call("sessions.patch", { key: "agent:main:discord:group:dev", sendPolicy: "allow" });
    const down = await tool("agent:main:webchat:dm:carol", "sessions_send", {
      sessionKey: "agent:main:discord:group:dev",
      message: "leak",
    });
    expect(down.status).toBe("forbidden");
    expect(down.error).toBe(
      "write-down blocked: session taint CONFIDENTIAL cannot flow to agent:main:discord:group:dev (clearance PUBLIC)",
    );
    const blocked = await op.call<{ messages: Array<{ content: Array<{ text?: string }> }> }>(
      "sessions.history",
      {
        sessionKey: "agent:main:discord:group:dev",
      },
    );
    expect(JSON.stringify(blocked.messages)).not.toContain("leak");

    // Hop limit: main → research → main → research is hop 3 > maxHops 2.
    const nested = JSON.stringify({
      sessionKey: "agent:main:main",
      message: `call sessions_send ${JSON.stringify({ sessionKey: "agent:research:main", message: "deep", timeoutSeconds: 0 })}`,
      timeoutSeconds: 0,
    });
    const chain = await toolInRun("main", "sessions_send", {
      sessionKey: "agent:research:main",
      message: `call sessions_send ${nested}`,
      timeoutSeconds: 10,
    });
    expect(chain.status).toBe("ok");
    const hop2 = JSON.parse(chain.reply as string) as Result;
    expect(hop2.status).toBe("accepted");
    await gw.gateway.flows.idle();
    const deep = workers[0]!.runs.find(
      (r) =>
        r.input.message.startsWith("call sessions_send") &&
        r.sessionKey === "agent:main:main" &&
        r.input.provenance.hop === 2,
    );
    expect(deep).toBeDefined();
    const audit = await op.call<{ entries: Array<{ kind: string; data: { message?: string } }> }>(
      "audit.tail",
      { limit: 100 },
    );
    expect(
      audit.entries.some(
        (e) => e.kind === "policy.blocked" && e.data.message === "agent-to-agent hop limit reached (2)",
      ),
    ).toBe(true);

    // Cycle: main waits on research, research sends back to main with a wait.
    const back = JSON.stringify({ sessionKey: "agent:main:main", message: "loop", timeoutSeconds: 5 });
    const cycle = await toolInRun("main", "sessions_send", {
      sessionKey: "agent:research:main",
      message: `call sessions_send ${back}`,
      timeoutSeconds: 10,
    });
    const inner = JSON.parse(cycle.reply as string) as Result;
    expect(inner.status).toBe("forbidden");
    expect(inner.error).toContain("cycle");
  });

  it("runs exactly primary + maxPingPongTurns reply steps + announce, and stops at REPLY_SKIP", async () => {
    let replySteps = 0;
    await setup(
      config({ session: { agentToAgent: { maxPingPongTurns: 2 } } }),
      behaviour({ replyStep: () => `reply ${++replySteps}`, announceStep: () => "done talking" }),
    );
    await create("main");
    await create("agent:research:discord:group:lab", { channel: "discord" });
    const events = await gw.operator();
    await events.call("events.subscribe", {});
    const sent = await tool("main", "sessions_send", {
      sessionKey: "agent:research:discord:group:lab",
      message: "start",
      timeoutSeconds: 10,
    });
    expect(sent.status).toBe("ok");
    await gw.gateway.flows.idle();
    const runs = workers[0]!.runs.filter(
      (r) => r.sessionKey !== "agent:main:main" || r.input.context.includes("reply step"),
    );
    const steps = runs.map((r) =>
      r.input.context.includes("reply step")
        ? `reply:${r.sessionKey}`
        : r.input.context.includes("announce step")
          ? "announce"
          : "primary",
    );
    expect(steps).toEqual([
      "primary",
      "reply:agent:main:main",
      "reply:agent:research:discord:group:lab",
      "announce",
    ]);
    expect(runs[1]!.input.context).toContain("Turn 1 of 2.");
    const delivery = await events.waitForEvent((e) => e.event === "delivery");
    expect(delivery.payload).toMatchObject({ channel: "discord", to: "lab", text: "done talking" });
  });

  it("stops the loop at once on REPLY_SKIP and posts nothing on ANNOUNCE_SKIP", async () => {
    await setup(config({ session: { agentToAgent: { maxPingPongTurns: 5 } } }));
    await create("main");
    await create("agent:research:discord:group:lab", { channel: "discord" });
    const events = await gw.operator();
    await events.call("events.subscribe", {});
    await tool("main", "sessions_send", {
      sessionKey: "agent:research:discord:group:lab",
      message: "start",
      timeoutSeconds: 10,
    });
    await gw.gateway.flows.idle();
    const contexts = workers[0]!.runs.map((r) => r.input.context.split("\n")[0]);
    expect(contexts).toEqual([
      "Agent-to-agent message context:",
      "Agent-to-agent reply step:",
      "Agent-to-agent announce step:",
    ]);
    expect(events.events.some((e) => e.event === "delivery")).toBe(false);
  });
});

describe("sessions_spawn", () => {
  it("a long runTimeoutSeconds does not time the child out at once", async () => {
    await setup();
    await create("main");
    // 3 000 000 s (~35 days) is a legal timeout; the child must be allowed to finish its 300 ms task.
    const spawned = await tool("main", "sessions_spawn", { task: "sleep 300", runTimeoutSeconds: 3_000_000 });
    expect(spawned.status).toBe("accepted");
    const waited = await op.call<{ status: string; error?: string }>("agent.wait", {
      runId: spawned.runId as string,
      timeoutMs: 10_000,
    });
    expect(waited).toMatchObject({ status: "ok" });
  });

  it("a PRE_SPAWN redaction rewrites the task in the child's context too", async () => {
    await setup(
      config({
        policy: {
          rules: [
            {
              id: "no-keys",
              hook: "PRE_SPAWN",
              priority: 10,
              action: "redact",
              redact: { patterns: ["sk-[A-Za-z0-9]{20,}"] },
            },
          ],
        },
      }),
    );
    await create("main");
    const secret = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const spawned = await tool("main", "sessions_spawn", { task: `use key ${secret} please` });
    expect(spawned.status).toBe("accepted");
    const run = (
      await workers[0]!.peer.waitForEvent(
        (e) => e.event === "run.assigned" && e.payload.sessionKey === spawned.childSessionKey,
      )
    ).payload as RunContext["run"];
    // The message is redacted…
    expect(run.input.message).not.toContain(secret);
    // …and so are the sub-agent context ("Your task: …") and the run record's task.
    expect(run.input.context).not.toContain(secret);
    const stored = await gw.gateway.store.runs.get(spawned.runId as string);
    expect(stored?.spawn?.task).toBe("use key [REDACTED] please");
  });

  it("applies the allowlist: default same agent, named agents case-insensitively, and '*'", async () => {
    await setup(
      config({
        agents: {
          list: [
            { id: "main", default: true, subagents: { allowAgents: ["Research"] } },
            { id: "research" },
            { id: "ops", subagents: { allowAgents: ["*"] } },
          ],
        },
      }),
    );
    await create("main");
    await create("agent:research:main");
    await create("agent:ops:main");
    expect(await tool("main", "sessions_spawn", { task: "t", agentId: "research" })).toMatchObject({
      status: "accepted",
    });
    expect((await tool("main", "sessions_spawn", { task: "t", agentId: "ops" })).status).toBe("forbidden");
    expect((await tool("agent:research:main", "sessions_spawn", { task: "t", agentId: "main" })).status).toBe(
      "forbidden",
    );
    const same = await tool("agent:research:main", "sessions_spawn", { task: "t" });
    expect(same.status).toBe("accepted");
    expect(same.childSessionKey).toMatch(/^agent:research:subagent:[0-9a-f-]{36}$/);
    expect(await tool("agent:ops:main", "sessions_spawn", { task: "t", agentId: "main" })).toMatchObject({
      status: "accepted",
    });
    const model = await tool("main", "sessions_spawn", { task: "t", model: "no-such-model" });
    expect(model).toMatchObject({ status: "accepted", modelApplied: false });
    expect(model.warning).toContain("no-such-model");
  });

  it("restricts the child's tools, refuses nested spawns, and announces the outcome to the requester", async () => {
    await setup(config(), behaviour({ announceStep: () => "ANNOUNCE_SKIP" }));
    await create("main");
    const spawned = await toolInRun("main", "sessions_spawn", {
      task: 'call sessions_spawn {"task":"deeper"}',
      label: "nested",
    });
    expect(spawned.status).toBe("accepted");
    // Assigned once its lane is claimed (a round trip of its own on the PostgreSQL store).
    const childRun = await assigned((r) => r.sessionKey === spawned.childSessionKey);
    const toolNames = (childRun.tools as Array<{ name: string }>).map((t) => t.name);
    expect(toolNames).not.toContain("sessions_send");
    expect(toolNames).not.toContain("sessions_spawn");
    expect(toolNames).toContain("message");
    expect(childRun.input.context).toContain("sub-agent");
    const announce = await assigned((r) => r.input.provenance.kind === "subagent");
    expect(announce.sessionKey).toBe("agent:main:main");
    expect(announce.input.message).toContain('Sub-agent "nested" completed successfully.');
    expect(announce.input.message).toContain("Findings:");
    expect(announce.input.message).toContain("forbidden");
    expect(announce.input.message).toContain(`session ${spawned.childSessionKey}`);

    const tools = await op.call<{ tools: Array<{ name: string }> }>("tools.list", {
      as: spawned.childSessionKey as string,
    });
    expect(tools.tools.map((t) => t.name)).not.toContain("sessions_list");
  });

  it("labels an announce's findings by the child's transcript they came from, even once the child was reset", async () => {
    let childKey: string | undefined;
    const answer = behaviour({ announceStep: () => "ANNOUNCE_SKIP" });
    await setup(config(), async (context) => {
      // The child takes in something CONFIDENTIAL during its run: its findings carry that taint.
      if (context.run.input.message.endsWith("findings"))
        await gw.gateway.sessions.raiseTaint(context.run.sessionKey, "CONFIDENTIAL", "test", "test");
      return answer(context);
    });
    await create("main");
    // The child is reset between its run's end and the announce (its taint back to PUBLIC).
    const announce = gw.gateway.flows.announceSpawn.bind(gw.gateway.flows);
    gw.gateway.flows.announceSpawn = async (record, replyLabel) => {
      await op.call("sessions.reset", { key: record.sessionKey });
      return announce(record, replyLabel);
    };
    const spawned = await tool("main", "sessions_spawn", { task: "findings" });
    childKey = spawned.childSessionKey as string;
    expect(spawned.status).toBe("accepted");
    await assigned((r) => r.input.provenance.kind === "subagent");
    await gw.gateway.flows.idle();
    expect((await op.call<{ taint: string }>("sessions.status", { sessionKey: childKey })).taint).toBe(
      "PUBLIC",
    );
    // Before, the findings came in at the reset child's PUBLIC taint.
    expect((await tool("main", "session_status")).taint).toBe("CONFIDENTIAL");
    // An announce resumed after a restart or taken over reads the label from the run's record; one
    // whose record does not have it (written before records kept it) takes the most the child's
    // old transcript could have held: its clearance.
    gw.gateway.flows.announceSpawn = async (record) => {
      const { endLabel, ...older } = (await gw.gateway.store.runs.get(record.runId))!;
      expect(endLabel).toBe("CONFIDENTIAL");
      await gw.gateway.store.runs.put(older);
      await op.call("sessions.reset", { key: record.sessionKey });
      return announce(older);
    };
    const second = await tool("main", "sessions_spawn", { task: "more findings" });
    childKey = second.childSessionKey as string;
    await assigned(
      (r) => r.input.provenance.kind === "subagent" && r.input.provenance.childSessionKey === childKey,
    );
    await gw.gateway.flows.idle();
    expect((await tool("main", "session_status")).taint).toBe("RESTRICTED");
  });

  it("announces timeouts and failures from the runtime, and deletes the child on cleanup", async () => {
    await setup();
    await create("main");
    const timedOut = await tool("main", "sessions_spawn", { task: "sleep 2500", runTimeoutSeconds: 1 });
    const failed = await tool("main", "sessions_spawn", { task: "fail no data", cleanup: "delete" });
    const first = await assigned(
      (r) => r.input.provenance.kind === "subagent" && r.input.message.includes("failed: no data"),
    );
    const second = await assigned(
      (r) => r.input.provenance.kind === "subagent" && r.input.message.includes("timed out"),
    );
    await gw.gateway.flows.idle();
    const announces = [first.input.message, second.input.message];
    expect(
      announces.some(
        (m) => m.includes(`${timedOut.childSessionKey} timed out.`) && m.includes("(no output)"),
      ),
    ).toBe(true);
    expect(announces.some((m) => m.includes(`${failed.childSessionKey} failed: no data.`))).toBe(true);
    const deleted = await op.request("sessions.status", { sessionKey: failed.childSessionKey as string });
    expect(deleted.error?.code).toBe("NOT_FOUND");
    const kept = await op.call("sessions.status", { sessionKey: timedOut.childSessionKey as string });
    expect(kept).toMatchObject({ status: "ok", spawnedBy: "agent:main:main" });
  });

  it("ends a spawned run interrupted by a restart in exactly one announce", async () => {
    await setup();
    await create("main");
    const spawned = await tool("main", "sessions_spawn", { task: "silent" });
    await workers[0]!.peer.waitForEvent(
      (e) => e.event === "run.assigned" && e.payload.sessionKey === spawned.childSessionKey,
    );
    for (const worker of workers.splice(0)) worker.close();
    await gw.restart();
    op = await gw.operator();
    workers.push(await TestWorker.start(gw.url, WORKER, ["main", "research"], behaviour()));
    await gw.gateway.flows.idle();
    await workers[0]!.peer.waitForEvent(
      (e) =>
        e.event === "run.assigned" &&
        (e.payload.input as { provenance: { kind: string } }).provenance.kind === "subagent",
    );
    const announces = workers[0]!.runs.filter((r) => r.input.provenance.kind === "subagent");
    expect(announces).toHaveLength(1);
    expect(announces[0]!.input.message).toMatch(/failed: gateway (restarted|shutting down)/);
  });
});

describe("status, agents, message and summarize", () => {
  it("does not offer spawning to a session that may not spawn (maxSpawnDepth 0)", async () => {
    await setup(
      config({
        agents: {
          list: [
            { id: "main", default: true, subagents: { allowAgents: ["research"], maxSpawnDepth: 0 } },
            { id: "research" },
            { id: "ops" },
          ],
        },
      }),
    );
    await create("main");
    expect((await tool("main", "sessions_spawn", { task: "t", agentId: "research" })).status).toBe(
      "forbidden",
    );
    expect((await tool("main", "sessions_spawn", { task: "t" })).status).toBe("forbidden");
    const agents = await tool("main", "agents_list");
    const rows = agents.agents as Array<{ id: string; allowedForSpawn: boolean }>;
    expect(rows.filter((row) => row.allowedForSpawn)).toEqual([]);
  });

  it("shows in session_status only the children the caller may discover, as sessions_list does", async () => {
    // Research may be spawned by main, but is outside the agent-to-agent allowlist: main's sessions
    // do not discover research's sessions.
    await setup(config({ tools: { agentToAgent: { enabled: true, allow: ["main"] } } }));
    await create("main");
    await create("agent:main:cron:daily");
    const own = await tool("main", "sessions_spawn", { task: "echo this", label: "own-helper" });
    const cross = await tool("main", "sessions_spawn", {
      task: "echo that",
      agentId: "research",
      label: "acme-acquisition-dd",
    });
    for (const child of [own, cross])
      await op.call("agent.wait", { runId: child.runId as string, timeoutMs: 10_000 });
    await gw.gateway.flows.idle();
    for (const caller of ["agent:main:cron:daily", "main"]) {
      const listed = await tool(caller, "sessions_list");
      const listedKeys = (listed.sessions as Array<{ key: string }>).map((row) => row.key);
      expect(listedKeys).toContain(own.childSessionKey);
      expect(listedKeys).not.toContain(cross.childSessionKey);
      const status = await tool(caller, "session_status", { sessionKey: "main" });
      // Before, every child was listed here, with its key, label and run.
      expect(status.children, caller).toEqual([
        expect.objectContaining({ key: own.childSessionKey, label: "own-helper" }),
      ]);
      expect(JSON.stringify(status)).not.toContain("acme-acquisition-dd");
    }
    // The operator's view is not a session's: it shows every child.
    const operatorView = await op.call<{ children: Array<{ key: string }> }>("sessions.status", {
      sessionKey: "main",
    });
    expect(operatorView.children.map((child) => child.key).sort()).toEqual(
      [own.childSessionKey, cross.childSessionKey].sort(),
    );
  });

  it("reports status with children, lists agents own-first, posts messages and summarises in an isolated run", async () => {
    await setup();
    await create("main");
    const child = await tool("main", "sessions_spawn", { task: "echo this", label: "helper" });
    // The child's announce (a flow its end starts) is in main's transcript before the counts below.
    await op.call("agent.wait", { runId: child.runId as string, timeoutMs: 10_000 });
    await gw.gateway.flows.idle();
    const status = await tool("main", "session_status");
    expect(status).toMatchObject({
      status: "ok",
      sessionKey: "main",
      kind: "main",
      agentId: "main",
      taint: "PUBLIC",
    });
    expect(status.children).toEqual([
      expect.objectContaining({ key: child.childSessionKey, label: "helper" }),
    ]);

    await create("agent:research:main");
    const agents = await tool("agent:research:main", "agents_list");
    expect((agents.agents as Array<{ id: string }>).map((a) => a.id)).toEqual(["research"]);
    const mainAgents = await tool("main", "agents_list");
    expect(mainAgents.agents).toEqual([
      { id: "main", configured: true, connected: true, allowedForSpawn: true },
      { id: "research", configured: true, connected: true, allowedForSpawn: true },
    ]);

    const events = await gw.operator();
    await events.call("events.subscribe", {});
    const posted = await tool("main", "message", { channel: "telegram", to: "42", text: "hello out there" });
    expect(posted.status).toBe("ok");
    const delivery = await events.waitForEvent((e) => e.event === "delivery");
    expect(delivery.payload).toMatchObject({
      channel: "telegram",
      to: "42",
      text: "hello out there",
      deliveryId: posted.deliveryId,
    });

    const historyBefore = await op.call<{ messages: unknown[] }>("sessions.history", {
      sessionKey: "main",
      includeTools: true,
    });
    const summary = await tool("main", "summarize");
    expect(summary.status).toBe("ok");
    expect(summary.summary).toMatch(/^summary: \d+ lines$/);
    const historyAfter = await op.call<{ messages: unknown[] }>("sessions.history", {
      sessionKey: "main",
      includeTools: true,
    });
    // The summary run itself leaves nothing in the transcript; only this tool call's own call/result entries do.
    expect(historyAfter.messages.length).toBe(historyBefore.messages.length + 2);
  });
});

describe("labels and simulation", () => {
  /**
   * `call`, as `main` with `clearance`, on a PUBLIC session whose taint rises to CONFIDENTIAL (a
   * labelled message comes in) between the read of its row and the read of its transcript.
   */
  async function duringRise(call: (targetKey: string) => Promise<Result>, clearance?: string) {
    await setup();
    await create("main");
    if (clearance) await op.call("sessions.patch", { key: "main", clearance });
    const target = await create("agent:main:cron:x");
    await runOn("agent:main:cron:x", "hello");
    const transcripts = gw.gateway.store.transcripts;
    const read = transcripts.read.bind(transcripts);
    let risen = false;
    transcripts.read = async (sessionId, options) => {
      if (sessionId === target.sessionId && !risen) {
        risen = true;
        await gw.gateway.sessions.raiseTaint(target.key, "CONFIDENTIAL", "test", "test");
        await gw.gateway.sessions.append(target.key, [
          {
            type: "message",
            label: "CONFIDENTIAL",
            message: { role: "user", content: [{ type: "text", text: "the secret" }] },
          },
        ]);
      }
      return read(sessionId, options);
    };
    const result = await call(target.key);
    expect(risen).toBe(true);
    return { result, taint: (await tool("main", "session_status")).taint };
  }
  const historyDuringRise = async (clearance?: string) => {
    const { result, taint } = await duringRise(
      (sessionKey) => tool("main", "sessions_history", { sessionKey }),
      clearance,
    );
    return { history: result, taint };
  };

  it("labels history by what it hands over when the target's taint rises during the read", async () => {
    const { history, taint } = await historyDuringRise();
    expect(history).toMatchObject({ status: "ok", dataLabel: "CONFIDENTIAL" });
    expect(JSON.stringify(history.messages)).toContain("the secret");
    expect(taint).toBe("CONFIDENTIAL");
  });

  it("leaves out of list previews a message labelled above the row's taint that came in during the read", async () => {
    const { result, taint } = await duringRise(() => tool("main", "sessions_list", { messageLimit: 5 }));
    const rows = result.sessions as Array<{ key: string; messages?: unknown[] }>;
    const row = rows.find((candidate) => candidate.key === "agent:main:cron:x");
    expect(row?.messages?.length).toBeGreaterThan(0);
    expect(JSON.stringify(result)).not.toContain("the secret");
    expect(result.dataLabel).toBe("PUBLIC");
    expect(taint).toBe("PUBLIC");
  });

  it("refuses history that rose above the caller's clearance during the read (no read-up)", async () => {
    const { history, taint } = await historyDuringRise("INTERNAL");
    expect(history).toMatchObject({ status: "forbidden" });
    expect(JSON.stringify(history)).not.toContain("the secret");
    expect(taint).toBe("PUBLIC");
  });

  /** `main` (with `clearance`, if given) and a CONFIDENTIAL webchat session to send to with a wait. */
  async function confidentialTarget(clearance?: string) {
    await setup(
      config({
        labels: { channels: { webchat: "CONFIDENTIAL" } },
        session: { agentToAgent: { maxPingPongTurns: 0 } },
      }),
    );
    await create("main");
    if (clearance) await op.call("sessions.patch", { key: "main", clearance });
    await taintWith("agent:main:webchat:dm:carol", "webchat");
    const args = { sessionKey: "agent:main:webchat:dm:carol", message: "hi", timeoutSeconds: 10 };
    const simulated = await tool("main", "simulate_tool_call", { tool_name: "sessions_send", args });
    return { simulated, real: await tool("main", "sessions_send", args) };
  }

  it("reports the taint a waiting send would leave (the reply is taken in)", async () => {
    const { simulated, real } = await confidentialTarget();
    expect(real.status).toBe("ok");
    expect(real.dataLabel).toBe("CONFIDENTIAL");
    expect((await tool("main", "session_status")).taint).toBe("CONFIDENTIAL");
    expect(simulated).toMatchObject({
      decision: "ALLOW",
      taint: { current: "PUBLIC", after: "CONFIDENTIAL" },
    });
  });

  it("reports no rise for a waiting send whose reply would be withheld (above the caller's clearance)", async () => {
    const { simulated, real } = await confidentialTarget("INTERNAL");
    expect(real).toMatchObject({ status: "ok", reply: "", withheld: expect.stringContaining("withheld") });
    expect((await tool("main", "session_status")).taint).toBe("PUBLIC");
    expect(simulated).toMatchObject({ decision: "ALLOW", taint: { current: "PUBLIC", after: "PUBLIC" } });
  });

  it("blocks a spawn of an unconfigured agent, as the real call does", async () => {
    await setup(
      config({
        agents: {
          list: [
            { id: "main", default: true, subagents: { allowAgents: ["*"] } },
            { id: "research" },
            { id: "ops" },
          ],
        },
      }),
    );
    await create("main");
    const real = await tool("main", "sessions_spawn", { task: "t", agentId: "ghost" });
    expect(real).toMatchObject({
      status: "forbidden",
      error: 'spawn not allowed: agent "ghost" is not configured',
    });
    const simulated = await tool("main", "simulate_tool_call", {
      tool_name: "sessions_spawn",
      args: { task: "t", agentId: "ghost" },
    });
    expect(simulated).toMatchObject({ decision: "BLOCK", ruleId: "spawn", message: real.error });
  });

  const labelled = () =>
    config({
      labels: { channels: { discord: "PUBLIC", webchat: "CONFIDENTIAL", telegram: "INTERNAL" } },
      agents: {
        list: [
          { id: "main", default: true, subagents: { allowAgents: ["research"] } },
          { id: "research", clearance: "PUBLIC" },
          { id: "ops" },
        ],
      },
    });

  it("does not let `message` past a send-policy chat-type rule by naming a recipient it cannot classify", async () => {
    const dm = "agent:main:discord:dm:alice";
    // "No posts to discord groups": the DM's own chat is direct; any other discord recipient may be one.
    await setup(
      config({
        session: {
          sendPolicy: { rules: [{ action: "deny", match: { channel: "discord", chatType: "group" } }] },
        },
      }),
    );
    await create(dm, { channel: "discord" });
    expect((await tool(dm, "message", { channel: "discord", to: "alice", text: "hi" })).status).toBe("ok");
    expect(await tool(dm, "message", { channel: "discord", to: "dev-team", text: "hi all" })).toMatchObject({
      status: "forbidden",
      error: "send blocked by session policy",
    });
    expect((await tool(dm, "message", { channel: "telegram", to: "42", text: "hi" })).status).toBe("ok");
    // The simulation says what the call would get.
    const simulated = await tool(dm, "simulate_tool_call", {
      tool_name: "message",
      args: { channel: "discord", to: "dev-team", text: "hi all" },
    });
    expect(simulated).toMatchObject({ decision: "BLOCK", ruleId: "send-policy" });
    await gw.close();

    // "Only direct chats": an allow rule naming a chat type does not vouch for an unknown recipient.
    await setup(
      config({
        session: {
          sendPolicy: { default: "deny", rules: [{ action: "allow", match: { chatType: "direct" } }] },
        },
      }),
    );
    await create(dm, { channel: "discord" });
    expect((await tool(dm, "message", { channel: "discord", to: "alice", text: "hi" })).status).toBe("ok");
    expect((await tool(dm, "message", { channel: "discord", to: "dev-team", text: "hi" })).status).toBe(
      "forbidden",
    );
  });

  it("keeps a CONFIDENTIAL session from spawning, messaging or announcing down", async () => {
    await setup(labelled());
    await create("agent:main:webchat:dm:carol", { channel: "webchat" });
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:webchat:dm:carol",
      message: "secret",
    });
    await op.call("agent.wait", { runId });
    const as = "agent:main:webchat:dm:carol";
    const spawn = await tool(as, "sessions_spawn", { task: "t", agentId: "research" });
    expect(spawn.status).toBe("forbidden");
    expect(spawn.error).toContain("CONFIDENTIAL");
    const message = await tool(as, "message", { channel: "discord", to: "dev", text: "leak" });
    expect(message.status).toBe("forbidden");
    expect(message.error).toContain("CONFIDENTIAL");
    expect((await tool(as, "message", { channel: "webchat", to: "carol", text: "fine" })).status).toBe("ok");
    const verify = await op.call<{ ok: boolean }>("audit.verify", {});
    expect(verify.ok).toBe(true);
  });

  it("blocks an announce that would write down, both to a channel and back to a requester", async () => {
    await setup(
      labelled(),
      behaviour({ replyStep: () => "REPLY_SKIP", announceStep: () => "the secret plan, announced" }),
    );
    await create("agent:main:webchat:dm:carol", { channel: "webchat" });
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:webchat:dm:carol",
      message: "secret",
    });
    await op.call("agent.wait", { runId });
    // The PUBLIC lab may hold CONFIDENTIAL data (an operator raised its clearance), so the send passes…
    await create("agent:main:discord:group:lab", { channel: "discord" });
    await op.call("sessions.patch", { key: "agent:main:discord:group:lab", clearance: "CONFIDENTIAL" });
    const events = await gw.operator();
    await events.call("events.subscribe", {});
    const sent = await tool("agent:main:webchat:dm:carol", "sessions_send", {
      sessionKey: "agent:main:discord:group:lab",
      message: "plan",
      timeoutSeconds: 10,
    });
    expect(sent.status).toBe("ok");
    await gw.gateway.flows.idle();
    // …but the lab's announce cannot go out to the PUBLIC discord channel.
    expect(workers[0]!.runs.some((r) => r.input.context.includes("announce step"))).toBe(true);
    // Events reach the subscriber over its socket, possibly after the flow settled on the gateway.
    const blocked = await events.waitForEvent(
      (e) => e.event === "policy.blocked" && e.payload.hook === "PRE_OUTPUT",
    );
    expect(blocked.payload.message).toBe(
      "write-down blocked: session taint CONFIDENTIAL cannot flow to discord:lab (classification PUBLIC)",
    );
    expect(events.events.some((e) => e.event === "delivery" && e.payload.channel === "discord")).toBe(false);

    // A sub-agent that took in CONFIDENTIAL data cannot report it to a requester whose clearance dropped.
    await create("main");
    await tool("main", "sessions_history", { sessionKey: "agent:main:webchat:dm:carol" });
    const child = await tool("main", "sessions_spawn", { task: "sleep 300", agentId: "main" });
    expect(child.status).toBe("accepted");
    await assigned((r) => r.sessionKey === child.childSessionKey);
    expect(await op.call("sessions.status", { sessionKey: child.childSessionKey as string })).toMatchObject({
      taint: "CONFIDENTIAL",
    });
    await op.call("sessions.patch", { key: "main", clearance: "PUBLIC", force: true });
    await op.call("agent.wait", { runId: child.runId as string, timeoutMs: 5000 });
    await gw.gateway.flows.idle();
    const audit = await op.call<{ entries: Array<{ kind: string; data: Record<string, unknown> }> }>(
      "audit.tail",
      { limit: 200 },
    );
    expect(
      audit.entries.some(
        (e) =>
          e.kind === "policy.blocked" &&
          e.data.hook === "PRE_SEND" &&
          String(e.data.message).startsWith(
            "write-down blocked: session taint CONFIDENTIAL cannot flow to agent:main:main",
          ),
      ),
    ).toBe(true);
    expect(workers[0]!.runs.some((r) => r.input.provenance.kind === "subagent")).toBe(false);
  });

  it("simulate returns the decision a real call gets and changes nothing", async () => {
    await setup(labelled());
    await create("main");
    await create("agent:main:discord:group:dev", { channel: "discord" });
    await create("agent:main:webchat:dm:carol", { channel: "webchat" });
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:webchat:dm:carol",
      message: "secret",
    });
    await op.call("agent.wait", { runId });
    await gw.gateway.flows.idle();
    const before = await op.call("sessions.status", { sessionKey: "main" });
    const auditBefore = await op.call<{ entries: unknown[] }>("audit.tail", { limit: 1000 });

    const simulatedRead = await op.call<Result>("policy.simulate", {
      as: "main",
      tool: "sessions_history",
      args: { sessionKey: "agent:main:webchat:dm:carol" },
    });
    expect(simulatedRead).toMatchObject({
      status: "ok",
      decision: "ALLOW",
      taint: { current: "PUBLIC", after: "CONFIDENTIAL" },
    });
    expect((simulatedRead.evaluated as unknown[]).length).toBeGreaterThan(0);
    const simulatedDown = await tool("agent:main:webchat:dm:carol", "simulate_tool_call", {
      tool_name: "sessions_send",
      args: { sessionKey: "agent:main:discord:group:dev", message: "x" },
    });
    expect(simulatedDown).toMatchObject({ decision: "BLOCK", ruleId: "flow.no-write-down" });
    expect(await op.call("sessions.status", { sessionKey: "main" })).toEqual(before);
    const auditAfterSimulate = await op.call<{ entries: unknown[] }>("audit.tail", { limit: 1000 });
    // The only new audit entry is the operator's impersonation for the `as` tool call.
    expect(auditAfterSimulate.entries.length).toBe(auditBefore.entries.length + 1);

    const real = await tool("agent:main:webchat:dm:carol", "sessions_send", {
      sessionKey: "agent:main:discord:group:dev",
      message: "x",
    });
    expect(real.status).toBe("forbidden");
    expect(real.error).toBe(simulatedDown.message);
    const realRead = await tool("main", "sessions_history", { sessionKey: "agent:main:webchat:dm:carol" });
    expect(realRead.status).toBe("ok");
    expect(await op.call("sessions.status", { sessionKey: "main" })).toMatchObject({ taint: "CONFIDENTIAL" });
  });
});

describe("sub-agent archiver", () => {
  it("archives a finished kept child once, through the sessions service, and skips it after", async () => {
    await setup();
    await create("main");
    const child = await tool("main", "sessions_spawn", { task: "say hi", agentId: "main" });
    expect(child.status).toBe("accepted");
    const waited = await op.call<{ status: string }>("agent.wait", { runId: child.runId as string });
    expect(waited.status).toBe("ok");
    await gw.gateway.flows.idle();
    const childKey = child.childSessionKey as string;
    const before = await gw.gateway.store.sessions.get(childKey);
    expect(before?.archivedAt).toBeUndefined();

    // Only runs that ended before the cut-off are swept.
    expect(await gw.gateway.flows.archiveSweep(0)).toBe(0);
    expect(await gw.gateway.flows.archiveSweep(Date.now() + 1)).toBe(1);
    const after = await gw.gateway.store.sessions.get(childKey);
    expect(after?.archivedAt).toBeGreaterThan(0);
    expect(after?.sessionId).toBe(before?.sessionId);
    expect(await gw.gateway.flows.archiveSweep(Date.now() + 1)).toBe(0);
  });

  it("archives each child after its requester agent's own window (agents.list override), never with 0", async () => {
    await setup(
      config({
        agents: {
          list: [
            { id: "main", default: true, subagents: { allowAgents: ["research"], archiveAfterMinutes: 0 } },
            { id: "research", subagents: { archiveAfterMinutes: 1 } },
            { id: "ops", sandboxed: true },
          ],
        },
      }),
    );
    const endedAt = Date.now() - 2 * 24 * 60 * 60_000;
    const children: Record<string, string> = {};
    for (const requester of ["main", "research"]) {
      const childKey = `agent:${requester}:subagent:${randomUUID()}`;
      const created = await create(childKey);
      children[requester] = childKey;
      await gw.gateway.store.runs.put({
        runId: randomUUID(),
        sessionKey: childKey,
        sessionId: created.sessionId,
        agentId: requester,
        lane: "subagent",
        status: "ok",
        createdAt: endedAt - 1000,
        endedAt,
        origin: "spawn",
        message: "t",
        attempts: 1,
        spawn: {
          requesterKey: `agent:${requester}:main`,
          childKey,
          childSessionId: created.sessionId,
          task: "t",
          cleanup: "keep",
          announce: { status: "delivered", attempts: 1, idempotencyKey: `announce:${childKey}` },
        },
      });
    }
    // Two days old: past research's one minute; main's 0 means never (before, both used the default).
    expect(await gw.gateway.flows.archiveSweep()).toBe(1);
    expect((await gw.gateway.store.sessions.get(children.research!))?.archivedAt).toBeGreaterThan(0);
    expect((await gw.gateway.store.sessions.get(children.main!))?.archivedAt).toBeUndefined();
  });
});

describe("spawn and send limits under parallel tool calls", () => {
  it("maxChildren holds when one run spawns in parallel", async () => {
    const statuses: string[] = [];
    const handler: WorkerHandler = async (context) => {
      if (context.run.input.message === "fan out") {
        const results = await Promise.all(
          Array.from({ length: 5 }, () => context.invokeTool("sessions_spawn", { task: "sleep 1500" })),
        );
        statuses.push(...results.map((r) => String(r.status)));
        return "done";
      }
      return behaviour()(context);
    };
    await setup(
      config({
        agents: {
          list: [
            { id: "main", default: true, subagents: { maxChildren: 1 } },
            { id: "research" },
            { id: "ops" },
          ],
        },
      }),
      handler,
    );
    await create("main");
    expect((await runOn("main", "fan out")).status).toBe("ok");
    // agents.defaults.subagents.maxChildren / subagents.maxChildren: at most 1 active child.
    expect(statuses.filter((s) => s === "accepted")).toHaveLength(1);
    expect(statuses.filter((s) => s === "forbidden")).toHaveLength(4);
  });

  it("budgetPerMinute holds when one run sends in parallel", async () => {
    const statuses: string[] = [];
    const handler: WorkerHandler = async (context) => {
      if (context.run.input.message === "fan out") {
        const results = await Promise.all(
          Array.from({ length: 6 }, (_, i) =>
            context.invokeTool("sessions_send", {
              sessionKey: "agent:main:cron:x",
              message: `m${i}`,
              timeoutSeconds: 0,
            }),
          ),
        );
        statuses.push(...results.map((r) => String(r.status)));
        return "done";
      }
      return behaviour()(context);
    };
    await setup(config({ session: { agentToAgent: { budgetPerMinute: 2, maxPingPongTurns: 0 } } }), handler);
    await create("main");
    await create("agent:main:cron:x");
    expect((await runOn("main", "fan out")).status).toBe("ok");
    expect(statuses.filter((s) => s === "accepted")).toHaveLength(2);
    expect(statuses.filter((s) => s === "forbidden")).toHaveLength(4);
  });
});

describe("summarize", () => {
  it("its isolated run (offered no tools) cannot act as the session and restart the hop count", async () => {
    const fromSummary: string[] = [];
    const handler: WorkerHandler = async (context) => {
      const { message, context: injected } = context.run.input;
      if (injected.startsWith("Summarize step")) {
        if (fromSummary.length < 5) {
          const sent = await context.invokeTool("sessions_send", {
            sessionKey: "agent:main:main",
            message: "loop",
            timeoutSeconds: 0,
          });
          fromSummary.push(String(sent.status));
        }
        return "summary";
      }
      if (message === "loop") {
        await context.invokeTool("summarize", { sessionKey: "agent:research:main" });
        return "looped";
      }
      return behaviour()(context);
    };
    await setup(config({ session: { agentToAgent: { maxHops: 1, maxPingPongTurns: 0 } } }), handler);
    await create("main");
    await create("agent:research:main");
    await runOn("main", "loop");
    // Before the fix the loop went on (stopped here by the test's own cap of 5).
    for (let i = 0; i < 50 && fromSummary.length === 0; i++) await new Promise((r) => setTimeout(r, 100));
    await gw.gateway.flows.idle();
    // A summary run is offered no tools, and calling one anyway is refused: it cannot act as the
    // session (before, each of its sends started a fresh chain at hop 1 and the loop ran on).
    expect(fromSummary).toEqual(["forbidden"]);
  });
});
