import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createMemoryStore,
  parseConfig,
  type RunRecord,
  type Store,
  SwitchboardError,
} from "@switchboard/core";
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

/** Writes that wait while held (a slow disk), and go on when released. */
class Valve {
  private open = true;
  private readonly waiting: Array<() => void> = [];
  hold(): void {
    this.open = false;
  }
  release(): void {
    this.open = true;
    for (const resolve of this.waiting.splice(0)) resolve();
  }
  async pass(): Promise<void> {
    if (!this.open) await new Promise<void>((resolve) => this.waiting.push(resolve));
  }
}

/** A memory store whose audit appends wait while held. */
function heldAudit() {
  const inner = createMemoryStore();
  const valve = new Valve();
  const audit = Object.assign(Object.create(inner.audit) as Store["audit"], {
    append: async (records: Parameters<Store["audit"]["append"]>[0]) => {
      await valve.pass();
      return inner.audit.append(records);
    },
  });
  return Object.assign(valve, { inner, store: { ...inner, audit } as Store });
}

/** A memory store whose writes of a run's end wait while held. */
function heldRunEnds() {
  const inner = createMemoryStore();
  const valve = new Valve();
  const runs = Object.assign(Object.create(inner.runs) as Store["runs"], {
    put: async (record: RunRecord) => {
      if (record.endedAt !== undefined) await valve.pass();
      return inner.runs.put(record);
    },
  });
  return Object.assign(valve, { inner, store: { ...inner, runs } as Store });
}

/** A memory store that refuses the first new run of a send (a full disk, say). */
function refusedSendRun() {
  const inner = createMemoryStore();
  const state = { refused: undefined as string | undefined };
  const runs = Object.assign(Object.create(inner.runs) as Store["runs"], {
    put: async (record: RunRecord, options?: Parameters<Store["runs"]["put"]>[1]) => {
      if (record.origin === "send" && state.refused === undefined) {
        state.refused = record.runId;
        await wait(20);
        throw new SwitchboardError("UNAVAILABLE", "storage full writing the run registry", {
          retryable: true,
        });
      }
      return inner.runs.put(record, options);
    },
  });
  return Object.assign(state, { inner, store: { ...inner, runs } as Store });
}

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("sessions_send as an operator: what its answer waits for", () => {
  let gateway: Gateway | undefined;
  let dataDir: string | undefined;
  const closers: Array<() => void> = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) close();
    await gateway?.close();
    gateway = undefined;
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  /** A gateway on `store` with an operator, a worker answering "pong", and two sessions. */
  async function start(store: Store) {
    dataDir = await mkdtemp(join(tmpdir(), "switchboard-send-audit-"));
    gateway = await Gateway.start({ config, dataDir, port: 0, fsync: "none", store });
    const operator = await TestPeer.connect(gateway.url, { token: gateway.operatorToken, role: "operator" });
    const worker = await TestWorker.start(gateway.url, WORKER_TOKEN, ["main"], () => "pong");
    closers.push(
      () => operator.close(),
      () => worker.close(),
    );
    await operator.call("sessions.create", { key: "agent:main:cron:from" });
    await operator.call("sessions.create", { key: "agent:main:cron:to" });
    return { operator, worker };
  }

  /** An operator's waiting sessions_send from `from` to `to`; `answered` turns true with its answer. */
  function sendPing(operator: TestPeer) {
    const send = {
      answered: false,
      answer: operator
        .call<Record<string, unknown>>("tools.invoke", {
          tool: "sessions_send",
          args: { sessionKey: "agent:main:cron:to", message: "ping", timeoutSeconds: 10 },
          as: "agent:main:cron:from",
        })
        .then((result) => {
          send.answered = true;
          return result;
        }),
    };
    return send;
  }

  it("delivers and runs while its audit records are written, but answers only once they are durable", async () => {
    const audit = heldAudit();
    const { operator, worker } = await start(audit.store);
    const before = (await audit.inner.audit.tail(1000)).length;
    audit.hold();

    const send = sendPing(operator);
    // The run reaches the worker and ends while the audit records are still held.
    const deadline = Date.now() + 5000;
    while (worker.runs.length === 0 && Date.now() < deadline) await wait(10);
    expect(worker.runs.map((run) => run.input.message)).toEqual(["ping"]);
    await wait(100);
    expect(send.answered).toBe(false);

    audit.release();
    expect(await send.answer).toMatchObject({ status: "ok", reply: "pong" });
    const kinds = (await audit.inner.audit.tail(1000)).slice(before).map((record) => record.kind);
    expect(kinds).toEqual(["impersonation", "delivery"]);
  });

  it("says in the audit log when the run its delivery record names could not be stored", async () => {
    const runs = refusedSendRun();
    const { operator } = await start(runs.store);
    const before = (await runs.inner.audit.tail(1000)).length;
    const answer = await sendPing(operator).answer;
    expect(answer).toMatchObject({ status: "error" });
    expect(runs.refused).toBeDefined();
    expect(await runs.inner.runs.get(runs.refused!)).toBeUndefined();
    const records = (await runs.inner.audit.tail(1000)).slice(before);
    const delivery = records.findIndex((record) => record.kind === "delivery");
    // The delivery's record went out with the run's write; the failure follows it, naming the run.
    expect(records[delivery]?.data).toMatchObject({ runId: runs.refused });
    expect(records.slice(delivery + 1)).toContainEqual(
      expect.objectContaining({
        kind: "delivery.failed",
        data: expect.objectContaining({ runId: runs.refused, to: "agent:main:cron:to" }),
      }),
    );
  });

  it("records the call beside the reply's writes, but answers only once the run's end is durable", async () => {
    const runs = heldRunEnds();
    const { operator, worker } = await start(runs.store);
    const caller = await runs.inner.sessions.get("agent:main:cron:from");
    runs.hold();

    const send = sendPing(operator);
    // The worker replied and the caller's record of the call is written, while the run's end
    // is still not durable: no answer yet.
    const deadline = Date.now() + 5000;
    const callerEntries = async () =>
      (await runs.inner.transcripts.read(caller!.sessionId, { limit: 10 })).entries.filter(
        (entry) => entry.type === "message",
      );
    while ((await callerEntries()).length < 2 && Date.now() < deadline) await wait(10);
    expect(worker.runs.map((run) => run.input.message)).toEqual(["ping"]);
    const recorded = await callerEntries();
    expect(recorded.map((entry) => (entry.type === "message" ? entry.message?.role : ""))).toEqual([
      "toolCall",
      "toolResult",
    ]);
    await wait(100);
    expect(send.answered).toBe(false);

    runs.release();
    expect(await send.answer).toMatchObject({ status: "ok", reply: "pong" });
    const ended = await runs.inner.runs.list({});
    expect(ended.map((record) => record.status)).toEqual(["ok"]);
  });
});
