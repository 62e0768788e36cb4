import { readdir, stat } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import { METHOD_NAMES, TOOL_NAMES } from "@switchboard/core";
import { LAZY_FLUSH_MS } from "@switchboard/store-fs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { behaviour } from "../testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";
import { allSessions, settle, transcriptOf } from "./gateway-state";

/**
 * Bad input (quality-bars.md): every method and every tool answers missing, wrong-typed and oversized
 * parameters with a clear error naming the field; path-like and otherwise unsafe session keys are
 * rejected wherever a key is accepted; and none of it writes anything.
 */

const WORKER = "worker-token-0123456789";
const BAD_KEYS = [
  "../../etc/passwd",
  "agent:main:..",
  "agent:main:.",
  "a/b",
  "a\\b",
  "agent:main:has space",
  "agent:main:tab\there",
  " main",
  "main\n",
  "agent:main:",
  "agent::main",
  `agent:main:${"k".repeat(300)}`,
  "global",
  "agent:main:global",
  "agent:main:zero\u200bwidth",
];

let gw: TestGateway;
let op: TestPeer;
let agentPeer: TestPeer;
let worker: TestWorker;

beforeEach(async () => {
  gw = await startTestGateway(
    {
      auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
      agents: {
        list: [{ id: "main", default: true, subagents: { allowAgents: ["*"] } }, { id: "research" }],
      },
      tools: { agentToAgent: { enabled: true, allow: ["*"] } },
      session: { agentToAgent: { maxPingPongTurns: 0 } },
    },
    { store: "file" },
  );
  op = await gw.operator();
  worker = await TestWorker.start(gw.url, WORKER, ["main", "research"], behaviour());
  agentPeer = worker.peer;
  await op.call("sessions.create", { key: "main" });
  await op.call("sessions.create", { key: "agent:research:main" });
  const { runId } = await op.call<{ runId: string }>("chat.send", {
    sessionKey: "agent:research:main",
    message: "some history",
  });
  await op.call("agent.wait", { runId });
  await settle(gw.gateway);
});

/**
 * The data dir's files once the setup's writes are all on disk: a run's end marks its session's
 * activity in a write the file store gathers for up to LAZY_FLUSH_MS, after `settle` returns.
 */
async function quietFiles(dataDir: string): Promise<Record<string, number>> {
  await new Promise((resolve) => setTimeout(resolve, LAZY_FLUSH_MS * 3));
  return files(dataDir);
}

afterEach(async () => {
  await settle(gw.gateway).catch(() => undefined);
  worker.close();
  await gw.close();
});

/** Every file of the data dir with its size (the meta store's periodic event-seq checkpoint excluded). */
async function files(root: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const walk = async (dir: string) => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else out[relative(root, path)] = (await stat(path)).size;
    }
  };
  await walk(root);
  for (const name of Object.keys(out)) if (name.startsWith("meta")) delete out[name];
  return out;
}

/** Sessions (with ids, taints and transcript lengths), runs and audit entries. */
async function footprint() {
  const sessions: Record<string, string> = {};
  for (const entry of await allSessions(gw.gateway.store)) {
    sessions[entry.key] =
      `${entry.sessionId} ${entry.taint} ${entry.clearance} ${entry.sendPolicy ?? ""} ${(await transcriptOf(gw.gateway.store, entry.sessionId)).length}`;
  }
  return {
    sessions,
    runs: (await gw.gateway.store.runs.list({})).length,
    audit: await gw.gateway.store.audit.count(),
  };
}

async function expectInvalid(peer: TestPeer, method: string, params: unknown, field: string) {
  const response = await peer.request(method, params as Record<string, unknown>);
  const label = `${method} ${JSON.stringify(params).slice(0, 120)}`;
  expect(response.ok, label).toBe(false);
  expect(response.error?.code, `${label}: ${response.error?.message}`).toBe("INVALID_REQUEST");
  expect(response.error?.message, label).toContain(field);
}

/** Arrays nested `depth` levels deep. */
function nested(depth: number): unknown {
  let value: unknown = [];
  for (let level = 1; level < depth; level++) value = [value];
  return value;
}

describe("methods", () => {
  it("refuse missing, wrong-typed and oversized params with INVALID_REQUEST naming the field, writing nothing", async () => {
    const filesBefore = await quietFiles(gw.dataDir);
    const before = await footprint();
    const long = (n: number) => "x".repeat(n);
    const cases: Array<[TestPeer, string, unknown, string]> = [
      [op, "sessions.list", { limit: "ten" }, "limit"],
      [op, "sessions.list", { kinds: "main" }, "kinds"],
      [op, "sessions.list", { search: long(300) }, "search"],
      [op, "sessions.list", { agentId: 7 }, "agentId"],
      [op, "sessions.resolve", {}, "exactly one of key, sessionId, label"],
      [op, "sessions.resolve", { key: 5 }, "key"],
      [op, "sessions.resolve", { label: long(65) }, "label"],
      [op, "sessions.history", {}, "sessionKey"],
      [op, "sessions.history", { sessionKey: 42 }, "sessionKey"],
      [op, "sessions.history", { sessionKey: long(600) }, "sessionKey"],
      [op, "sessions.history", { sessionKey: "main", limit: "50" }, "limit"],
      [op, "sessions.history", { sessionKey: "main", includeTools: "yes" }, "includeTools"],
      [op, "sessions.status", {}, "sessionKey"],
      [op, "sessions.create", {}, "key"],
      [op, "sessions.create", { key: ["main"] }, "key"],
      [op, "sessions.create", { key: "agent:main:cron:new", chatType: "dm" }, "chatType"],
      [op, "sessions.create", { key: "agent:main:cron:new", clearance: "secret" }, "clearance"],
      [op, "sessions.create", { key: "agent:main:cron:new", label: long(65) }, "label"],
      [op, "sessions.create", { key: "agent:main:cron:new", channel: long(65) }, "channel"],
      [op, "sessions.patch", {}, "key"],
      [op, "sessions.patch", { key: "main", sendPolicy: "maybe" }, "sendPolicy"],
      [op, "sessions.patch", { key: "main", displayName: long(201) }, "displayName"],
      [op, "sessions.reset", {}, "key"],
      [op, "sessions.delete", { key: null }, "key"],
      [op, "chat.send", {}, "sessionKey"],
      [op, "chat.send", { sessionKey: "main" }, "message"],
      [op, "chat.send", { sessionKey: "main", message: "" }, "message"],
      [op, "chat.send", { sessionKey: "main", message: 12 }, "message"],
      [op, "chat.send", { sessionKey: "main", message: long(1_000_001) }, "message"],
      [op, "chat.send", { sessionKey: "main", message: "hi", idempotencyKey: long(300) }, "idempotencyKey"],
      [op, "agent", { sessionKey: "main", message: "hi", lane: "fast" }, "lane"],
      [op, "agent", { sessionKey: "main", message: "hi", timeoutSeconds: -1 }, "timeoutSeconds"],
      [op, "agent", { sessionKey: "main", message: "hi", timeoutSeconds: "10" }, "timeoutSeconds"],
      [op, "agent.wait", {}, "runId"],
      [op, "agent.wait", { runId: "r", timeoutMs: "5" }, "timeoutMs"],
      [op, "agent.wait", { runId: "r", timeoutMs: 1e9 }, "timeoutMs"],
      [op, "agent.wait", { runId: long(200) }, "runId"],
      [op, "runs.list", { statuses: ["finished"] }, "statuses"],
      [op, "runs.list", { limit: 201 }, "limit"],
      [op, "runs.list", { sessionKey: "../../etc/passwd" }, "sessionKey"],
      [op, "agents.list", [1, 2], "params"],
      [op, "tools.list", { runId: 5 }, "runId"],
      [op, "tools.list", { as: 5 }, "as"],
      [op, "tools.invoke", {}, "tool"],
      [op, "tools.invoke", { tool: 5, as: "main" }, "tool"],
      [op, "tools.invoke", { tool: long(200), as: "main" }, "tool"],
      [op, "tools.invoke", { tool: "sessions_list", args: [], as: "main" }, "args"],
      [op, "tools.invoke", { tool: "sessions_list", args: "limit=5", as: "main" }, "args"],
      [op, "tools.cancel", {}, "toolCallId"],
      [op, "tools.cancel", { toolCallId: long(200) }, "toolCallId"],
      [op, "policy.simulate", {}, "as"],
      [op, "policy.simulate", { as: "main", tool: "" }, "tool"],
      [op, "policy.simulate", { as: "main", tool: "sessions_list", args: 3 }, "args"],
      [op, "audit.tail", { limit: 0 }, "limit"],
      [op, "audit.tail", { limit: 5000 }, "limit"],
      [op, "audit.tail", { after: "last" }, "after"],
      [op, "audit.verify", "everything", "params"],
      [op, "events.subscribe", { after: -5 }, "after"],
      [op, "events.subscribe", { sessionKey: 5 }, "sessionKey"],
      [agentPeer, "run.progress", {}, "runId"],
      [agentPeer, "run.progress", { runId: "r", kind: "bogus" }, "kind"],
      [agentPeer, "run.complete", { runId: "r" }, "reply"],
      [agentPeer, "run.complete", { runId: "r", reply: "x", usage: { inputTokens: "many" } }, "usage"],
      [agentPeer, "run.fail", { runId: "r", error: long(10_001) }, "error"],
      [agentPeer, "tools.invoke", { tool: "sessions_list", args: [1] }, "args"],
      // Too deep to serialise when the call is recorded (after it ran): refused before.
      [op, "tools.invoke", { tool: "sessions_list", args: { pad: nested(1_000) }, as: "main" }, "args"],
      [op, "policy.simulate", { as: "main", tool: "sessions_list", args: { pad: nested(100) } }, "args"],
      [agentPeer, "tools.invoke", { tool: "sessions_list", args: { pad: nested(65) } }, "args"],
      [agentPeer, "run.progress", { runId: "r", kind: "tool-call", args: { pad: nested(100) } }, "args"],
      [agentPeer, "run.progress", { runId: "r", kind: "tool-result", result: nested(100) }, "result"],
      // Ids and names that become metric labels and span attributes are bounded.
      [agentPeer, "run.progress", { runId: "r", kind: "tool-call", name: long(129) }, "name"],
      [agentPeer, "run.progress", { runId: long(200), kind: "text-delta" }, "runId"],
      [agentPeer, "run.complete", { runId: long(200), reply: "x" }, "runId"],
      [agentPeer, "run.fail", { runId: long(200), error: "x" }, "runId"],
      [agentPeer, "tools.list", { runId: long(200) }, "runId"],
      [agentPeer, "tools.invoke", { tool: "sessions_list", runId: long(200) }, "runId"],
    ];
    for (const [peer, method, params, field] of cases) await expectInvalid(peer, method, params, field);
    // Every method of the protocol got at least one bad-input case.
    const covered = new Set(cases.map(([, method]) => method));
    expect(METHOD_NAMES.filter((method) => !covered.has(method))).toEqual([]);

    await settle(gw.gateway);
    expect(await footprint()).toEqual(before);
    expect(await files(gw.dataDir)).toEqual(filesBefore);
  });

  it("reject path-like and unsafe session keys wherever a key is accepted, writing nothing", async () => {
    const filesBefore = await quietFiles(gw.dataDir);
    const before = await footprint();
    const takesKey: Array<[string, (key: string) => Record<string, unknown>, string]> = [
      ["sessions.create", (key) => ({ key }), "key"],
      ["sessions.patch", (key) => ({ key, displayName: "x" }), "key"],
      ["sessions.reset", (key) => ({ key }), "key"],
      ["sessions.delete", (key) => ({ key }), "key"],
      ["sessions.resolve", (key) => ({ key }), "key"],
      ["sessions.history", (sessionKey) => ({ sessionKey }), "sessionKey"],
      ["sessions.status", (sessionKey) => ({ sessionKey }), "sessionKey"],
      ["sessions.list", (spawnedBy) => ({ spawnedBy }), "spawnedBy"],
      ["chat.send", (sessionKey) => ({ sessionKey, message: "hello" }), "sessionKey"],
      ["agent", (sessionKey) => ({ sessionKey, message: "hello" }), "sessionKey"],
      ["events.subscribe", (sessionKey) => ({ sessionKey }), "sessionKey"],
      ["tools.list", (as) => ({ as }), "as"],
      ["tools.invoke", (as) => ({ as, tool: "sessions_list", args: {} }), "as"],
      ["policy.simulate", (as) => ({ as, tool: "sessions_list", args: {} }), "as"],
    ];
    for (const key of BAD_KEYS) {
      for (const [method, params, field] of takesKey) await expectInvalid(op, method, params(key), field);
    }
    await settle(gw.gateway);
    expect(await footprint()).toEqual(before);
    expect(await files(gw.dataDir)).toEqual(filesBefore);
    // Nothing escaped the data dir either.
    const parent = await readdir(dirname(gw.dataDir));
    expect(parent.filter((name) => name === "etc" || name.includes("passwd"))).toEqual([]);
  });

  it("rejects a path-like session key in a client connect", async () => {
    for (const key of ["../../etc/passwd", "agent:main:..", "a/b", "agent:main:has space", "global"]) {
      const peer = await TestPeer.open(gw.url);
      const response = await peer.request("connect", {
        protocol: 1,
        client: { name: "bad-input", version: "0" },
        auth: { token: gw.token },
        role: "client",
        sessionKey: key,
      });
      expect(response.ok, `connect as client for ${JSON.stringify(key)}`).toBe(false);
      expect(response.error?.message, key).toContain("sessionKey");
      peer.close();
    }
  });
});

describe("tools", () => {
  it("answer bad arguments with status error naming the parameter, and bad keys likewise, changing nothing else", async () => {
    const long = (n: number) => "x".repeat(n);
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ["sessions_list", { limit: "ten" }, "limit"],
      ["sessions_list", { kinds: "main" }, "kinds"],
      ["sessions_list", { activeMinutes: "5" }, "activeMinutes"],
      ["sessions_list", { messageLimit: true }, "messageLimit"],
      ["sessions_history", {}, "sessionKey"],
      ["sessions_history", { sessionKey: 5 }, "sessionKey"],
      ["sessions_history", { sessionKey: "agent:research:main", limit: "5" }, "limit"],
      ["sessions_history", { sessionKey: "agent:research:main", before: 0 }, "before"],
      ["sessions_history", { sessionKey: "agent:research:main", includeTools: "yes" }, "includeTools"],
      ["sessions_send", {}, "sessionKey"],
      ["sessions_send", { sessionKey: "agent:research:main" }, "message"],
      ["sessions_send", { sessionKey: "agent:research:main", message: "   " }, "message"],
      ["sessions_send", { sessionKey: "agent:research:main", message: ["hi"] }, "message"],
      [
        "sessions_send",
        { sessionKey: "agent:research:main", message: "hi", timeoutSeconds: "5" },
        "timeoutSeconds",
      ],
      ["sessions_spawn", {}, "task"],
      ["sessions_spawn", { task: 5 }, "task"],
      ["sessions_spawn", { task: "t", label: long(65) }, "label"],
      ["sessions_spawn", { task: "t", cleanup: "burn" }, "cleanup"],
      ["sessions_spawn", { task: "t", runTimeoutSeconds: "5" }, "runTimeoutSeconds"],
      ["sessions_spawn", { task: "t", agentId: 5 }, "agentId"],
      ["session_status", { sessionKey: 5 }, "sessionKey"],
      ["agents_list", { unknown: "ignored" }, ""],
      ["message", {}, "channel"],
      ["message", { channel: "discord" }, "to"],
      ["message", { channel: "discord", to: "dev" }, "text"],
      ["message", { channel: 5, to: "dev", text: "hi" }, "channel"],
      ["message", { channel: " ", to: "dev", text: "hi" }, "channel"],
      ["simulate_tool_call", {}, "tool_name"],
      ["simulate_tool_call", { tool_name: "" }, "tool_name"],
      ["simulate_tool_call", { tool_name: "sessions_list", args: [] }, "args"],
      ["simulate_tool_call", { tool_name: "sessions_list", args: "all" }, "args"],
      ["summarize", { scope: "everything" }, "scope"],
      ["summarize", { sessionKey: 5 }, "sessionKey"],
    ];
    for (const key of BAD_KEYS) {
      cases.push(["sessions_history", { sessionKey: key }, "sessionKey"]);
      cases.push(["sessions_send", { sessionKey: key, message: "hi", timeoutSeconds: 0 }, "sessionKey"]);
      cases.push(["session_status", { sessionKey: key }, "sessionKey"]);
      cases.push(["summarize", { sessionKey: key }, "sessionKey"]);
    }
    // Models often pad identifiers; tools trim surrounding whitespace on purpose, so those are not bad keys here.
    const toolCases = cases.filter(
      ([, args]) =>
        !(
          typeof args.sessionKey === "string" &&
          args.sessionKey.trim() !== args.sessionKey &&
          args.sessionKey.trim() === "main"
        ),
    );
    expect(new Set(toolCases.map(([tool]) => tool))).toEqual(new Set(TOOL_NAMES));

    const filesBefore = await quietFiles(gw.dataDir);
    const before = await footprint();
    const auditBefore = before.audit;
    for (const [tool, args, field] of toolCases) {
      const result = await op.call<{ status: string; error?: string }>("tools.invoke", {
        as: "main",
        tool,
        args,
      });
      const label = `${tool} ${JSON.stringify(args).slice(0, 120)}`;
      if (field === "") {
        expect(result.status, label).toBe("ok");
        continue;
      }
      expect(result.status, `${label}: ${JSON.stringify(result)}`).toBe("error");
      expect(result.error, label).toContain(field);
    }
    await settle(gw.gateway);
    const after = await footprint();
    // The only writes: the record of each call in the caller's transcript and the operator's
    // impersonation entry in the audit log. No session, run, taint or other transcript changed.
    const callerBefore = before.sessions["agent:main:main"]!.split(" ");
    const callerAfter = after.sessions["agent:main:main"]!.split(" ");
    expect(callerAfter.slice(0, 4)).toEqual(callerBefore.slice(0, 4));
    expect(Number(callerAfter[4])).toBe(Number(callerBefore[4]) + 2 * toolCases.length);
    expect({ ...after.sessions, "agent:main:main": "" }).toEqual({
      ...before.sessions,
      "agent:main:main": "",
    });
    expect(after.runs).toBe(before.runs);
    const newAudit = await gw.gateway.store.audit.read({ after: auditBefore - 1 });
    expect(newAudit.map((record) => record.kind)).toEqual(toolCases.map(() => "impersonation"));
    const filesAfter = await files(gw.dataDir);
    expect(Object.keys(filesAfter).sort()).toEqual(Object.keys(filesBefore).sort());
  });
});
