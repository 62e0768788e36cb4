import type { ConfigInput } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "./testing/behaviour";
import {
  a2aConfig,
  startTestGateway,
  type TestGateway,
  TestWorker,
  WORKER_TOKEN as WORKER,
} from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";
import { until } from "./testing/until";

/**
 * Calls that answer with an error (or a tool status `error`/`forbidden`) must leave no durable state
 * behind beyond the refusal's own audit record: no taint raised, no run, no session, no slot taken.
 */

type Result = Record<string, unknown> & { status: string };
type AuditRecord = { kind: string; sessionKey?: string; data?: Record<string, unknown> };

const CLIENT = "client-token-half-write-0123";
const CARRIER = "agent:main:webchat:dm:carol";
const TARGET = "agent:main:cron:nightly";
/** Over the store's largest transcript entry (1 MiB + 64 KiB), under the raised frame limit. */
const OVERSIZED = "x".repeat(1_200_000);

let gw: TestGateway | undefined;
let op: TestPeer;
const workers: TestWorker[] = [];
const peers: TestPeer[] = [];

afterEach(async () => {
  await gw?.gateway.flows.idle();
  for (const worker of workers.splice(0)) worker.close();
  for (const peer of peers.splice(0)) peer.close();
  await gw?.close();
  gw = undefined;
});

function config(overrides: Partial<ConfigInput> = {}): ConfigInput {
  return a2aConfig({
    gateway: { limits: { maxPayload: 4 * 1024 * 1024 } },
    labels: { channels: { webchat: "CONFIDENTIAL" } },
    ...overrides,
  });
}

async function setup(input: ConfigInput = config()) {
  gw = await startTestGateway(input, { store: "file" });
  op = await gw.operator();
  workers.push(await TestWorker.start(gw.url, WORKER, ["main", "research"], behaviour()));
}

/** A tool call's outcome whether the tool answered (`status`) or the method failed (`error:<code>`). */
async function outcome(as: string, name: string, args: Record<string, unknown>): Promise<string> {
  const response = await op.request("tools.invoke", { tool: name, args, as });
  if (!response.ok) return `error:${response.error?.code}: ${response.error?.message}`;
  const result = response.result as Result;
  return `${result.status}${result.error ? `: ${String(result.error)}` : ""}`;
}

const audit = async () => (await op.call<{ entries: AuditRecord[] }>("audit.tail", { limit: 1000 })).entries;
const runs = () => gw!.gateway.store.runs.list({});
const taintOf = async (key: string) =>
  (await op.call<{ taint: string }>("sessions.status", { sessionKey: key })).taint;
const historyOf = async (key: string) =>
  (await op.call<{ messages: unknown[] }>("sessions.history", { sessionKey: key, includeTools: true }))
    .messages;
const sessionKeys = async () =>
  (await op.call<{ sessions: Array<{ key: string }> }>("sessions.list", { limit: 200 })).sessions.map(
    (row) => row.key,
  );

/** A caller session holding CONFIDENTIAL data (webchat input), so a delivery from it raises its target. */
async function confidentialCaller() {
  await op.call("sessions.create", { key: CARRIER, channel: "webchat" });
  const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: CARRIER, message: "secret" });
  await op.call("agent.wait", { runId, timeoutMs: 5000 });
  expect(await taintOf(CARRIER)).toBe("CONFIDENTIAL");
  // The reply goes out to webchat after the run ends: its delivery record must be in before a test
  // counts the audit records its own call adds.
  await until(
    async () => (await audit()).some((record) => record.kind === "delivery" && record.sessionKey === CARRIER),
    "the reply's delivery record",
  );
}

describe("refused or failed calls leave nothing behind (file store)", () => {
  it("sessions_send of a message the store cannot hold leaves the target tainted, a run and a delivery record", async () => {
    await setup();
    await confidentialCaller();
    await op.call("sessions.create", { key: TARGET });
    const auditBefore = (await audit()).length;
    const historyBefore = (await historyOf(TARGET)).length;

    const sent = await outcome(CARRIER, "sessions_send", {
      sessionKey: TARGET,
      message: OVERSIZED,
      timeoutSeconds: 0,
    });
    // Refused before anything is written, naming the field and the rule.
    expect(sent).toMatch(/^error: message: must be at most 524288 bytes of UTF-8/);
    await gw!.gateway.flows.idle();

    expect.soft(await taintOf(TARGET), "target taint after a failed send").toBe("PUBLIC");
    expect.soft(await historyOf(TARGET), "target transcript").toHaveLength(historyBefore);
    expect
      .soft(
        (await runs())
          .filter((run) => run.sessionKey === TARGET)
          .map((run) => `${run.origin}:${run.status}:${run.error ?? ""}`),
        "run records on the target",
      )
      .toEqual([]);
    // The operator's impersonation record is the call's own; anything else is the failed delivery's.
    expect
      .soft(
        (await audit())
          .slice(auditBefore)
          .map((record) => record.kind)
          .filter((kind) => kind !== "impersonation" && kind !== "access.refused"),
        "audit records of the failed send",
      )
      .toEqual([]);
  });

  it("a failed sessions_send keeps the caller's agent-to-agent budget slot", async () => {
    await setup(config({ session: { agentToAgent: { budgetPerMinute: 1, maxPingPongTurns: 0 } } }));
    await op.call("sessions.create", { key: "agent:main:main" });
    await op.call("sessions.create", { key: TARGET });
    const failed = await outcome("agent:main:main", "sessions_send", {
      sessionKey: TARGET,
      message: OVERSIZED,
      timeoutSeconds: 0,
    });
    expect(failed).toMatch(/^(error|forbidden)/);
    // The one slot of the minute must still be free: the failed send delivered nothing.
    const next = await outcome("agent:main:main", "sessions_send", {
      sessionKey: TARGET,
      message: "small",
      timeoutSeconds: 0,
    });
    expect(next).toBe("accepted");
  });

  it("sessions_spawn with a task the store cannot hold leaves a child session, its run and an announce", async () => {
    await setup();
    await op.call("sessions.create", { key: "agent:main:main" });
    const auditBefore = (await audit()).length;
    const spawned = await outcome("agent:main:main", "sessions_spawn", {
      task: OVERSIZED,
      agentId: "research",
    });
    expect(spawned).toMatch(/^error: task: must be at most 524288 bytes of UTF-8/);
    await gw!.gateway.flows.idle();

    const children = await op.call<{ sessions: Array<{ key: string }> }>("sessions.list", {
      spawnedBy: "agent:main:main",
      limit: 50,
    });
    expect
      .soft(
        children.sessions.map((row) => row.key),
        "child sessions of a failed spawn",
      )
      .toEqual([]);
    expect
      .soft(
        (await runs()).map((run) => `${run.origin}:${run.sessionKey}:${run.status}`),
        "run records of a failed spawn",
      )
      .toEqual([]);
    expect
      .soft(
        (await audit())
          .slice(auditBefore)
          .map((record) => `${record.kind}:${record.sessionKey ?? ""}`)
          .filter((kind) => !kind.startsWith("impersonation") && !kind.startsWith("access.refused")),
        "audit records of a failed spawn",
      )
      .toEqual([]);
  });

  it("chat.send refused by the send policy does not create the session it was refused for", async () => {
    await setup(config({ session: { sendPolicy: { default: "deny" } } }));
    const key = "agent:main:discord:group:dev";
    const response = await op.request("chat.send", { sessionKey: key, message: "hello" });
    expect(response.ok).toBe(false);
    expect(response.error?.code).toBe("FORBIDDEN");
    expect(await sessionKeys()).not.toContain(key);
  });

  it("a client's refused /send does not create the session", async () => {
    await setup(
      config({
        auth: {
          tokens: [
            { name: "worker", token: WORKER, role: "agent" },
            { name: "webchat", token: CLIENT, role: "client", sessions: ["agent:main:webchat:dm:*"] },
          ],
        },
      }),
    );
    const key = "agent:main:webchat:dm:mallory";
    const client = await TestPeer.connect(gw!.url, { token: CLIENT, role: "client", sessionKey: key });
    peers.push(client);
    const response = await client.request("chat.send", { sessionKey: key, message: "/send on" });
    expect(response.ok).toBe(false);
    expect(response.error?.code).toBe("FORBIDDEN");
    expect(await sessionKeys()).not.toContain(key);
  });

  it("one idempotencyKey sent to two sessions at once: one is refused, and it is not written", async () => {
    await setup(config({ labels: { channels: { webchat: "CONFIDENTIAL" } } }));
    const a = "agent:main:webchat:dm:alice";
    const b = "agent:main:webchat:dm:bob";
    const idempotencyKey = "same-key-for-two-sessions";
    const [first, second] = await Promise.all([
      op.request("chat.send", { sessionKey: a, message: "to alice", idempotencyKey }),
      op.request("chat.send", { sessionKey: b, message: "to bob", idempotencyKey }),
    ]);
    const outcomes = [first, second].map((response) =>
      response.ok ? `ok:${(response.result as { runId: string }).runId}` : `error:${response.error?.code}`,
    );
    // Exactly one accepted; the other is a CONFLICT naming the key, and its session is not written.
    expect
      .soft(
        outcomes.filter((o) => o.startsWith("ok:")),
        outcomes.join(" "),
      )
      .toHaveLength(1);
    expect
      .soft(
        outcomes.filter((o) => o === "error:CONFLICT"),
        outcomes.join(" "),
      )
      .toHaveLength(1);
    const runsOf = (key: string) => runs().then((all) => all.filter((run) => run.sessionKey === key).length);
    // Whichever session got no run of its own must not have been created or tainted for it.
    const [runsA, runsB] = [await runsOf(a), await runsOf(b)];
    const loser = runsA === 0 ? a : runsB === 0 ? b : undefined;
    expect(loser, `runs: alice ${runsA}, bob ${runsB}`).toBeDefined();
    expect.soft(await sessionKeys(), "the session whose input was not taken").not.toContain(loser);
    if ((await sessionKeys()).includes(loser!))
      expect.soft(await taintOf(loser!), "taint of the session whose input was not taken").toBe("PUBLIC");
  });

  it("a message tool call answered with an error was delivered to the channel all the same", async () => {
    await setup();
    await op.call("sessions.create", { key: "agent:main:main" });
    const auditBefore = (await audit()).length;
    const answered = await outcome("agent:main:main", "message", {
      channel: "discord",
      to: "dev",
      text: OVERSIZED,
    });
    expect(answered).toMatch(/^(error|forbidden)/);
    // Told it failed, a caller retries: the text must not have gone out already.
    expect(
      (await audit())
        .slice(auditBefore)
        .filter((record) => record.kind === "delivery")
        .map((record) => record.data),
      answered.slice(0, 120),
    ).toEqual([]);
  });

  it("guard: sessions.patch refused for a clearance below the taint applies none of its other fields", async () => {
    await setup();
    await confidentialCaller();
    const before = await op.call<Record<string, unknown>>("sessions.status", { sessionKey: CARRIER });
    const auditBefore = (await audit()).length;
    const response = await op.request("sessions.patch", {
      key: CARRIER,
      label: "renamed",
      displayName: "Renamed",
      sendPolicy: "deny",
      clearance: "PUBLIC",
    });
    expect(response.ok).toBe(false);
    expect(response.error?.code).toBe("CONFLICT");
    expect(response.error?.message).toContain("clearance");
    const after = await op.call<Record<string, unknown>>("sessions.status", { sessionKey: CARRIER });
    expect(after).toEqual(before);
    expect((await audit()).slice(auditBefore)).toEqual([]);
  });
});
