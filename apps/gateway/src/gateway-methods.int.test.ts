import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker, testStoreKind } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

const STORE = testStoreKind();
const WORKER = "worker-token-0123456789";
const CHANNEL = "channel-token-0123456789";

let gw: TestGateway;
const workers: TestWorker[] = [];
afterEach(async () => {
  await gw?.gateway.flows.idle();
  for (const worker of workers.splice(0)) worker.close();
  await gw?.close();
});

async function setup(extra: Record<string, unknown> = {}) {
  gw = await startTestGateway(
    {
      auth: {
        tokens: [
          { name: "worker", token: WORKER, role: "agent" },
          { name: "discord-adapter", token: CHANNEL, role: "client", sessions: ["agent:main:discord:*"] },
        ],
      },
      labels: { channels: { discord: "PUBLIC", webchat: "CONFIDENTIAL" } },
      policy: {
        rules: [
          {
            id: "no-keys-out",
            hook: "PRE_OUTPUT",
            priority: 100,
            action: "redact",
            redact: { patterns: ["sk-[A-Za-z0-9]{20,}"] },
          },
        ],
      },
      ...extra,
    },
    { store: STORE },
  );
  workers.push(await TestWorker.start(gw.url, WORKER, ["main"], behaviour()));
  return gw.operator();
}

describe("session methods", () => {
  it("creates idempotently, resolves by key, sessionId and label, patches, resets and deletes", async () => {
    const op = await setup();
    const created = await op.call<{ key: string; sessionId: string; created: boolean }>("sessions.create", {
      key: "discord:group:dev",
      channel: "discord",
      label: "dev-room",
    });
    expect(created).toMatchObject({ key: "agent:main:discord:group:dev", created: true });
    const again = await op.call("sessions.create", { key: "agent:main:discord:group:dev" });
    expect(again).toMatchObject({ sessionId: created.sessionId, created: false });
    expect(await op.call("sessions.resolve", { sessionId: created.sessionId })).toEqual({
      key: created.key,
      sessionId: created.sessionId,
    });
    expect(await op.call("sessions.resolve", { label: "dev-room" })).toMatchObject({ key: created.key });
    expect((await op.request("sessions.resolve", { key: "x", label: "y" })).error?.code).toBe(
      "INVALID_REQUEST",
    );
    expect((await op.request("sessions.resolve", { key: "agent:main:nope" })).error?.code).toBe("NOT_FOUND");

    const patched = await op.call<{ entry: Record<string, unknown> }>("sessions.patch", {
      key: created.key,
      displayName: "Dev room",
      sendPolicy: "deny",
      clearance: "INTERNAL",
    });
    expect(patched.entry).toMatchObject({
      displayName: "Dev room",
      sendPolicy: "deny",
      clearance: "INTERNAL",
    });
    const cleared = await op.call<{ entry: Record<string, unknown> }>("sessions.patch", {
      key: created.key,
      sendPolicy: null,
    });
    expect(cleared.entry.sendPolicy).toBeUndefined();
    expect(
      (await op.request("sessions.patch", { key: created.key, clearance: "secret" })).error?.message,
    ).toContain("clearance");

    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: created.key,
      message: "hello",
    });
    await op.call("agent.wait", { runId });
    const reset = await op.call<{ sessionId: string }>("sessions.reset", { key: created.key });
    expect(reset.sessionId).not.toBe(created.sessionId);
    const afterReset = await op.call<{ messages: unknown[] }>("sessions.history", {
      sessionKey: created.key,
    });
    expect(afterReset.messages).toHaveLength(0);
    expect(await op.call("sessions.status", { sessionKey: created.key })).toMatchObject({
      taint: "PUBLIC",
      displayName: "Dev room",
    });

    expect(await op.call("sessions.delete", { key: created.key })).toEqual({
      key: created.key,
      deleted: true,
    });
    expect((await op.request("sessions.status", { sessionKey: created.key })).error?.code).toBe("NOT_FOUND");
    await op.call("sessions.create", { key: "main" });
    const mainDelete = await op.request("sessions.delete", { key: "main" });
    expect(mainDelete.error?.code).toBe("FORBIDDEN");
  });

  it("lists with filters, lists agents and tools, and tails and verifies the audit chain", async () => {
    const op = await setup();
    await op.call("sessions.create", { key: "main" });
    await op.call("sessions.create", { key: "cron:nightly", label: "nightly" });
    await op.call("sessions.create", { key: "discord:group:dev" });
    const cron = await op.call<{ sessions: Array<{ key: string }> }>("sessions.list", { kinds: ["cron"] });
    expect(cron.sessions.map((s) => s.key)).toEqual(["agent:main:cron:nightly"]);
    const search = await op.call<{ sessions: Array<{ key: string }> }>("sessions.list", {
      search: "DISCORD",
    });
    expect(search.sessions.map((s) => s.key)).toEqual(["agent:main:discord:group:dev"]);
    const agents = await op.call<{ agents: Array<Record<string, unknown>> }>("agents.list", {});
    expect(agents.agents).toEqual([{ id: "main", configured: true, connected: true, workers: 1 }]);
    const tools = await op.call<{ tools: Array<{ name: string; parameters: Record<string, unknown> }> }>(
      "tools.list",
      { as: "main" },
    );
    expect(tools.tools.map((t) => t.name)).toContain("sessions_send");
    expect(tools.tools.every((t) => t.parameters.type === "object")).toBe(true);

    const audit = await op.call<{ entries: Array<{ index: number; kind: string }> }>("audit.tail", {
      limit: 2,
    });
    expect(audit.entries.length).toBe(2);
    expect(audit.entries[1]!.index).toBeGreaterThan(audit.entries[0]!.index);
    expect(await op.call("audit.verify", {})).toMatchObject({ ok: true });
  });

  it.runIf(STORE === "file")(
    "notices an audit log whose tail was cut off while the gateway was down",
    async () => {
      const op = await setup();
      for (const key of ["cron:a", "cron:b", "cron:c"]) await op.call("sessions.create", { key });
      expect(await op.call("audit.verify", {})).toMatchObject({ ok: true });
      const auditFile = join(gw.dataDir, "audit", "audit.jsonl");
      await gw.restart(async () => {
        const lines = (await readFile(auditFile, "utf8")).split("\n").filter((line) => line !== "");
        await writeFile(auditFile, `${lines.slice(0, -1).join("\n")}\n`);
      });
      const after = await gw.operator();
      const verdict = await after.call<{ ok: boolean; reason?: string }>("audit.verify", {});
      expect(verdict.ok).toBe(false);
      expect(verdict.reason).toContain("missing at the end");
    },
  );

  // Until session 23 an agent served by a worker but not named in the config was in neither list,
  // so nothing showed why a send to it waited or who would answer it.
  it("lists agents a worker serves outside the config as not configured, and an agent its own", async () => {
    const op = await setup();
    workers.push(await TestWorker.start(gw.url, WORKER, ["ghost"], behaviour()));
    const { agents } = await op.call<{ agents: Array<Record<string, unknown>> }>("agents.list", {});
    expect(agents).toEqual([
      { id: "main", configured: true, connected: true, workers: 1 },
      { id: "ghost", configured: false, connected: true, workers: 1 },
    ]);
    await op.call("sessions.create", { key: "agent:ghost:main" });
    const own = await op.call<{ status: string; agents: Array<Record<string, unknown>> }>("tools.invoke", {
      tool: "agents_list",
      args: {},
      as: "agent:ghost:main",
    });
    expect(own.agents[0]).toEqual({
      id: "ghost",
      configured: false,
      connected: true,
      allowedForSpawn: false,
    });
  });

  it("switches a session's send policy with /send on|off|inherit and answers the usage line otherwise", async () => {
    const op = await setup();
    await op.call("chat.send", { sessionKey: "discord:group:dev", message: "/send off" });
    expect(await op.call("sessions.status", { sessionKey: "discord:group:dev" })).toMatchObject({
      sendPolicy: "deny",
    });
    const refused = await op.request("chat.send", { sessionKey: "discord:group:dev", message: "hello" });
    expect(refused.error).toMatchObject({ code: "FORBIDDEN", message: "send blocked by session policy" });
    await op.call("chat.send", { sessionKey: "discord:group:dev", message: "/send inherit" });
    const status = await op.call<Record<string, unknown>>("sessions.status", {
      sessionKey: "discord:group:dev",
    });
    expect(status.sendPolicy).toBeUndefined();
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "discord:group:dev",
      message: "/send maybe",
    });
    expect(await op.call("agent.wait", { runId })).toMatchObject({
      status: "ok",
      reply: "usage: /send on|off|inherit",
    });
  });
});

describe("delivery out to channels", () => {
  it("delivers a reply to the connected channel client, redacting secrets", async () => {
    const op = await setup();
    const adapter = await TestPeer.connect(gw.url, {
      token: CHANNEL,
      role: "client",
      sessionKey: "agent:main:discord:group:dev",
    });
    await adapter.call("events.subscribe", {});
    const { runId } = await adapter.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:discord:group:dev",
      message: "my key is sk-abcdefghijklmnopqrstuvwxyz",
    });
    const delivery = await adapter.waitForEvent((event) => event.event === "delivery");
    expect(delivery.payload).toMatchObject({
      sessionKey: "agent:main:discord:group:dev",
      channel: "discord",
      to: "dev",
    });
    expect(delivery.payload.text).toBe("echo: my key is [REDACTED]");
    expect(await adapter.call("agent.wait", { runId })).toMatchObject({ status: "ok" });
    const audit = await op.call<{ entries: Array<{ kind: string; data: Record<string, unknown> }> }>(
      "audit.tail",
      { limit: 50 },
    );
    expect(audit.entries.some((e) => e.kind === "policy.redacted" && e.data.redactions === 1)).toBe(true);
    adapter.close();
  });

  // Until session 22 a client naming another session by its sessionId heard FORBIDDEN naming that
  // session's key (an unknown id: NOT_FOUND): a leaked id was confirmed and resolved.
  it("answers a client's sessionId of a session it may not access as not found, naming no key", async () => {
    const op = await setup();
    const { sessionId } = await op.call<{ sessionId: string }>("sessions.create", {
      key: "agent:main:webchat:dm:carol",
    });
    const adapter = await TestPeer.connect(gw.url, { token: CHANNEL, role: "client" });
    for (const id of [sessionId, "6f1c3c2e-0d4b-4c55-9a39-3f0f8f6b7e21"]) {
      for (const [method, params] of [
        ["sessions.history", { sessionKey: id }],
        ["sessions.status", { sessionKey: id }],
        ["chat.send", { sessionKey: id, message: "hi" }],
        ["events.subscribe", { sessionKey: id }],
      ] as const) {
        const answer = await adapter.request(method, params);
        expect(answer.error, `${method} ${id}`).toMatchObject({ code: "NOT_FOUND" });
        expect(JSON.stringify(answer)).not.toContain("carol");
      }
    }
    // Named by its key, it is refused as before.
    const byKey = await adapter.request("sessions.history", { sessionKey: "agent:main:webchat:dm:carol" });
    expect(byKey.error).toMatchObject({ code: "FORBIDDEN" });
    adapter.close();
  });

  it("blocks and audits a write-down on output, and never sends it", async () => {
    const op = await setup();
    await op.call("sessions.create", { key: "agent:main:webchat:dm:carol", channel: "webchat" });
    const secret = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:webchat:dm:carol",
      message: "the secret",
    });
    await op.call("agent.wait", { runId: secret.runId });
    await op.call("sessions.create", { key: "agent:main:discord:group:dev", channel: "discord" });
    // An operator lifts the PUBLIC group's clearance so it may read the confidential chat…
    await op.call("sessions.patch", { key: "agent:main:discord:group:dev", clearance: "CONFIDENTIAL" });
    await op.call("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: "agent:main:webchat:dm:carol" },
      as: "agent:main:discord:group:dev",
    });
    expect(await op.call("sessions.status", { sessionKey: "agent:main:discord:group:dev" })).toMatchObject({
      taint: "CONFIDENTIAL",
    });
    // …but its replies still cannot go out to the PUBLIC channel.
    const adapter = await TestPeer.connect(gw.url, {
      token: CHANNEL,
      role: "client",
      sessionKey: "agent:main:discord:group:dev",
    });
    await adapter.call("events.subscribe", {});
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:discord:group:dev",
      message: "tell me",
    });
    await op.call("agent.wait", { runId });
    await gw.gateway.flows.idle();
    const blocked = await adapter.waitForEvent((event) => event.event === "policy.blocked");
    expect(blocked.payload.message).toBe(
      "write-down blocked: session taint CONFIDENTIAL cannot flow to discord:dev (classification PUBLIC)",
    );
    expect(adapter.events.some((event) => event.event === "delivery")).toBe(false);
    const history = await op.call<{ messages: unknown[] }>("sessions.history", {
      sessionKey: "agent:main:discord:group:dev",
      includeTools: true,
    });
    expect(history.messages.length).toBeGreaterThan(0);
    const audit = await op.call<{ entries: Array<{ kind: string; data: Record<string, unknown> }> }>(
      "audit.tail",
      { limit: 100 },
    );
    expect(audit.entries.some((e) => e.kind === "policy.blocked" && e.data.hook === "PRE_OUTPUT")).toBe(true);
    expect(await op.call("audit.verify", {})).toMatchObject({ ok: true });
    adapter.close();
  });
});

describe("global session scope", () => {
  it("resolves every main-session reference to one shared session that callers still see as main", async () => {
    const op = await setup({
      session: { scope: "global" },
      agents: { list: [{ id: "main", default: true }, { id: "research" }] },
    });
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "hello" });
    expect(await op.call("agent.wait", { runId })).toMatchObject({ status: "ok", reply: "echo: hello" });
    const resolved = await op.call<{ key: string; sessionId: string }>("sessions.resolve", {
      key: "agent:research:main",
    });
    expect(resolved.key).toBe("main");
    const again = await op.call<{ sessionId: string }>("sessions.resolve", { key: "main" });
    expect(again.sessionId).toBe(resolved.sessionId);
    const listed = await op.call<{ sessions: Array<{ key: string; kind: string }> }>("sessions.list", {});
    expect(listed.sessions).toEqual([expect.objectContaining({ key: "main", kind: "main" })]);
    const history = await op.call<{ sessionKey: string; messages: unknown[] }>("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: "main" },
      as: "main",
    });
    expect(history).toMatchObject({ status: "ok", sessionKey: "main" });
    expect(history.messages).toHaveLength(2);
    // The internal key itself is never accepted from a tool call.
    const direct = await op.call<{ status: string; error: string }>("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: "global" },
      as: "main",
    });
    expect(direct.status).toBe("error");
    expect(direct.error).toContain("internal key");
  });
});
