import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "../testing/behaviour";
import { startTestGateway, type TestGateway, TestWorker } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";

/** Issue 10, items 2 and 3: who may change a send policy, and refusals that leave a trace. */
const WORKER = "worker-token-0123456789";
const CLIENT = "client-token-0123456789";
const ALICE = "agent:main:webchat:dm:alice";
const BOB = "agent:main:webchat:dm:bob";

let gw: TestGateway;
let op: TestPeer;
const closers: Array<() => void> = [];

afterEach(async () => {
  for (const close of closers.splice(0)) close();
  await gw?.close();
});

async function setup() {
  gw = await startTestGateway(
    {
      auth: {
        tokens: [
          { name: "worker", token: WORKER, role: "agent" },
          { name: "alice-chat", token: CLIENT, role: "client", sessions: [ALICE] },
        ],
      },
      agents: { list: [{ id: "main", default: true }] },
    },
    { store: "file" },
  );
  op = await gw.operator();
  const worker = await TestWorker.start(gw.url, WORKER, ["main"], behaviour());
  closers.push(() => worker.close());
  await op.call("sessions.create", { key: ALICE, channel: "webchat" });
  await op.call("sessions.create", { key: BOB, channel: "webchat" });
  const client = await TestPeer.connect(gw.url, { token: CLIENT, role: "client" });
  closers.push(() => client.close());
  return client;
}

async function audit(kind: string) {
  const tail = await op.call<{
    entries: Array<{ kind: string; actor?: string; data: Record<string, unknown> }>;
  }>("audit.tail", { limit: 500 });
  return tail.entries.filter((entry) => entry.kind === kind);
}

describe("send policy changes", () => {
  it("a client cannot lift the operator's send deny with /send", async () => {
    const client = await setup();
    await op.call("sessions.patch", { key: ALICE, sendPolicy: "deny" });
    const denied = await client.request("chat.send", { sessionKey: ALICE, message: "hello" });
    expect(denied.error?.code).toBe("FORBIDDEN");

    const lift = await client.request("chat.send", { sessionKey: ALICE, message: "/send on" });
    expect(lift.ok).toBe(false);
    expect(lift.error?.code).toBe("FORBIDDEN");
    expect(lift.error?.message).toContain("only an operator");

    const still = await client.request("chat.send", { sessionKey: ALICE, message: "hello again" });
    expect(still.error?.code).toBe("FORBIDDEN");
    const status = await op.call<{ sendPolicy?: string }>("sessions.status", { sessionKey: ALICE });
    expect(status.sendPolicy).toBe("deny");

    const refused = await audit("access.refused");
    expect(
      refused.some((entry) => entry.actor === "alice-chat" && String(entry.data.message).includes("/send")),
    ).toBe(true);
  });

  it("an operator's /send with an unknown argument gets the usage line, /send constructor included", async () => {
    await setup();
    for (const argument of ["constructor", "toString", "__proto__", "maybe"]) {
      const { runId } = await op.call<{ runId: string }>("chat.send", {
        sessionKey: ALICE,
        message: `/send ${argument}`,
      });
      const waited = await op.call<{ status: string; reply?: string }>("agent.wait", { runId });
      expect(waited).toMatchObject({ status: "ok", reply: "usage: /send on|off|inherit" });
    }
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: ALICE,
      message: "/send off",
    });
    expect(await op.call("agent.wait", { runId })).toMatchObject({ reply: "send policy: deny" });
  });
});

describe("refusals are audited, with a bound", () => {
  it("records a client touching another session, and summarises a flood", async () => {
    const client = await setup();
    for (let i = 0; i < 60; i++) {
      const response = await client.request("sessions.history", { sessionKey: BOB });
      expect(response.error?.code).toBe("FORBIDDEN");
    }
    const refused = (await audit("access.refused")).filter((entry) => entry.actor === "alice-chat");
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.length).toBeLessThanOrEqual(20);
    expect(refused[0]!.data).toMatchObject({ method: "sessions.history", role: "client" });
    expect(String(refused[0]!.data.message)).toContain(BOB);
  });

  it("records a worker touching a run it does not hold", async () => {
    await setup();
    const intruder = await TestPeer.connect(gw.url, { token: WORKER, role: "agent", agents: ["main"] });
    closers.push(() => intruder.close());
    const response = await intruder.request("run.complete", { runId: "not-mine", reply: "x" });
    expect(response.error?.code).toBe("FORBIDDEN");
    const refused = await audit("access.refused");
    expect(refused.some((entry) => entry.data.method === "run.complete")).toBe(true);
  });
});

describe("clearance below taint", () => {
  it("is refused unless forced, and the forced change is audited", async () => {
    await setup();
    await op.call("sessions.patch", { key: ALICE, clearance: "CONFIDENTIAL" });
    await gw.gateway.sessions.raiseTaint(ALICE, "INTERNAL", "test input", "test");
    const refused = await op.request("sessions.patch", { key: ALICE, clearance: "PUBLIC" });
    expect(refused.error?.code).toBe("CONFLICT");
    expect(refused.error?.message).toContain("clearance: PUBLIC is below the current taint INTERNAL");
    expect((await op.call<{ clearance: string }>("sessions.status", { sessionKey: ALICE })).clearance).toBe(
      "CONFIDENTIAL",
    );

    await op.call("sessions.patch", { key: ALICE, clearance: "PUBLIC", force: true });
    expect((await op.call<{ clearance: string }>("sessions.status", { sessionKey: ALICE })).clearance).toBe(
      "PUBLIC",
    );
    const patched = await audit("session.patched");
    expect(patched.at(-1)?.data).toMatchObject({ clearance: "PUBLIC", taint: "INTERNAL", forced: true });
  });
});
