import { METHOD_NAMES, METHOD_ROLES, type Role } from "@switchboard/core";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type RunContext, startTestGateway, type TestGateway, TestWorker } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";
import { allSessions, settle } from "./gateway-state";

/**
 * Auth (quality-bars.md, protocol.md): every method without a connect or with a bad token is
 * refused; each role gets FORBIDDEN for the methods outside it; an agent worker can act only for the
 * runs it holds and only as their sessions; a client can reach only its own sessions.
 */

const WORKER = "worker-token-0123456789";
const RESEARCH_WORKER = "research-worker-token-0123456789";
const CLIENT = "client-token-0123456789";
const ALICE = "agent:main:webchat:dm:alice";
const BOB = "agent:main:webchat:dm:bob";

let gw: TestGateway;
const workers: TestWorker[] = [];
const peers: TestPeer[] = [];

beforeEach(async () => {
  gw = await startTestGateway(
    {
      auth: {
        tokens: [
          { name: "worker", token: WORKER, role: "agent" },
          { name: "research-worker", token: RESEARCH_WORKER, role: "agent", agents: ["research"] },
          { name: "alice-chat", token: CLIENT, role: "client", sessions: [ALICE] },
        ],
      },
      agents: { list: [{ id: "main", default: true }, { id: "research" }] },
      tools: { agentToAgent: { enabled: true, allow: ["*"] } },
      session: { agentToAgent: { maxPingPongTurns: 0 } },
    },
    { store: "memory", handshakeTimeoutMs: 2000 },
  );
});

afterEach(async () => {
  await settle(gw.gateway).catch(() => undefined);
  for (const worker of workers.splice(0)) worker.close();
  for (const peer of peers.splice(0)) peer.close();
  await gw.close();
});

async function open(): Promise<TestPeer> {
  const peer = await TestPeer.open(gw.url);
  peers.push(peer);
  return peer;
}

async function connect(
  token: string,
  role: Role,
  extra: { agents?: string[]; sessionKey?: string } = {},
): Promise<TestPeer> {
  const peer = await TestPeer.connect(gw.url, { token, role, ...extra });
  peers.push(peer);
  return peer;
}

function connectParams(auth: unknown, role: Role, extra: Record<string, unknown> = {}) {
  return {
    protocol: 1,
    client: { name: "auth-test", version: "0" },
    ...(auth === undefined ? {} : { auth }),
    role,
    ...extra,
  };
}

/**
 * What the store holds: if nothing was written, this does not change. Refusals themselves are
 * audited (bounded per actor), so audit records of refusals are not counted as writes.
 */
async function footprint() {
  const sessions = await allSessions(gw.gateway.store);
  const audit = await gw.gateway.store.audit.read();
  return {
    sessions: sessions.map((entry) => `${entry.key}@${entry.sessionId}:${entry.taint}`).sort(),
    audit: audit.filter((record) => !record.kind.startsWith("access.refused")).length,
    runs: (await gw.gateway.store.runs.list({})).length,
  };
}

describe("unauthenticated and badly authenticated peers", () => {
  it.each(METHOD_NAMES)("refuses %s before connect with UNAUTHORIZED and closes 4001", async (method) => {
    const before = await footprint();
    const peer = await open();
    const response = await peer.request(method, {
      sessionKey: "main",
      key: "agent:main:intruder",
      message: "hi",
      runId: "x",
      tool: "sessions_list",
      args: {},
    });
    expect(response.ok).toBe(false);
    expect(response.error?.code).toBe("UNAUTHORIZED");
    expect((await peer.waitClosed()).code).toBe(4001);
    expect(await footprint()).toEqual(before);
  });

  it("refuses a connect with a wrong, empty, missing or other-role token for every role", async () => {
    const before = await footprint();
    const refusals: Array<[string, unknown, Role, Record<string, unknown>?]> = [
      ["wrong token", { token: "not-a-token-at-all-0123456789" }, "operator"],
      ["wrong token", { token: "not-a-token-at-all-0123456789" }, "agent", { agents: ["main"] }],
      ["wrong token", { token: "not-a-token-at-all-0123456789" }, "client", { sessionKey: ALICE }],
      ["operator token with a suffix", { token: `${gw.token}x` }, "operator"],
      ["worker token as operator", { token: WORKER }, "operator"],
      ["worker token as client", { token: WORKER }, "client", { sessionKey: ALICE }],
      ["client token as operator", { token: CLIENT }, "operator"],
      ["client token as agent", { token: CLIENT }, "agent", { agents: ["main"] }],
      ["client token for another session", { token: CLIENT }, "client", { sessionKey: BOB }],
      ["client token for the main session by alias", { token: CLIENT }, "client", { sessionKey: "main" }],
      ["research worker token serving main", { token: RESEARCH_WORKER }, "agent", { agents: ["main"] }],
    ];
    for (const [why, auth, role, extra] of refusals) {
      const peer = await open();
      const response = await peer.request("connect", connectParams(auth, role, extra));
      expect(response.error?.code, `${why} (${role})`).toBe("UNAUTHORIZED");
      expect((await peer.waitClosed()).code, `${why} (${role})`).toBe(4003);
    }
    // A connect without a usable token is an invalid request naming the field; the peer stays
    // unauthenticated, so its next method is refused and it is dropped.
    for (const auth of [undefined, {}, { token: "" }, { token: 42 }]) {
      const peer = await open();
      const response = await peer.request("connect", connectParams(auth, "operator"));
      expect(response.error?.code, JSON.stringify(auth)).toBe("INVALID_REQUEST");
      expect(response.error?.message, JSON.stringify(auth)).toContain("auth");
      const next = await peer.request("sessions.create", { key: "agent:main:intruder" });
      expect(next.error?.code).toBe("UNAUTHORIZED");
      expect((await peer.waitClosed()).code).toBe(4001);
    }
    expect(await footprint()).toEqual(before);
  });
});

describe("roles", () => {
  it("answers FORBIDDEN for every method outside a role, and writes nothing", async () => {
    const agent = await connect(WORKER, "agent", { agents: ["main"] });
    const client = await connect(CLIENT, "client", { sessionKey: ALICE });
    const operator = await connect(gw.token, "operator");
    const before = await footprint();
    let checked = 0;
    for (const [role, peer] of [
      ["agent", agent],
      ["client", client],
      ["operator", operator],
    ] as const) {
      for (const method of METHOD_NAMES) {
        if (METHOD_ROLES[method].includes(role)) continue;
        const response = await peer.request(method, {
          sessionKey: ALICE,
          key: ALICE,
          message: "hi",
          runId: "x",
        });
        expect(response.error?.code, `${method} as ${role}`).toBe("FORBIDDEN");
        expect(response.error?.message, `${method} as ${role}`).toContain(method);
        checked += 1;
      }
    }
    // 22 methods: the agent role has 7, the client role 5, the operator all but the agent's 3.
    expect(checked).toBe(METHOD_NAMES.length - 7 + (METHOD_NAMES.length - 5) + 3);
    expect(agent.closed ?? client.closed ?? operator.closed).toBeUndefined();
    expect(await footprint()).toEqual(before);
  });
});

describe("agent workers act only for the runs they hold", () => {
  it("refuses tools.invoke, tools.list and run.progress/complete/fail for a run held by another worker", async () => {
    const op = await connect(gw.token, "operator");
    await op.call("sessions.create", { key: "main" });
    await op.call("sessions.create", { key: "agent:research:main" });
    let release: (reply: string) => void = () => undefined;
    const held = new Promise<string>((resolve) => {
      release = resolve;
    });
    const holder = await TestWorker.start(gw.url, WORKER, ["main"], () => held);
    workers.push(holder);
    // Another worker of the same agent, and a worker of another agent.
    const sameAgent = await connect(WORKER, "agent", { agents: ["main"] });
    const otherAgent = await connect(RESEARCH_WORKER, "agent", { agents: ["research"] });
    const { runId } = await op.call<{ runId: string }>("agent", { sessionKey: "main", message: "hold this" });
    await holder.peer.waitForEvent(
      (event) => event.event === "run.assigned" && event.payload.runId === runId,
    );
    const before = await footprint();

    for (const [who, peer] of [
      ["a second worker of the agent", sameAgent],
      ["a worker of another agent", otherAgent],
    ] as const) {
      const attempts: Array<[string, Record<string, unknown>]> = [
        ["tools.invoke", { tool: "sessions_list", args: {}, runId }],
        [
          "tools.invoke",
          { tool: "sessions_send", args: { sessionKey: "agent:research:main", message: "spoofed" }, runId },
        ],
        ["tools.list", { runId }],
        ["run.progress", { runId, kind: "tool-result", name: "x", result: "forged" }],
        ["run.complete", { runId, reply: "forged reply" }],
        ["run.fail", { runId, error: "forged failure" }],
      ];
      for (const [method, params] of attempts) {
        const response = await peer.request(method, params);
        expect(response.error?.code, `${method} by ${who}`).toBe("FORBIDDEN");
      }
      // Without a run, a worker has no identity to act as; `as` is for operators only.
      const asOther = await peer.request("tools.invoke", { tool: "sessions_list", args: {}, as: "main" });
      expect(asOther.ok, `tools.invoke with as by ${who}`).toBe(false);
      expect(asOther.error?.message).toContain("runId");
      // Unknown and made-up run ids are refused the same way.
      expect(
        (await peer.request("run.complete", { runId: "00000000-0000-4000-8000-000000000000", reply: "x" }))
          .error?.code,
      ).toBe("FORBIDDEN");
    }
    expect(await footprint()).toEqual(before);
    const stillRunning = await op.call<{ status: string; error?: string }>("agent.wait", {
      runId,
      timeoutMs: 50,
    });
    expect(stillRunning.status).toBe("timeout");
    expect(stillRunning.error).toContain("still in progress");

    release("the real reply");
    expect(await op.call("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "the real reply",
    });
    // Once the run has ended, not even its worker can act for it any more.
    const late = await holder.peer.request("tools.invoke", { tool: "sessions_list", args: {}, runId });
    expect(late.error?.code).toBe("FORBIDDEN");
    expect((await holder.peer.request("run.complete", { runId, reply: "again" })).error?.code).toBe(
      "FORBIDDEN",
    );
  });

  it("takes the caller from the run: sessionKey/as/caller in tool args or params never change it", async () => {
    const op = await connect(gw.token, "operator");
    await op.call("sessions.create", { key: "main" });
    await op.call("sessions.create", { key: "agent:research:main" });
    await op.call("sessions.create", { key: BOB });
    const results: Record<string, Record<string, unknown>> = {};
    const spoof = {
      as: BOB,
      caller: BOB,
      callerSessionKey: BOB,
      fromSessionKey: BOB,
      runId: "someone-else",
      agentId: "research",
    };
    let self: TestWorker | undefined;
    const worker = await TestWorker.start(
      gw.url,
      WORKER,
      ["main", "research"],
      async (context: RunContext) => {
        if (context.run.sessionKey !== "agent:main:main") return "ok";
        // Raw tools.invoke with spoofing fields both in the params and in the tool args.
        const invoke = (tool: string, args: Record<string, unknown>) =>
          self!.peer.call("tools.invoke", {
            tool,
            args: { ...spoof, ...args },
            runId: context.run.runId,
            as: BOB,
          });
        results.status = await invoke("session_status", {});
        results.send = await invoke("sessions_send", {
          sessionKey: "agent:research:main",
          message: "who am I?",
          timeoutSeconds: 10,
        });
        results.tools = await self!.peer.call("tools.list", { runId: context.run.runId, as: BOB });
        return "done";
      },
    );
    self = worker;
    workers.push(worker);
    const { runId } = await op.call<{ runId: string }>("agent", { sessionKey: "main", message: "go" });
    expect(await op.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
    await settle(gw.gateway);

    expect(results.status).toMatchObject({ status: "ok", sessionKey: "main", agentId: "main" });
    expect(results.send).toMatchObject({ status: "ok" });
    const delivered = worker.runs.find(
      (run) => run.sessionKey === "agent:research:main" && run.input.message === "who am I?",
    )!;
    expect(delivered.input.provenance).toMatchObject({
      kind: "agent",
      fromSessionKey: "agent:main:main",
      fromRunId: runId,
    });
    expect(delivered.input.context).toContain("Agent 1 (requester) session: agent:main:main.");
    // The calls are recorded in the run's own session, and nothing reached the spoofed one.
    const mainHistory = await op.call<{ messages: Array<{ role: string }> }>("sessions.history", {
      sessionKey: "main",
      includeTools: true,
    });
    expect(mainHistory.messages.filter((m) => m.role === "toolCall")).toHaveLength(2);
    const bob = await op.call<{ messages: unknown[] }>("sessions.history", {
      sessionKey: BOB,
      includeTools: true,
    });
    expect(bob.messages).toEqual([]);
    expect((await op.call<{ taint: string }>("sessions.status", { sessionKey: BOB })).taint).toBe("PUBLIC");
  });
});

describe("clients reach only their own sessions", () => {
  it("refuses reading, sending, waiting and subscribing on other sessions, by any alias", async () => {
    const op = await connect(gw.token, "operator");
    const worker = await TestWorker.start(
      gw.url,
      WORKER,
      ["main"],
      ({ run }) => `echo: ${run.input.message}`,
    );
    workers.push(worker);
    await op.call("sessions.create", { key: ALICE });
    const bob = await op.call<{ sessionId: string }>("sessions.create", { key: BOB });
    await op.call("sessions.create", { key: "main" });
    const { runId: bobRun } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: BOB,
      message: "bob's secret",
    });
    await op.call("agent.wait", { runId: bobRun });
    await settle(gw.gateway);

    const client = await connect(CLIENT, "client", { sessionKey: ALICE });
    await client.call("events.subscribe", {});
    const before = await footprint();
    for (const target of [
      BOB,
      bob.sessionId,
      "main",
      "agent:main:main",
      "webchat:dm:bob",
      "agent:research:main",
    ]) {
      for (const [method, params] of [
        ["sessions.history", { sessionKey: target }],
        ["sessions.status", { sessionKey: target }],
        ["chat.send", { sessionKey: target, message: "let me in" }],
        ["events.subscribe", { sessionKey: target }],
      ] as const) {
        const response = await client.request(method, params);
        // Named by its sessionId, a session it may not access is one it does not know (session 22).
        expect(response.error?.code, `${method} ${target}`).toBe(
          target === bob.sessionId ? "NOT_FOUND" : "FORBIDDEN",
        );
      }
    }
    // Another session's run is one it does not know (session 23: FORBIDDEN named bob's session).
    const foreignRun = await client.request("agent.wait", { runId: bobRun, timeoutMs: 10 });
    expect(foreignRun.error).toMatchObject({ code: "NOT_FOUND", message: `run not found: ${bobRun}` });
    expect(await footprint()).toEqual(before);

    // Its own session works, and the events it gets are only its own.
    const { runId } = await client.call<{ runId: string }>("chat.send", {
      sessionKey: ALICE,
      message: "hello",
    });
    expect(await client.call("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "echo: hello",
    });
    const { runId: bobAgain } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: BOB,
      message: "more secrets",
    });
    await op.call("agent.wait", { runId: bobAgain });
    await settle(gw.gateway);
    await client.waitForEvent((event) => event.event === "run.ended" && event.payload.runId === runId);
    const foreign = client.events.filter(
      (event) =>
        JSON.stringify(event.payload).includes(BOB) || JSON.stringify(event.payload).includes("secret"),
    );
    expect(foreign).toEqual([]);
    const history = await client.call<{ messages: Array<{ content: Array<{ text?: string }> }> }>(
      "sessions.history",
      { sessionKey: ALICE },
    );
    expect(JSON.stringify(history.messages)).not.toContain("secret");
  });
});
