import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { a2aConfig, type RunContext, TestWorker, WORKER_TOKEN } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";
import { until } from "../testing/until";
import {
  type FlowGateway,
  flowChildBuilt,
  kill9,
  killFlowChildren,
  startFlowChild,
} from "./flow-crash-child";
import { readWholeAudit } from "./reliability-helpers";

/**
 * kill -9 between a run's durable `ok` end and the post of its reply to the session's channel (the
 * `delivery` event, its audit record and `delivery.sent`), on the file store with fsync on. The
 * first gateway holds every reply post (test/flow-crash-gateway.mjs `hold-reply-posts`) so the kill
 * lands in that window; the restart posts normally. The reply must then be posted (at least once:
 * here exactly once, since the first process never posted it), and a spawn's announce is
 * `delivered` only once its reply is posted.
 */

const LAB = "agent:main:discord:group:lab";
const dataDirs: string[] = [];
const peers = new Set<{ close(): void }>();

afterAll(async () => {
  for (const peer of peers) peer.close();
  killFlowChildren();
  for (const dir of dataDirs) await rm(dir, { recursive: true, force: true });
});

async function operator(child: FlowGateway): Promise<TestPeer> {
  const peer = await TestPeer.connect(child.url, { token: child.token, role: "operator" });
  peers.add(peer);
  return peer;
}

async function worker(child: FlowGateway): Promise<void> {
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

/** A gateway holding every reply post, with LAB made, an operator and a worker. */
async function holdingGateway(config: ReturnType<typeof a2aConfig>) {
  const dataDir = await mkdtemp(join(tmpdir(), "reply-post-crash-"));
  dataDirs.push(dataDir);
  const gateway = await startFlowChild(dataDir, config, { holdReplyPosts: true });
  const peer = await operator(gateway);
  await peer.call("sessions.create", { key: LAB });
  await worker(gateway);
  return { dataDir, gateway, peer };
}

describe.skipIf(!flowChildBuilt)(
  "a reply's post to its channel across kill -9 (file store, fsync on)",
  () => {
    it("a chat reply whose run ended ok before the crash is posted once after the restart", async () => {
      const config = a2aConfig();
      let { dataDir, gateway, peer } = await holdingGateway(config);
      const { runId } = await peer.call<{ runId: string }>("chat.send", {
        sessionKey: LAB,
        message: "hello lab",
      });
      // agent.wait answers once the run's end is durable; the post is held.
      expect(await peer.call("agent.wait", { runId, timeoutMs: 10_000 })).toMatchObject({ status: "ok" });
      await until(() => gateway.lines.some((line) => line.holding === "reply"), "the reply's post held");
      await kill9(gateway);

      gateway = await startFlowChild(dataDir, config);
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
      const run = await peer.call<{ status: string; reply?: string }>("agent.wait", {
        runId,
        timeoutMs: 1000,
      });
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
      const config = a2aConfig();
      let { dataDir, gateway, peer } = await holdingGateway(config);
      const spawned = await peer.call<{ status: string; runId: string }>("tools.invoke", {
        tool: "sessions_spawn",
        args: { task: "research task", agentId: "research" },
        as: LAB,
      });
      expect(spawned.status).toBe("accepted");
      await until(
        () =>
          gateway.lines.some(
            (line) => line.holding === "reply" && String(line.text).includes("ANNOUNCE POST"),
          ),
        "the announce reply's post held",
        10_000,
      );
      // The announce run is `ok` on disk, its post held: the announce is not delivered yet.
      const held = (await gateway.runs()).find((run) => run.runId === spawned.runId);
      expect(held?.spawn?.announce.status).toBe("pending");
      await kill9(gateway);

      gateway = await startFlowChild(dataDir, config);
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
  },
);
