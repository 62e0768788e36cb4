import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createMemoryStore, parseConfig, type RunRecord, type Store } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway } from "./gateway";
import { TestWorker } from "./testing/test-gateway";
import { TestPeer } from "./testing/test-peer";

const WORKER_TOKEN = "worker-token-0123456789";
const config = parseConfig({
  gateway: { port: 0 },
  auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" as const, agents: ["main"] }] },
  agents: { list: [{ id: "main", default: true }] },
  session: { agentToAgent: { maxPingPongTurns: 0 } },
});

/** A memory store whose writes of a run's end wait until released (a slow runs disk). */
function heldRunEnds() {
  const inner = createMemoryStore();
  let open = true;
  const waiting: Array<() => void> = [];
  const store: Store = {
    ...inner,
    runs: Object.assign(Object.create(inner.runs) as Store["runs"], {
      put: async (record: RunRecord) => {
        if (!open && record.endedAt !== undefined)
          await new Promise<void>((resolve) => waiting.push(resolve));
        return inner.runs.put(record);
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

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("a waiting sessions_send and its run's end", () => {
  let gateway: Gateway | undefined;
  let dataDir: string | undefined;
  const closers: Array<() => void> = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) close();
    await gateway?.close();
    gateway = undefined;
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("records the call beside the reply's writes, but answers only once the run's end is durable", async () => {
    const runs = heldRunEnds();
    dataDir = await mkdtemp(join(tmpdir(), "switchboard-send-hold-"));
    gateway = await Gateway.start({ config, dataDir, port: 0, fsync: "none", store: runs.store });
    const operator = await TestPeer.connect(gateway.url, { token: gateway.operatorToken, role: "operator" });
    const worker = await TestWorker.start(gateway.url, WORKER_TOKEN, ["main"], () => "pong");
    closers.push(
      () => operator.close(),
      () => worker.close(),
    );
    await operator.call("sessions.create", { key: "agent:main:cron:from" });
    await operator.call("sessions.create", { key: "agent:main:cron:to" });
    const caller = await runs.inner.sessions.get("agent:main:cron:from");
    runs.hold();

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
    expect(answered).toBe(false);

    runs.release();
    expect(await answer).toMatchObject({ status: "ok", reply: "pong" });
    const ended = await runs.inner.runs.list({});
    expect(ended.map((record) => record.status)).toEqual(["ok"]);
  });
});
