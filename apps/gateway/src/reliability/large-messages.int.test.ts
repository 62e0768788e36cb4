import { type HistoryMessage, MAX_INPUT_MESSAGE_BYTES } from "@switchboard/core";
import { afterEach, describe, expect, it } from "vitest";
import { RUN_HISTORY_MAX_BYTES } from "../ports/recent-messages";
import { behaviour } from "../testing/behaviour";
import {
  type RunContext,
  startTestGateway,
  type TestGateway,
  TestWorker,
  testStoreKind,
  type WorkerHandler,
} from "../testing/test-gateway";
import type { TestPeer } from "../testing/test-peer";
import { until } from "../testing/until";

/** Issue 10, item 9: a message over the history page cap is never silently unreadable. */
const WORKER = "worker-token-0123456789";
let gw: TestGateway;
let worker: TestWorker | undefined;

afterEach(async () => {
  worker?.close();
  await gw?.close();
});

type Page = {
  messages: Array<{
    seq: number;
    role: string;
    content: Array<{ text?: string }>;
    clipped?: { bytes: number };
  }>;
  truncated: boolean;
  nextBefore?: number;
};

describe("large messages", () => {
  it("reads a 200 kB message back: clipped with its full size by default, whole with maxBytes", async () => {
    gw = await startTestGateway(
      { auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] } },
      { store: "file" },
    );
    const op = await gw.operator();
    worker = await TestWorker.start(gw.url, WORKER, ["main"], behaviour());
    const big = `start ${"é".repeat(100_000)} end`;
    const { runId } = await op.call<{ runId: string }>("chat.send", { sessionKey: "main", message: big });
    expect(await op.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
    expect(worker.runs[0]!.input.message).toBe(big);

    const page = await op.call<Page>("sessions.history", { sessionKey: "main", limit: 1 });
    expect(page.truncated).toBe(true);
    expect(page.messages).toHaveLength(1);
    const newest = page.messages[0]!;
    expect(newest.role).toBe("assistant");
    expect(newest.clipped?.bytes).toBeGreaterThan(200_000);
    expect(big.includes(newest.content[0]!.text!.slice("echo: ".length))).toBe(true);

    const whole = await op.call<Page>("sessions.history", {
      sessionKey: "main",
      limit: 2,
      maxBytes: 1024 * 1024,
    });
    expect(whole.truncated).toBe(false);
    expect(whole.messages.map((m) => m.content[0]!.text)).toEqual([big, `echo: ${big}`]);

    // The agent-facing tool: the same clipped copy, never an empty page.
    const tool = await op.call<Page & { status: string }>("tools.invoke", {
      tool: "sessions_history",
      args: { sessionKey: "main", limit: 1 },
      as: "main",
    });
    expect(tool.status).toBe("ok");
    expect(tool.messages[0]?.clipped?.bytes).toBeGreaterThan(200_000);
  });

  it("refuses a message over the documented limit at input, naming the field and the limit", async () => {
    gw = await startTestGateway({}, { store: "file" });
    const op = await gw.operator();
    const response = await op.request("chat.send", {
      sessionKey: "main",
      message: "x".repeat(MAX_INPUT_MESSAGE_BYTES + 1),
    });
    expect(response.error?.code).toBe("INVALID_REQUEST");
    expect(response.error?.message).toContain("message");
    expect(response.error?.message).toContain(`${MAX_INPUT_MESSAGE_BYTES} bytes`);
    const multibyte = await op.request("chat.send", {
      sessionKey: "main",
      message: "é".repeat(MAX_INPUT_MESSAGE_BYTES / 2 + 1),
    });
    expect(multibyte.error?.code).toBe("INVALID_REQUEST");
    const listed = await op.call<{ sessions: unknown[] }>("sessions.list", { limit: 5 });
    expect(listed.sessions).toHaveLength(0);
  });
});

/**
 * A session whose recent messages are large used to make every `run.assigned` bigger than the
 * worker's whole send buffer: the gateway dropped the (fast) worker as a slow reader, and every
 * other run it held ended "worker disconnected".
 */
describe("runs of a session with a large history", () => {
  const utf8 = (value: unknown) => Buffer.byteLength(JSON.stringify(value));
  const historyOf = (run: RunContext["run"] | undefined) => run!.history as HistoryMessage[];

  /** A worker whose runs named `slow` wait for `release`; `big` runs reply 400 kB. */
  function slowOrBig(): { handler: WorkerHandler; release(): void } {
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const handler: WorkerHandler = async ({ run }) => {
      if (run.input.message === "slow") {
        await released;
        return "slow done";
      }
      return run.input.message.startsWith("big") ? "R".repeat(400_000) : "small reply";
    };
    return { handler, release };
  }

  async function ask(op: TestPeer, sessionKey: string, message: string) {
    const { runId } = await op.call<{ runId: string }>("agent", { sessionKey, message, timeoutSeconds: 30 });
    return runId;
  }

  const waitFor = (op: TestPeer, runId: string) =>
    op.call<{ status: string; reply?: string; error?: string }>("agent.wait", { runId, timeoutMs: 20_000 });

  it("sends a tiny run its history within the budget, on the cached and the uncached path; the worker and its other runs go on", async () => {
    // A 2 MiB send buffer: four 400 kB inputs with their 400 kB replies are 3.2 MB of recent history.
    const config = {
      auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" as const }] },
      gateway: { limits: { maxBufferedBytes: 2 * 1024 * 1024 } },
    };
    gw = await startTestGateway(config, { store: testStoreKind() });
    let op = await gw.operator();
    const first = slowOrBig();
    worker = await TestWorker.start(gw.url, WORKER, ["main"], first.handler, { concurrency: 4 });
    for (let i = 0; i < 4; i++)
      expect(await waitFor(op, await ask(op, "main", `big ${i} ${"x".repeat(400_000)}`))).toMatchObject({
        status: "ok",
      });

    // The same worker holds a run of another session meanwhile.
    const other = await ask(op, "agent:main:other", "slow");
    await until(() => worker!.runs.some((run) => run.runId === other), "the other session's run assigned");
    const tiny = await ask(op, "main", "hi");
    expect(await waitFor(op, tiny)).toMatchObject({ status: "ok", reply: "small reply" });
    // The newest message (a 400 kB reply) alone is over the budget: a clipped copy, with its size.
    const clipped = historyOf(worker.runs.find((run) => run.runId === tiny));
    expect(utf8(clipped)).toBeLessThanOrEqual(RUN_HISTORY_MAX_BYTES);
    expect(clipped).toHaveLength(1);
    expect(clipped[0]!.role).toBe("assistant");
    expect(clipped[0]!.clipped?.bytes).toBeGreaterThan(400_000);
    expect((clipped[0]!.content[0] as { text: string }).text).toMatch(/^R{100000,}$/);

    first.release();
    expect(await waitFor(op, other)).toMatchObject({ status: "ok", reply: "slow done" });
    expect(worker.peer.closed).toBeUndefined();

    // Next: the small newest messages whole, the big ones before them dropped (no holes).
    const next = await ask(op, "main", "hi again");
    expect(await waitFor(op, next)).toMatchObject({ status: "ok" });
    const recent = historyOf(worker.runs.find((run) => run.runId === next));
    expect(recent.map((message) => (message.content[0] as { text: string }).text)).toEqual([
      "hi",
      "small reply",
    ]);
    expect(await waitFor(op, await ask(op, "main", "big again"))).toMatchObject({ status: "ok" });

    // A restarted gateway has no cached messages: the run reads the transcript's tail instead.
    worker.close();
    await gw.restart();
    op = await gw.operator();
    const second = slowOrBig();
    worker = await TestWorker.start(gw.url, WORKER, ["main"], second.handler, { concurrency: 4 });
    const held = await ask(op, "agent:main:other", "slow");
    await until(() => worker!.runs.some((run) => run.runId === held), "the other session's run assigned");
    const uncached = await ask(op, "main", "hi after restart");
    expect(await waitFor(op, uncached)).toMatchObject({ status: "ok", reply: "small reply" });
    const read = historyOf(worker.runs.find((run) => run.runId === uncached));
    expect(utf8(read)).toBeLessThanOrEqual(RUN_HISTORY_MAX_BYTES);
    expect(read).toHaveLength(1);
    expect(read[0]!.clipped?.bytes).toBeGreaterThan(400_000);
    second.release();
    expect(await waitFor(op, held)).toMatchObject({ status: "ok" });
    expect(worker.peer.closed).toBeUndefined();
  }, 60_000);

  // Until session 23 the uncached read of a run's history spent its byte budget on the run's own
  // input when that was written first (a run queued with no worker, or a lost race after a restart),
  // then dropped the input: the run got no history at all (a CI flake on PostgreSQL).
  it("gives a run queued before any worker, after a restart, the big message before its input", async () => {
    gw = await startTestGateway(
      { auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" as const }] } },
      { store: testStoreKind() },
    );
    let op = await gw.operator();
    const first = slowOrBig();
    worker = await TestWorker.start(gw.url, WORKER, ["main"], first.handler);
    expect(await waitFor(op, await ask(op, "main", "big one"))).toMatchObject({ status: "ok" });
    worker.close();
    await gw.restart();
    op = await gw.operator();
    const queued = await ask(op, "main", "hi while nobody serves");
    await until(
      async () =>
        JSON.stringify(await op.call("sessions.history", { sessionKey: "main", limit: 1 })).includes(
          "hi while nobody serves",
        ),
      "the queued run's input in the transcript",
    );
    worker = await TestWorker.start(gw.url, WORKER, ["main"], slowOrBig().handler);
    expect(await waitFor(op, queued)).toMatchObject({ status: "ok", reply: "small reply" });
    const history = historyOf(worker.runs.find((run) => run.runId === queued));
    expect(history).toHaveLength(1);
    expect(history[0]!.role).toBe("assistant");
    expect(history[0]!.clipped?.bytes).toBeGreaterThan(400_000);
  }, 30_000);

  it("ends a run whose run.assigned cannot fit even an empty send buffer, naming the limit; the worker keeps its other runs", async () => {
    gw = await startTestGateway(
      {
        auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
        gateway: { limits: { maxBufferedBytes: 65_536 } },
      },
      { store: testStoreKind() },
    );
    const op = await gw.operator();
    const slow = slowOrBig();
    worker = await TestWorker.start(gw.url, WORKER, ["main"], slow.handler, { concurrency: 4 });
    const other = await ask(op, "agent:main:other", "slow");
    await until(() => worker!.runs.some((run) => run.runId === other), "the other session's run assigned");

    // Its input alone (100 kB) is more than the worker's whole 64 KiB send buffer.
    const huge = await ask(op, "main", "y".repeat(100_000));
    const ended = await waitFor(op, huge);
    expect(ended.status).toBe("error");
    expect(ended.error).toContain("run.assigned");
    expect(ended.error).toContain("limits.maxBufferedBytes = 65536");

    slow.release();
    expect(await waitFor(op, other)).toMatchObject({ status: "ok", reply: "slow done" });
    // The session goes on too: its next run gets the big input as a clipped history message.
    const after = await ask(op, "main", "small");
    expect(await waitFor(op, after)).toMatchObject({ status: "ok", reply: "small reply" });
    expect(worker.peer.closed).toBeUndefined();
  });
});
