import { describe, expect, it } from "vitest";
import { perTestGateway } from "./testing/per-test-gateway";
import { WORKER_TOKEN } from "./testing/test-gateway";
import { until } from "./testing/until";

// A send's follow-up is marked done only after its announce is posted. A crash between the post and
// the mark left it pending, and the next start took the step up again: it found the announce run
// ended and posted it a second time (the flows review saw it on 3 of 3 kills just after a post).
// The restart below stands in for that kill: the mark is put back to pending by hand.

const LAB = "agent:main:discord:group:lab";
const MAIN = "agent:main:main";
const edge = perTestGateway();

describe("a send's announce taken up again after a restart", () => {
  it("is not posted a second time when its post went out", async () => {
    const gw = await edge.start(
      {
        auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
        agents: { list: [{ id: "main", default: true }] },
        tools: { agentToAgent: { enabled: true, allow: ["*"] } },
        session: { agentToAgent: { maxPingPongTurns: 0 } },
      },
      { store: "file" },
    );
    const handler = async ({ run }: { run: { input: { context: string } } }) =>
      run.input.context.includes("announce step") ? "ANNOUNCE POST" : "primary reply";
    await edge.startWorker(handler, ["main"]);
    let op = await gw.operator();
    await op.call("sessions.create", { key: MAIN });
    await op.call("sessions.create", { key: LAB });
    const posts = async () =>
      (
        await op.call<{ entries: Array<{ kind: string; data?: { reason?: string } }> }>("audit.tail", {
          limit: 1000,
        })
      ).entries.filter((record) => record.kind === "delivery" && record.data?.reason === "announce").length;

    const sent = await op.call<{ status: string }>("tools.invoke", {
      tool: "sessions_send",
      args: { sessionKey: LAB, message: "tell the lab", timeoutSeconds: 0 },
      as: MAIN,
    });
    expect(sent.status).toBe("accepted");
    await until(async () => (await posts()) === 1, "the announce posted");
    await gw.gateway.flows.idle();
    const [primary] = await gw.gateway.store.runs.list({ origins: ["send"] });
    const versioned = await gw.gateway.store.runs.getVersioned(primary!.runId);
    expect(versioned?.row.followUp).toBe("done");
    await gw.gateway.store.runs.put(
      { ...versioned!.row, followUp: "pending" },
      { expectedVersion: versioned!.version },
    );

    await gw.restart();
    await edge.startWorker(handler, ["main"]);
    op = await gw.operator();
    await until(
      async () => (await gw.gateway.store.runs.get(primary!.runId))?.followUp === "done",
      "the follow-up taken up and done again",
    );
    await gw.gateway.flows.idle();
    expect(await posts()).toBe(1);
  });

  // Same window for a spawn's findings recorded in a host-driven requester (an MCP token's session):
  // the record and the announce's mark are two writes, and the findings came twice after a kill.
  it("records a spawn's findings in a host-driven requester once when the announce is taken up again", async () => {
    const gw = await edge.start(
      {
        auth: {
          tokens: [
            { name: "worker", token: WORKER_TOKEN, role: "agent" },
            { name: "host", token: "mcp-host-token-0123456789", role: "mcp", session: MAIN },
          ],
        },
        agents: { list: [{ id: "main", default: true }] },
      },
      { store: "file" },
    );
    const handler = async () => "THE FINDINGS";
    await edge.startWorker(handler, ["main"]);
    let op = await gw.operator();
    await op.call("sessions.create", { key: MAIN });
    const spawned = await op.call<{ status: string; runId: string }>("tools.invoke", {
      tool: "sessions_spawn",
      args: { task: "find it" },
      as: MAIN,
    });
    expect(spawned.status).toBe("accepted");
    const announced = () =>
      gw.gateway.store.runs.get(spawned.runId).then((run) => run?.spawn?.announce.status === "delivered");
    await until(announced, "the findings recorded");
    await gw.gateway.flows.idle();
    const versioned = await gw.gateway.store.runs.getVersioned(spawned.runId);
    const spawn = versioned!.row.spawn!;
    await gw.gateway.store.runs.put(
      { ...versioned!.row, spawn: { ...spawn, announce: { ...spawn.announce, status: "pending" } } },
      { expectedVersion: versioned!.version },
    );

    await gw.restart();
    await edge.startWorker(handler, ["main"]);
    op = await gw.operator();
    await until(announced, "the announce taken up and done again");
    await gw.gateway.flows.idle();
    const { messages } = await op.call<{ messages: Array<{ content: Array<{ text?: string }> }> }>(
      "sessions.history",
      { sessionKey: MAIN, limit: 50 },
    );
    expect(messages.filter((message) => message.content[0]?.text?.includes("THE FINDINGS"))).toHaveLength(1);
  });
});
