import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createMemoryStore, parseConfig, type Store } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway } from "./gateway";
import { TestWorker } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

const WORKER_TOKEN = "worker-token-0123456789";
const config = parseConfig({
  gateway: { port: 0 },
  auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" as const, agents: ["main"] }] },
  agents: { list: [{ id: "main", default: true }] },
  // No reply-back turns: the one run to watch is the send's own.
  session: { agentToAgent: { maxPingPongTurns: 0 } },
});

/** A memory store whose audit appends wait until released (a slow audit disk). */
function heldAudit() {
  const inner = createMemoryStore();
  let open = true;
  const waiting: Array<() => void> = [];
  const store: Store = {
    ...inner,
    audit: Object.assign(Object.create(inner.audit) as Store["audit"], {
      append: async (records: Parameters<Store["audit"]["append"]>[0]) => {
        if (!open) await new Promise<void>((resolve) => waiting.push(resolve));
        return inner.audit.append(records);
      },
    }),
  };
  return {
    store,
    inner,
    hold() {
      open = false;
    },
    release() {
      open = true;
      for (const resolve of waiting.splice(0)) resolve();
    },
  };
}

describe("sessions_send as an operator: audit records and the answer", () => {
  let gateway: Gateway | undefined;
  let dataDir: string | undefined;
  const closers: Array<() => void> = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) close();
    await gateway?.close();
    gateway = undefined;
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("delivers and runs while its audit records are written, but answers only once they are durable", async () => {
    const audit = heldAudit();
    dataDir = await mkdtemp(join(tmpdir(), "switchboard-send-audit-"));
    gateway = await Gateway.start({ config, dataDir, port: 0, fsync: "none", store: audit.store });
    const operator = await TestPeer.connect(gateway.url, { token: gateway.operatorToken, role: "operator" });
    const worker = await TestWorker.start(gateway.url, WORKER_TOKEN, ["main"], () => "pong");
    closers.push(
      () => operator.close(),
      () => worker.close(),
    );
    await operator.call("sessions.create", { key: "agent:main:cron:from" });
    await operator.call("sessions.create", { key: "agent:main:cron:to" });
    const before = (await audit.inner.audit.tail(1000)).length;
    audit.hold();

    let answered = false;
    const answer = operator
      .call<Record<string, unknown>>("tools.invoke", {
        tool: "sessions_send",
        args: { sessionKey: "agent:main:cron:to", message: "ping", timeoutSeconds: 10 },
        as: "agent:main:cron:from",
      })
      .then((result) => {
        answered = true;
        return result;
      });
    // The run reaches the worker and ends while the audit records are still held.
    const deadline = Date.now() + 5000;
    while (worker.runs.length === 0 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(worker.runs.map((run) => run.input.message)).toEqual(["ping"]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(answered).toBe(false);

    audit.release();
    expect(await answer).toMatchObject({ status: "ok", reply: "pong" });
    const kinds = (await audit.inner.audit.tail(1000)).slice(before).map((record) => record.kind);
    expect(kinds).toEqual(["impersonation", "delivery"]);
  });
});
