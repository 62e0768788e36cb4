import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { ConfigInput, RunRecord } from "@switchboard/core";
import { afterAll, describe, expect, it } from "vitest";
import { a2aConfig, type RunContext, TestWorker, WORKER_TOKEN } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";
import { until } from "../testing/until";
import { readWholeAudit } from "./reliability-helpers";

/**
 * kill -9 between a run's durable `ok` end and the post of its reply to the session's channel (the
 * `delivery` event, its audit record and `delivery.sent`), on the file store with fsync on. The
 * first gateway (test/hold-reply-post-gateway.mjs) holds every reply post so the kill lands in that
 * window; the restart is the plain test/flow-crash-gateway.mjs. The reply must then be posted (at
 * least once: here exactly once, since the first process never posted it), and a spawn's announce
 * is `delivered` only once its reply is posted.
 */

const LAB = "agent:main:discord:group:lab";
const gatewayRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const holdingChild = join(gatewayRoot, "test", "hold-reply-post-gateway.mjs");
const plainChild = join(gatewayRoot, "test", "flow-crash-gateway.mjs");
const built = existsSync(join(gatewayRoot, "dist", "index.js"));

const children = new Set<ChildProcess>();
const dataDirs: string[] = [];
const peers = new Set<{ close(): void }>();

afterAll(async () => {
  for (const peer of peers) peer.close();
  for (const child of children) child.kill("SIGKILL");
  for (const dir of dataDirs) await rm(dir, { recursive: true, force: true });
});

interface Child {
  process: ChildProcess;
  url: string;
  token: string;
  exited: Promise<void>;
  /** Lines printed after the first (the holding child's `{holding}`, command answers). */
  lines: Array<Record<string, unknown>>;
  runs(): Promise<RunRecord[]>;
}

function start(script: string, dataDir: string, config: ConfigInput): Promise<Child> {
  const child = spawn(process.execPath, [script, dataDir, JSON.stringify(config)], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  children.add(child);
  child.stdin!.on("error", () => undefined);
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  void exited.then(() => children.delete(child));
  let stderr = "";
  child.stderr!.on("data", (chunk) => {
    stderr += String(chunk);
  });
  const lines: Array<Record<string, unknown>> = [];
  let nextId = 1;
  return new Promise((resolveStart, reject) => {
    let started = false;
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const message = JSON.parse(line) as Record<string, unknown>;
      if (started) {
        lines.push(message);
        return;
      }
      started = true;
      resolveStart({
        process: child,
        url: String(message.url),
        token: String(message.token),
        exited,
        lines,
        async runs() {
          const id = nextId++;
          child.stdin!.write(`${JSON.stringify({ id, cmd: "runs" })}\n`);
          const answer = await until(() => lines.find((l) => l.id === id), "the child's runs");
          return answer.result as RunRecord[];
        },
      });
    });
    child.once("exit", (code) => {
      if (!started) reject(new Error(`child gateway exited (${code}) before starting: ${stderr}`));
    });
  });
}

async function kill9(child: Child): Promise<void> {
  child.process.kill("SIGKILL");
  await child.exited;
}

async function operator(child: Child): Promise<TestPeer> {
  const peer = await TestPeer.connect(child.url, { token: child.token, role: "operator" });
  peers.add(peer);
  return peer;
}

async function worker(child: Child): Promise<void> {
  const handler = ({ run }: RunContext) =>
    run.input.message.includes("Sub-agent")
      ? "ANNOUNCE POST FOR LAB"
      : run.input.message.includes("research task")
        ? "CHILD FINDINGS"
        : "REPLY FOR LAB";
  peers.add(await TestWorker.start(child.url, WORKER_TOKEN, ["main", "research"], handler));
}

/** The `delivery` events (replayed from the start of the event log) whose text is `text`. */
function deliveryEvents(peer: TestPeer, text: string): number {
  return peer.events.filter(
    (event) => event.event === "delivery" && (event.payload as { text?: string }).text === text,
  ).length;
}

async function replyPosts(peer: TestPeer): Promise<number> {
  return (await readWholeAudit(peer)).filter(
    (record) => record.kind === "delivery" && (record.data as { reason?: string }).reason === "reply",
  ).length;
}

describe.skipIf(!built)("a reply's post to its channel across kill -9 (file store, fsync on)", () => {
  it("a chat reply whose run ended ok before the crash is posted once after the restart", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "reply-post-crash-"));
    dataDirs.push(dataDir);
    const config = a2aConfig();
    let gateway = await start(holdingChild, dataDir, config);
    let peer = await operator(gateway);
    await peer.call("sessions.create", { key: LAB });
    await worker(gateway);
    const { runId } = await peer.call<{ runId: string }>("chat.send", {
      sessionKey: LAB,
      message: "hello lab",
    });
    // agent.wait answers once the run's end is durable; the post is held.
    expect(await peer.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
    await until(() => gateway.lines.some((line) => line.holding === "reply"), "the reply's post held");
    await kill9(gateway);

    gateway = await start(plainChild, dataDir, config);
    peer = await operator(gateway);
    await peer.call("events.subscribe", { after: 0 });
    await until(async () => (await replyPosts(peer)) >= 1, "the reply posted after the restart", 10_000);
    await until(() => deliveryEvents(peer, "REPLY FOR LAB") >= 1, "the delivery event (replayed)");
    expect(await replyPosts(peer)).toBe(1);
    expect(deliveryEvents(peer, "REPLY FOR LAB")).toBe(1);
    await until(
      async () => (await gateway.runs()).find((run) => run.runId === runId)?.replyPost === "done",
      "the post's mark cleared",
    );
    const run = await peer.call<{ status: string; reply?: string }>("agent.wait", { runId, timeoutMs: 1000 });
    expect(run).toMatchObject({ status: "ok", reply: "REPLY FOR LAB" });

    // Without a crash: posted once, marked done.
    await worker(gateway);
    const next = await peer.call<{ runId: string }>("chat.send", { sessionKey: LAB, message: "again" });
    await until(() => deliveryEvents(peer, "REPLY FOR LAB") === 2, "the second reply posted");
    await until(
      async () => (await gateway.runs()).find((r) => r.runId === next.runId)?.replyPost === "done",
      "the second post's mark cleared",
    );
    expect(await replyPosts(peer)).toBe(2);
  }, 60_000);

  it("a spawn's announce is delivered only once its reply is posted, and the post survives the crash", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "reply-post-crash-"));
    dataDirs.push(dataDir);
    const config = a2aConfig();
    let gateway = await start(holdingChild, dataDir, config);
    let peer = await operator(gateway);
    await peer.call("sessions.create", { key: LAB });
    await worker(gateway);
    const spawned = await peer.call<{ status: string; runId: string }>("tools.invoke", {
      tool: "sessions_spawn",
      args: { task: "research task", agentId: "research" },
      as: LAB,
    });
    expect(spawned.status).toBe("accepted");
    await until(
      () =>
        gateway.lines.some((line) => line.holding === "reply" && String(line.text).includes("ANNOUNCE POST")),
      "the announce reply's post held",
      10_000,
    );
    // The announce run is `ok` on disk, its post held: the announce is not delivered yet.
    const held = (await gateway.runs()).find((run) => run.runId === spawned.runId);
    expect(held?.spawn?.announce.status).toBe("pending");
    await kill9(gateway);

    gateway = await start(plainChild, dataDir, config);
    peer = await operator(gateway);
    await peer.call("events.subscribe", { after: 0 });
    await worker(gateway);
    const spawn = await until(
      async () => {
        const run = (await gateway.runs()).find((r) => r.runId === spawned.runId);
        return run?.spawn?.announce.status !== "pending" && run?.spawn;
      },
      "the announce settled after the restart",
      10_000,
    );
    expect(spawn.announce.status).toBe("delivered");
    expect(await replyPosts(peer)).toBe(1);
    await until(() => deliveryEvents(peer, "ANNOUNCE POST FOR LAB") === 1, "the delivery event (replayed)");
  }, 60_000);
});
