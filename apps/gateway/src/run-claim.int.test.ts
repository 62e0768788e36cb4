import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createMemoryStore, parseConfig, type RunRecord, type Store } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway } from "./gateway";
import { TestPeer } from "./testing/test-peer";

const WORKER_TOKEN = "worker-token-0123456789";
const config = parseConfig({
  gateway: { port: 0 },
  auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" as const, agents: ["main"] }] },
  agents: { list: [{ id: "main", default: true }] },
});

/** A memory store that remembers each run's written statuses and can refuse one input message. */
function observedStore() {
  const inner = createMemoryStore();
  const statuses = new Map<string, string[]>();
  let refuseInput: string | undefined;
  let holdInput: { text: string; release: Promise<void> } | undefined;
  const store: Store = {
    ...inner,
    runs: Object.assign(Object.create(inner.runs) as Store["runs"], {
      put: (run: RunRecord, options?: Parameters<Store["runs"]["put"]>[1]) => {
        statuses.set(run.runId, [...(statuses.get(run.runId) ?? []), run.status]);
        return inner.runs.put(run, options);
      },
    }),
    transcripts: Object.assign(Object.create(inner.transcripts) as Store["transcripts"], {
      append: (sessionId: string, entries: Parameters<Store["transcripts"]["append"]>[1]) => {
        const text = entries[0]?.message?.content[0];
        if (refuseInput !== undefined && text?.type === "text" && text.text === refuseInput) {
          refuseInput = undefined;
          return Promise.reject(new Error("disk full"));
        }
        if (holdInput !== undefined && text?.type === "text" && text.text === holdInput.text) {
          const { release } = holdInput;
          holdInput = undefined;
          return release.then(() => inner.transcripts.append(sessionId, entries));
        }
        return inner.transcripts.append(sessionId, entries);
      },
    }),
  };
  return {
    store,
    statuses,
    refuseInput(text: string) {
      refuseInput = text;
    },
    /** Holds the write of the input `text` until the returned function is called. */
    holdInput(text: string): () => void {
      let release!: () => void;
      holdInput = { text, release: new Promise<void>((resolve) => (release = resolve)) };
      return release;
    },
  };
}

/** A raw-protocol worker of concurrency 1 that answers only when told to. */
async function holdingWorker(url: string): Promise<TestPeer> {
  const peer = await TestPeer.open(url);
  const response = await peer.request("connect", {
    protocol: 1,
    client: { name: "holding-worker", version: "0" },
    auth: { token: WORKER_TOKEN },
    role: "agent",
    agents: ["main"],
    concurrency: 1,
  });
  if (!response.ok) throw new Error(`connect failed: ${JSON.stringify(response.error)}`);
  return peer;
}

const assigned = (peer: TestPeer) =>
  peer.events.filter((event) => event.event === "run.assigned").map((event) => String(event.payload.runId));

describe("runs: claimed at once when a worker slot is free", () => {
  let gateway: Gateway | undefined;
  let dataDir: string | undefined;
  const peers: TestPeer[] = [];
  afterEach(async () => {
    for (const peer of peers.splice(0)) peer.close();
    await gateway?.close();
    gateway = undefined;
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  async function start(store: Store) {
    dataDir = await mkdtemp(join(tmpdir(), "switchboard-claim-"));
    gateway = await Gateway.start({ config, dataDir, port: 0, fsync: "none", store });
    const operator = await TestPeer.connect(gateway.url, { token: gateway.operatorToken, role: "operator" });
    const worker = await holdingWorker(gateway.url);
    peers.push(operator, worker);
    return { operator, worker };
  }

  it("stores a run for an idle worker as running in one write; a run that must wait is queued first", async () => {
    const observed = observedStore();
    const { operator, worker } = await start(observed.store);
    const send = (key: string, message: string) =>
      operator.call<{ runId: string }>("chat.send", { sessionKey: key, message });

    const { runId: first } = await send("agent:main:cron:a", "first");
    await worker.waitForEvent((event) => event.event === "run.assigned" && event.payload.runId === first);
    // The worker's one slot is taken: the next run waits in the queue.
    const { runId: second } = await send("agent:main:cron:b", "second");
    expect(observed.statuses.get(second)).toEqual(["queued"]);
    await worker.call("run.complete", { runId: first, reply: "one" });
    await worker.waitForEvent((event) => event.event === "run.assigned" && event.payload.runId === second);
    await worker.call("run.complete", { runId: second, reply: "two" });
    for (const [runId, reply] of [
      [first, "one"],
      [second, "two"],
    ] as const) {
      expect(await operator.call("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({
        status: "ok",
        reply,
      });
    }
    expect(observed.statuses.get(first)).toEqual(["running", "ok"]);
    expect(observed.statuses.get(second)).toEqual(["queued", "running", "ok"]);
  });

  it("a run whose input cannot be written ends error, cannot be completed, and frees its slot", async () => {
    const observed = observedStore();
    const { operator, worker } = await start(observed.store);
    observed.refuseInput("lost");
    const refused = await operator.request("chat.send", { sessionKey: "agent:main:cron:a", message: "lost" });
    expect(refused.ok).toBe(false);
    const [failed] = [...observed.statuses].find(([, written]) => written[0] === "running") ?? [];
    expect(failed).toBeDefined();
    expect(observed.statuses.get(failed!)).toEqual(["running", "error"]);
    // It may have reached the worker while its input was being written, but it cannot end `ok`.
    const late = await worker.request("run.complete", { runId: failed, reply: "too late" });
    expect(late.ok).toBe(false);
    expect(late.error?.code).toBe("FORBIDDEN");

    // The slot and the lane were given back: the next run of the same session reaches the worker.
    const { runId } = await operator.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:a",
      message: "kept",
    });
    await worker.waitForEvent((event) => event.event === "run.assigned" && event.payload.runId === runId);
    expect(assigned(worker).at(-1)).toBe(runId);
    expect(await operator.call("agent.wait", { runId: failed!, timeoutMs: 1000 })).toMatchObject({
      status: "error",
      error: expect.stringContaining("the input could not be recorded"),
    });
  });

  it("hands a claimed run to its worker while the input is written, and ends it only after the input", async () => {
    const observed = observedStore();
    const { operator, worker } = await start(observed.store);
    const release = observed.holdInput("early");
    const sent = operator.call<{ runId: string }>("chat.send", {
      sessionKey: "agent:main:cron:early",
      message: "early",
    });
    const assignedEvent = await worker.waitForEvent((event) => event.event === "run.assigned");
    const runId = String(assignedEvent.payload.runId);
    let completed = false;
    const completing = worker.call("run.complete", { runId, reply: "fast" }).then(() => {
      completed = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    // The input is not durable yet: neither the send is acknowledged nor the run ended.
    expect(completed).toBe(false);
    expect(observed.statuses.get(runId)).toEqual(["running"]);
    release();
    expect((await sent).runId).toBe(runId);
    await completing;
    expect(await operator.call("agent.wait", { runId, timeoutMs: 5000 })).toMatchObject({
      status: "ok",
      reply: "fast",
    });
    const history = await operator.call<{ messages: Array<{ role: string }> }>("sessions.history", {
      sessionKey: "agent:main:cron:early",
    });
    expect(history.messages.map((message) => message.role)).toEqual(["user", "assistant"]);
  });
});
