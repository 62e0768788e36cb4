import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { type RunContext, startTestGateway, type TestGateway, TestWorker } from "../testing/test-gateway";
import type { TestPeer } from "../testing/test-peer";
import { settle } from "./gateway-state";

/**
 * Loops (quality-bars.md, agent-to-agent.md): random agent graphs whose scripted agents always reply
 * and, for some, forward a `sessions_send` (with or without waiting) to another agent's main session.
 * No chain may exceed `maxHops`, no exchange may run more than `maxPingPongTurns` reply steps, and
 * every send must end (ok / accepted / forbidden / error) without dead-locking.
 */

const WORKER = "worker-token-0123456789";
const SEED = 77_001;

interface AgentPlan {
  forward: boolean;
  target: number;
  wait: boolean;
}

const graphArbitrary = fc.integer({ min: 3, max: 6 }).chain((size) =>
  fc.record({
    size: fc.constant(size),
    maxHops: fc.integer({ min: 1, max: 4 }),
    maxPingPongTurns: fc.integer({ min: 0, max: 5 }),
    agents: fc.array(
      fc.record({
        forward: fc.oneof(
          { weight: 3, arbitrary: fc.constant(true) },
          { weight: 1, arbitrary: fc.constant(false) },
        ),
        target: fc.nat({ max: size - 1 }),
        wait: fc.boolean(),
      }),
      { minLength: size, maxLength: size },
    ),
    starts: fc.array(fc.nat({ max: size - 1 }), { minLength: 1, maxLength: 3 }),
  }),
);
type Graph = typeof graphArbitrary extends fc.Arbitrary<infer T> ? T : never;

interface SendRecord {
  from: string;
  to: string;
  /** Hop of the run that sent (0 for a run started by the operator). */
  fromHop: number;
  chainId: string | undefined;
  wait: boolean;
  result: Record<string, unknown> & { status: string; runId?: string; error?: string };
}

const agentId = (index: number) => `agent${index}`;
const mainKey = (index: number) => `agent:${agentId(index)}:main`;

let gw: TestGateway | undefined;
const workers: TestWorker[] = [];
afterEach(async () => {
  if (gw) await settle(gw.gateway).catch(() => undefined);
  for (const worker of workers.splice(0)) worker.close();
  await gw?.close();
  gw = undefined;
});

async function openGraph(graph: Graph, waitSeconds: number) {
  gw = await startTestGateway(
    {
      auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
      agents: {
        list: Array.from({ length: graph.size }, (_, i) => ({
          id: agentId(i),
          ...(i === 0 ? { default: true } : {}),
        })),
      },
      tools: { agentToAgent: { enabled: true, allow: ["*"] } },
      session: { agentToAgent: { maxHops: graph.maxHops, maxPingPongTurns: graph.maxPingPongTurns } },
    },
    { store: "memory" },
  );
  const sends: SendRecord[] = [];
  const runs: RunContext["run"][] = [];
  const handler = (plan: AgentPlan) => async (context: RunContext) => {
    const { run } = context;
    runs.push(run);
    const provenance = run.input.provenance as {
      kind: string;
      step?: string;
      hop?: number;
      chainId?: string;
    };
    // Every step gets a real answer, so the reply-back loop always runs to its turn limit.
    if (provenance.step === "reply") return `pong from ${run.sessionKey}`;
    if (provenance.step === "announce") return "ANNOUNCE_SKIP";
    if (!plan.forward) return "done";
    const to = mainKey(plan.target);
    const result = (await context.invokeTool("sessions_send", {
      sessionKey: to,
      message: "please pass this on",
      timeoutSeconds: plan.wait ? waitSeconds : 0,
    })) as SendRecord["result"];
    sends.push({
      from: run.sessionKey,
      to,
      fromHop: provenance.kind === "agent" ? (provenance.hop ?? 0) : 0,
      chainId: provenance.chainId,
      wait: plan.wait,
      result,
    });
    return `forwarded: ${result.status}`;
  };
  for (const [i, plan] of graph.agents.entries()) {
    workers.push(await TestWorker.start(gw.url, WORKER, [agentId(i)], handler(plan)));
  }
  const op = await gw.operator();
  for (let i = 0; i < graph.size; i++) await op.call("sessions.create", { key: mainKey(i) });
  return { op, sends, runs };
}

async function start(op: TestPeer, index: number): Promise<string> {
  const { runId } = await op.call<{ runId: string }>("agent", {
    sessionKey: mainKey(index),
    message: "start a chain",
  });
  return runId;
}

function describeGraph(graph: Graph): string {
  const edges = graph.agents
    .map((plan, i) => (plan.forward ? `${i}->${plan.target}${plan.wait ? "(wait)" : ""}` : `${i}`))
    .join(" ");
  return `maxHops ${graph.maxHops}, maxPingPongTurns ${graph.maxPingPongTurns}, agents ${edges}, starts ${graph.starts.join(",")}`;
}

describe("agent-to-agent loops over random graphs (fast-check)", () => {
  it("bounds chains by maxHops and exchanges by maxPingPongTurns, and refuses wait cycles instead of dead-locking", {
    timeout: 120_000,
  }, async () => {
    await fc.assert(
      fc.asyncProperty(graphArbitrary, async (graph) => {
        // Waits long enough that a timeout can only mean a dead-lock, never a slow machine.
        const { op, sends, runs } = await openGraph(graph, 30);
        const where = describeGraph(graph);
        try {
          // One chain at a time: within a chain the gateway must never need a timeout to make progress.
          for (const index of graph.starts) {
            const runId = await start(op, index);
            const ended = await op.call<{ status: string; error?: string }>("agent.wait", {
              runId,
              timeoutMs: 60_000,
            });
            expect(ended.status, `${where}: the starting run ${ended.error ?? ""}`).toBe("ok");
            await settle(gw!.gateway, 60_000);
          }

          for (const send of sends) {
            const label = `${where}: send ${send.from} -> ${send.to} from hop ${send.fromHop}${send.wait ? " (wait)" : ""}: ${JSON.stringify(send.result)}`;
            expect(["ok", "accepted", "forbidden"], label).toContain(send.result.status);
            if (send.fromHop + 1 > graph.maxHops) {
              expect(send.result.status, label).toBe("forbidden");
              expect(send.result.error, label).toBe(`agent-to-agent hop limit reached (${graph.maxHops})`);
            } else if (send.result.status === "forbidden") {
              // The only other refusal here: waiting on a session already waiting in the chain.
              expect(send.wait, label).toBe(true);
              expect(send.result.error, label).toContain("cycle");
            } else {
              expect(send.result.status, label).toBe(send.wait ? "ok" : "accepted");
            }
          }

          // No delivered message is past the hop limit.
          for (const run of runs) {
            const provenance = run.input.provenance as { kind: string; hop?: number };
            if (provenance.kind === "agent")
              expect(provenance.hop!, `${where}: run ${run.runId} on ${run.sessionKey}`).toBeLessThanOrEqual(
                graph.maxHops,
              );
          }

          // Each delivered exchange runs exactly its reply-back turns (agents never skip); main sessions have
          // no channel route, so the announce step is skipped (and recorded) instead of run.
          for (const send of sends) {
            if (send.result.status !== "ok" && send.result.status !== "accepted") continue;
            const steps = runs.filter(
              (run) => (run.input.provenance as { fromRunId?: string }).fromRunId === send.result.runId,
            );
            const replies = steps.filter(
              (run) => (run.input.provenance as { step?: string }).step === "reply",
            );
            const announces = steps.filter(
              (run) => (run.input.provenance as { step?: string }).step === "announce",
            );
            const expectedTurns = send.from === send.to ? 0 : graph.maxPingPongTurns;
            expect(replies.length, `${where}: reply-back steps of ${send.from} -> ${send.to}`).toBe(
              expectedTurns,
            );
            expect(announces.length, `${where}: announces of ${send.from} -> ${send.to}`).toBe(0);
            replies.forEach((run, turn) => {
              expect(run.input.context, where).toContain(`Turn ${turn + 1} of ${graph.maxPingPongTurns}.`);
              expect(run.sessionKey, where).toBe(turn % 2 === 0 ? send.from : send.to);
            });
          }
        } finally {
          await settle(gw!.gateway).catch(() => undefined);
          for (const worker of workers.splice(0)) worker.close();
          await gw?.close();
          gw = undefined;
        }
      }),
      { seed: SEED, numRuns: 25, endOnFailure: true },
    );
  });

  it("ends every send and every run when chains run concurrently and wait on each other", {
    timeout: 120_000,
  }, async () => {
    // Concurrent chains can wait on each other across chains (A waits on B in one chain while B waits
    // on A in another); the send timeouts bound such waits. Everything must still end.
    await fc.assert(
      fc.asyncProperty(graphArbitrary, async (graph) => {
        const { op, sends } = await openGraph(graph, 1);
        const where = describeGraph(graph);
        try {
          const runIds = await Promise.all(graph.starts.map((index) => start(op, index)));
          for (const runId of runIds) {
            const ended = await op.call<{ status: string; error?: string }>("agent.wait", {
              runId,
              timeoutMs: 60_000,
            });
            expect(ended.status, `${where}: the starting run ${ended.error ?? ""}`).toBe("ok");
          }
          await settle(gw!.gateway, 60_000);
          for (const send of sends) {
            expect(
              ["ok", "accepted", "forbidden", "timeout"],
              `${where}: ${JSON.stringify(send.result)}`,
            ).toContain(send.result.status);
            if (send.result.status === "timeout")
              expect(send.result.delivery, where).toMatchObject({ status: "delivered" });
          }
        } finally {
          await settle(gw!.gateway).catch(() => undefined);
          for (const worker of workers.splice(0)) worker.close();
          await gw?.close();
          gw = undefined;
        }
      }),
      { seed: SEED + 1, numRuns: 6, endOnFailure: true },
    );
  });

  it("refuses a wait cycle that spans two chains at once instead of dead-locking until the timeouts", {
    timeout: 30_000,
  }, async () => {
    // agent2 starts chain 1 into agent0, agent3 starts chain 2 into agent1; agent0 and agent1 each
    // wait on the other. Once both hop-1 runs hold their nested lanes, agent0 (chain 1) waits on
    // agent1, whose lane is held by a run (chain 2) that waits on agent0: a cycle, only in two chains.
    gw = await startTestGateway(
      {
        auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
        agents: {
          list: [0, 1, 2, 3].map((i) => ({ id: agentId(i), ...(i === 0 ? { default: true } : {}) })),
        },
        tools: { agentToAgent: { enabled: true, allow: ["*"] } },
        session: { agentToAgent: { maxHops: 2, maxPingPongTurns: 0 } },
      },
      { store: "memory" },
    );
    const targets: Record<string, number> = { agent0: 1, agent1: 0, agent2: 0, agent3: 1 };
    const sends: Array<{ from: string; hop: number; status: string; error?: string }> = [];
    let arrived = 0;
    let bothHeld: () => void = () => undefined;
    const barrier = new Promise<void>((resolve) => {
      bothHeld = resolve;
    });
    const handler = async (context: RunContext) => {
      const provenance = context.run.input.provenance as { kind: string; step?: string; hop?: number };
      if (provenance.step === "reply" || provenance.step === "announce") return "ANNOUNCE_SKIP";
      const hop = provenance.kind === "agent" ? (provenance.hop ?? 0) : 0;
      if (hop === 1) {
        arrived += 1;
        if (arrived === 2) bothHeld();
        await barrier;
      }
      const result = (await context.invokeTool("sessions_send", {
        sessionKey: mainKey(targets[context.run.agentId as string]!),
        message: "your turn",
        // The starters only kick the chains off; the two hop-1 runs wait (long enough that a timeout
        // can only mean the dead-lock, not a slow machine).
        timeoutSeconds: hop === 0 ? 0 : 3,
      })) as { status: string; error?: string };
      sends.push({
        from: context.run.sessionKey,
        hop,
        status: result.status,
        ...(result.error ? { error: result.error } : {}),
      });
      return "done";
    };
    workers.push(await TestWorker.start(gw.url, WORKER, [0, 1, 2, 3].map(agentId), handler));
    const op = await gw.operator();
    for (let i = 0; i < 4; i++) await op.call("sessions.create", { key: mainKey(i) });
    await Promise.all([start(op, 2), start(op, 3)]);
    await settle(gw.gateway, 20_000);
    const timedOut = sends.filter((send) => send.status === "timeout");
    expect(timedOut, `sends that only ended by their timeout: ${JSON.stringify(sends)}`).toEqual([]);
    expect(
      sends.some((send) => send.status === "forbidden" && send.error?.includes("cycle")),
      JSON.stringify(sends),
    ).toBe(true);
  });
});
