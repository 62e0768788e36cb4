import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createMemoryStore, parseConfig, type Store, SwitchboardError } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway } from "./gateway";
import { startTestGateway, type TestGateway } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

const WORKER_TOKEN = "worker-token-0123456789";
const config = {
  auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" as const, agents: ["main"] }] },
  agents: { list: [{ id: "main", default: true }] },
};

/** A raw-protocol worker that announces `concurrency` and answers only when told to. */
async function holdingWorker(url: string, concurrency?: number): Promise<TestPeer> {
  const peer = await TestPeer.open(url);
  const response = await peer.request("connect", {
    protocol: 1,
    client: { name: "holding-worker", version: "0" },
    auth: { token: WORKER_TOKEN },
    role: "agent",
    agents: ["main"],
    ...(concurrency !== undefined ? { concurrency } : {}),
  });
  if (!response.ok) throw new Error(`connect failed: ${JSON.stringify(response.error)}`);
  return peer;
}

function assignedRunIds(peer: TestPeer): string[] {
  return peer.events
    .filter((event) => event.event === "run.assigned")
    .map((event) => String(event.payload.runId));
}

async function settle(ms = 100): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms));
}

describe("runs: worker concurrency, restarts and recovery", () => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });

  it("never hands a worker more runs than its announced concurrency; a graceful restart keeps the rest queued", async () => {
    gw = await startTestGateway(config);
    const op = await gw.operator();
    const worker = await holdingWorker(gw.url, 2);
    const runIds: string[] = [];
    for (let i = 0; i < 5; i++) {
      const { runId } = await op.call<{ runId: string }>("chat.send", {
        sessionKey: `agent:main:cron:job-${i}`,
        message: `job ${i}`,
      });
      runIds.push(runId);
    }
    await worker.waitForEvent((event) => event.event === "run.assigned");
    await settle();
    expect(assignedRunIds(worker)).toEqual(runIds.slice(0, 2));

    // Finishing one frees one slot: exactly one more run comes.
    await worker.call("run.complete", { runId: runIds[0], reply: "done 0" });
    await worker.waitForEvent((event) => event.event === "run.assigned" && event.payload.runId === runIds[2]);
    await settle();
    expect(assignedRunIds(worker)).toEqual(runIds.slice(0, 3));

    // Graceful restart: the two running runs end, the two never started stay queued and resume.
    worker.close();
    await gw.restart();
    const op2 = await gw.operator();
    const after = await holdingWorker(gw.url, 4);
    await after.waitForEvent((event) => event.event === "run.assigned");
    await settle();
    expect(assignedRunIds(after).sort()).toEqual(runIds.slice(3).sort());
    for (const runId of runIds.slice(3)) await after.call("run.complete", { runId, reply: "resumed" });
    for (const runId of runIds.slice(3)) {
      expect(await op2.call("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({
        status: "ok",
        reply: "resumed",
      });
    }
    after.close();
  });

  it("a run whose worker disconnects waits for a slot when the other workers are full, then runs there", async () => {
    gw = await startTestGateway(config);
    const op = await gw.operator();
    const leaving = await holdingWorker(gw.url, 1);
    const { runId: first } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:first",
      message: "first",
    });
    await leaving.waitForEvent((event) => event.event === "run.assigned");
    const staying = await holdingWorker(gw.url, 1);
    const { runId: second } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:second",
      message: "second",
    });
    await staying.waitForEvent((event) => event.event === "run.assigned");
    leaving.close();
    await settle();
    // The remaining worker is full: the orphaned run is not pushed onto it, nor failed.
    expect(assignedRunIds(staying)).toEqual([second]);
    await staying.call("run.complete", { runId: second, reply: "second done" });
    await staying.waitForEvent((event) => event.event === "run.assigned" && event.payload.runId === first);
    await staying.call("run.complete", { runId: first, reply: "first done" });
    expect(await op.call("agent.wait", { runId: first, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "first done",
    });
    staying.close();
  });

  it("refuses a concurrency that is not a whole number from 1 to 1024, or on a non-agent connection", async () => {
    gw = await startTestGateway(config);
    for (const [role, extra, pattern] of [
      ["agent", { agents: ["main"], concurrency: 0 }, /concurrency: must be a whole number from 1 to 1024/],
      ["agent", { agents: ["main"], concurrency: 2.5 }, /concurrency: must be a whole number from 1 to 1024/],
      ["operator", { concurrency: 4 }, /concurrency: only a role agent connection may announce one/],
      // Until session 23 these were answered ok and ignored: the operator was not scoped, the
      // client served nothing, the worker was bound to no session.
      ["operator", { sessionKey: "agent:main:main" }, /sessionKey: a role operator connection is not bound/],
      ["agent", { agents: ["main"], sessionKey: "agent:main:main" }, /sessionKey: a role agent connection/],
      ["operator", { agents: ["main"] }, /agents: only a role agent connection serves agents, not operator/],
      ["client", { agents: ["main"] }, /agents: only a role agent connection serves agents, not client/],
    ] as const) {
      const peer = await TestPeer.open(gw.url);
      const response = await peer.request("connect", {
        protocol: 1,
        client: { name: "t", version: "0" },
        // An operator token may connect in any role.
        auth: { token: role === "agent" ? WORKER_TOKEN : gw.token },
        role,
        ...extra,
      });
      expect(response.ok).toBe(false);
      expect(response.error?.code).toBe("INVALID_REQUEST");
      expect(response.error?.message).toMatch(pattern);
      peer.close();
    }
  });

  it("starts again after a queued run's session was reset or deleted; those runs end error with the reason", async () => {
    gw = await startTestGateway(config);
    const op = await gw.operator();
    const reset = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:to-reset",
      message: "queued, then reset",
    });
    const deleted = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:to-delete",
      message: "queued, then deleted",
    });
    const kept = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:kept",
      message: "still wanted",
    });
    await op.call("sessions.reset", { key: "agent:main:cron:to-reset" });
    await op.call("sessions.delete", { key: "agent:main:cron:to-delete" });

    await gw.restart();
    const op2 = await gw.operator();
    expect(await op2.call("agent.wait", { runId: reset.runId, timeoutMs: 2000 })).toMatchObject({
      status: "error",
      error: "session agent:main:cron:to-reset was reset before the run started",
    });
    expect(await op2.call("agent.wait", { runId: deleted.runId, timeoutMs: 2000 })).toMatchObject({
      status: "error",
      error: "session agent:main:cron:to-delete was deleted or archived before the run started",
    });
    // The healthy run is still queued and runs once a worker comes.
    const worker = await holdingWorker(gw.url);
    await worker.waitForEvent((event) => event.event === "run.assigned");
    expect(assignedRunIds(worker)).toEqual([kept.runId]);
    worker.close();
  });

  it("a run queued for a session reset before a worker came ends error instead of running in the new session", async () => {
    gw = await startTestGateway(config);
    const op = await gw.operator();
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:live-reset",
      message: "old session",
    });
    await op.call("sessions.reset", { key: "agent:main:cron:live-reset" });
    const worker = await holdingWorker(gw.url);
    expect(await op.call("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({
      status: "error",
      error: "session agent:main:cron:live-reset was reset before the run started",
    });
    expect(assignedRunIds(worker)).toEqual([]);
    worker.close();
  });
});

describe("runs: a store that refuses writes (disk full)", () => {
  const dirs: string[] = [];
  const gateways: Gateway[] = [];
  afterEach(async () => {
    for (const gateway of gateways.splice(0)) await gateway.close();
    for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
  });

  /** A memory store whose run writes fail with the store's UNAVAILABLE while `failing` is set. */
  async function gatewayWithFailingRuns(): Promise<{ gateway: Gateway; failing: { on: boolean } }> {
    const inner = createMemoryStore();
    const failing = { on: false };
    const store: Store = {
      ...inner,
      runs: {
        ...inner.runs,
        put: async (run, options) => {
          if (failing.on)
            throw new SwitchboardError("UNAVAILABLE", "disk full (ENOSPC) writing runs journal", {
              retryable: true,
            });
          return inner.runs.put(run, options);
        },
        get: (runId) => inner.runs.get(runId),
        getByIdempotencyKey: (key) => inner.runs.getByIdempotencyKey(key),
        list: (query) => inner.runs.list(query),
      },
    };
    const dataDir = await mkdtemp(join(tmpdir(), "switchboard-runs-"));
    dirs.push(dataDir);
    const gateway = await Gateway.start({
      config: parseConfig({ ...config, gateway: { port: 0 } }),
      dataDir,
      port: 0,
      store,
    });
    gateways.push(gateway);
    return { gateway, failing };
  }

  it("reports the failed write to the caller, still ends the run for waiters, and keeps serving", async () => {
    const { gateway, failing } = await gatewayWithFailingRuns();
    const op = await TestPeer.connect(gateway.url, { token: gateway.operatorToken, role: "operator" });
    const worker = await holdingWorker(gateway.url);

    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: "one" });
    await worker.waitForEvent((event) => event.event === "run.assigned");
    failing.on = true;
    const completed = await worker.request("run.complete", { runId, reply: "answer" });
    expect(completed.ok).toBe(false);
    expect(completed.error?.code).toBe("UNAVAILABLE");
    // Nobody waits forever: the run ended (in memory) and waiters hear it.
    expect(await op.call("agent.wait", { runId, timeoutMs: 2000 })).toMatchObject({
      status: "ok",
      reply: "answer",
    });

    // A new run while writes fail: the caller gets UNAVAILABLE, not a hung request or a crash.
    const refused = await op.request("chat.send", { sessionKey: "main", message: "two" });
    expect(refused.ok).toBe(false);
    expect(refused.error?.code).toBe("UNAVAILABLE");

    // Storage recovers: the gateway works again without a restart.
    failing.on = false;
    const { runId: third } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "three",
    });
    await worker.waitForEvent((event) => event.event === "run.assigned" && event.payload.runId === third);
    await worker.call("run.complete", { runId: third, reply: "fine again" });
    expect(await op.call("agent.wait", { runId: third, timeoutMs: 2000 })).toMatchObject({ status: "ok" });
    worker.close();
    op.close();
  });

  it("a run whose dispatch or timeout cannot be written ends error without an unhandled rejection", async () => {
    const { gateway, failing } = await gatewayWithFailingRuns();
    const op = await TestPeer.connect(gateway.url, { token: gateway.operatorToken, role: "operator" });
    const { runId } = await op.call<{ runId: string }>("chat.send", {
      sessionKey: "main",
      message: "queued",
    });
    failing.on = true;
    // The worker's arrival dispatches the run: its status write fails, and so does the error end.
    const worker = await holdingWorker(gateway.url);
    expect(await op.call("agent.wait", { runId, timeoutMs: 3000 })).toMatchObject({
      status: "error",
      error: expect.stringMatching(/dispatch failed: disk full/),
    });
    expect(assignedRunIds(worker)).toEqual([]);
    worker.close();
    op.close();
    // Shutting down with writes failing must not throw either.
    failing.on = true;
  });
});
