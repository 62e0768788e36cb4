import {
  type ConfigInput,
  channelLevel,
  type LabelsConfig,
  LEVELS,
  type Level,
  levelRank,
} from "@switchboard/core";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { behaviour } from "../testing/behaviour";
import {
  type RunContext,
  startTestGateway,
  type TestGateway,
  TestWorker,
  type WorkerHandler,
} from "../testing/test-gateway";
import type { EventFrame, TestPeer } from "../testing/test-peer";
import { allSessions, type GatewaySnapshot, settle, snapshot, transcriptOf } from "./gateway-state";

/**
 * Label rules as properties over whole gateways (quality-bars.md, labels-and-policy.md): random
 * channel classifications, recipient labels, agent clearances and per-session clearances; sessions
 * on those channels; random operations issued with `tools.invoke` `as` a session or from inside real
 * runs. After every operation (once the gateway is quiet) the invariants below must hold.
 */

const WORKER = "worker-token-0123456789";
const SEED = Number(process.env.SWITCHBOARD_PROPERTY_SEED ?? 424_242);
const level = fc.constantFrom(...LEVELS);
const CHANNELS = ["discord", "webchat", "telegram"] as const;
const BASE_SESSIONS: Array<{ key: string; channel?: string }> = [
  { key: "agent:main:main" },
  { key: "agent:research:main" },
  { key: "agent:main:discord:group:dev", channel: "discord" },
  { key: "agent:main:webchat:dm:carol", channel: "webchat" },
  { key: "agent:research:telegram:group:lab", channel: "telegram" },
  { key: "agent:research:discord:group:ops", channel: "discord" },
];
const TOOLS = [
  "sessions_history",
  "session_status",
  "sessions_send",
  "message",
  "sessions_spawn",
  "sessions_list",
  "agents_list",
] as const;
type ToolName = (typeof TOOLS)[number];

type Result = Record<string, unknown> & { status: string };
type SimulateResult = Result & { decision?: "ALLOW" | "BLOCK" | "REDACT"; ruleId?: string; message?: string };

const scenarioArbitrary = fc.record({
  channels: fc.record({ discord: level, webchat: level, telegram: level }),
  recipients: fc.record({
    "discord:dev": fc.option(level, { nil: undefined }),
    "webchat:carol": fc.option(level, { nil: undefined }),
  }),
  agentClearance: fc.record({
    main: fc.option(level, { nil: undefined }),
    research: fc.option(level, { nil: undefined }),
  }),
  // An operator's explicit clearance on some sessions (sessions.create `clearance`).
  sessionClearance: fc.array(fc.option(level, { freq: 3, nil: undefined }), {
    minLength: BASE_SESSIONS.length,
    maxLength: BASE_SESSIONS.length,
  }),
  pingPongTurns: fc.integer({ min: 0, max: 2 }),
  ops: fc.array(
    fc.oneof(
      { weight: 2, arbitrary: fc.record({ kind: fc.constant("chat" as const), session: fc.nat() }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant("reset" as const), session: fc.nat() }) },
      {
        weight: 7,
        arbitrary: fc.record({
          kind: fc.constant("tool" as const),
          mode: fc.constantFrom("as" as const, "run" as const),
          simulateWith: fc.constantFrom("policy.simulate" as const, "tools.invoke" as const),
          caller: fc.nat(),
          tool: fc.constantFrom(...TOOLS),
          target: fc.nat(),
          channel: fc.constantFrom(...CHANNELS, "sms"),
          to: fc.constantFrom("dev", "carol", "lab", "someone"),
          agentId: fc.constantFrom("main", "research"),
        }),
      },
    ),
    { minLength: 8, maxLength: 15 },
  ),
});
type Scenario = typeof scenarioArbitrary extends fc.Arbitrary<infer T> ? T : never;
type Op = Scenario["ops"][number];

function buildConfig(scenario: Scenario, extra: Partial<ConfigInput> = {}): ConfigInput {
  const agent = (id: "main" | "research") => ({
    id,
    ...(id === "main" ? { default: true } : {}),
    ...(scenario.agentClearance[id] ? { clearance: scenario.agentClearance[id] } : {}),
    subagents: { allowAgents: ["*"] },
  });
  const recipients = Object.fromEntries(
    Object.entries(scenario.recipients).filter(([, value]) => value !== undefined),
  ) as Record<string, Level>;
  return {
    auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
    agents: { list: [agent("main"), agent("research")] },
    tools: { agentToAgent: { enabled: true, allow: ["*"] } },
    labels: { channels: { ...scenario.channels }, recipients },
    session: { agentToAgent: { maxPingPongTurns: scenario.pingPongTurns } },
    ...extra,
  };
}

/**
 * The scripted agent: `simcall <tool> <json>` simulates the call, then makes it for real, in the same
 * run, and replies with both results; everything else follows `behaviour()` (echo, a reply-back
 * turn, a non-silent announce so announces are delivered out).
 */
function labelAgent(): WorkerHandler {
  const base = behaviour({ replyStep: () => "pong", announceStep: () => "announcing the outcome" });
  return async (context: RunContext) => {
    const call = /^simcall (\S+) (.*)$/s.exec(context.run.input.message);
    if (!call || context.run.input.provenance.kind !== "operator") return base(context);
    const args = JSON.parse(call[2]!) as Record<string, unknown>;
    const simulated = await context.invokeTool("simulate_tool_call", { tool_name: call[1]!, args });
    const real = await context.invokeTool(call[1]!, args);
    return JSON.stringify({ simulated, real });
  };
}

function argsFor(op: Extract<Op, { kind: "tool" }>, targetKey: string): Record<string, unknown> {
  switch (op.tool as ToolName) {
    case "sessions_history":
    case "session_status":
      return { sessionKey: targetKey };
    case "sessions_send":
      return { sessionKey: targetKey, message: "hello over there", timeoutSeconds: 0 };
    case "message":
      return { channel: op.channel, to: op.to, text: "a note" };
    case "sessions_spawn":
      return { task: "look into it", agentId: op.agentId };
    default:
      return {};
  }
}

interface World {
  gw: TestGateway;
  op: TestPeer;
  events: TestPeer;
  labels: LabelsConfig;
  /** Every `delivery.sent` transcript record seen so far, by deliveryId (resets archive transcripts). */
  deliveriesSent: Map<string, { sessionKey: string; channel: string; to: string; label: Level }>;
  previous: GatewaySnapshot;
  log: string[];
}

let gw: TestGateway | undefined;
let worker: TestWorker | undefined;
afterEach(async () => {
  worker?.close();
  await gw?.close();
  gw = undefined;
  worker = undefined;
});

async function openWorld(
  config: ConfigInput,
  sessionClearance: Array<Level | undefined> = [],
): Promise<World> {
  gw = await startTestGateway(config, { store: "memory" });
  worker = await TestWorker.start(gw.url, WORKER, ["main", "research"], labelAgent());
  const op = await gw.operator();
  const events = await gw.operator();
  await events.call("events.subscribe", {});
  for (const [i, session] of BASE_SESSIONS.entries()) {
    await op.call("sessions.create", {
      key: session.key,
      ...(session.channel ? { channel: session.channel } : {}),
      ...(sessionClearance[i] ? { clearance: sessionClearance[i] } : {}),
    });
  }
  const world: World = {
    gw,
    op,
    events,
    labels: config.labels as LabelsConfig,
    deliveriesSent: new Map(),
    previous: await snapshot(gw.gateway),
    log: [],
  };
  await checkInvariants(world, new Set());
  return world;
}

const atMost = (a: Level, b: Level) => levelRank(a) <= levelRank(b);

/** The invariants; `reset` names sessions reset by the last operation (their taint may drop). */
async function checkInvariants(world: World, reset: Set<string>): Promise<void> {
  const { gateway } = world.gw;
  const where = () => `after ops:\n  ${world.log.join("\n  ")}`;
  const sessions = await allSessions(gateway.store);
  const byKey = new Map(sessions.map((entry) => [entry.key, entry]));
  for (const entry of sessions) {
    const transcript = await transcriptOf(gateway.store, entry.sessionId);
    let taint: Level = "PUBLIC";
    for (const item of transcript) {
      if (item.type === "message") {
        // No read-up: nothing above the clearance is ever written into a session...
        expect(
          atMost(item.label, entry.clearance),
          `${entry.key} (clearance ${entry.clearance}) holds a ${item.message?.role} labelled ${item.label}; ${where()}`,
        ).toBe(true);
        // ...and the taint is the high-water mark of everything it took in.
        expect(
          atMost(item.label, entry.taint),
          `${entry.key} (taint ${entry.taint}) holds a ${item.message?.role} labelled ${item.label}; ${where()}`,
        ).toBe(true);
      }
      if (item.type === "taint") {
        expect(item.taint!.from, `${entry.key}: taint events chain; ${where()}`).toBe(taint);
        expect(levelRank(item.taint!.to), `${entry.key}: taint only rises; ${where()}`).toBeGreaterThan(
          levelRank(taint),
        );
        taint = item.taint!.to;
      }
      if (item.type === "event" && item.event?.name === "delivery.sent") {
        const data = item.event.data as { channel: string; to: string; deliveryId: string };
        // No write-down: a delivery carries the session's taint and goes only where that may flow.
        const classification = channelLevel(world.labels, data.channel, data.to);
        expect(
          atMost(item.label, classification),
          `${entry.key} delivered ${item.label} data to ${data.channel}:${data.to} (${classification}); ${where()}`,
        ).toBe(true);
        world.deliveriesSent.set(data.deliveryId, {
          sessionKey: entry.key,
          channel: data.channel,
          to: data.to,
          label: item.label,
        });
      }
    }
    expect(taint, `${entry.key}: the recorded taint events end at the session's taint; ${where()}`).toBe(
      entry.taint,
    );
    const before = world.previous.sessions.get(entry.key);
    if (before && before.sessionId === entry.sessionId && !reset.has(entry.key)) {
      expect(
        levelRank(entry.taint),
        `${entry.key}: taint fell from ${before.taint} to ${entry.taint} without a reset; ${where()}`,
      ).toBeGreaterThanOrEqual(levelRank(before.taint));
    }
  }
  // Every delivery event a channel adapter saw has its transcript record, with the same route.
  for (const event of world.events.events.filter((e: EventFrame) => e.event === "delivery")) {
    const payload = event.payload as { deliveryId: string; channel: string; to: string; sessionKey: string };
    const sent = world.deliveriesSent.get(payload.deliveryId);
    expect(
      sent,
      `delivery ${payload.deliveryId} to ${payload.channel}:${payload.to} has no delivery.sent record; ${where()}`,
    ).toBeDefined();
    expect({ channel: payload.channel, to: payload.to, sessionKey: payload.sessionKey }).toEqual({
      channel: sent!.channel,
      to: sent!.to,
      sessionKey: sent!.sessionKey,
    });
  }
  // Every session-to-session delivery carried a label the target's clearance admits.
  for (const record of await gateway.store.audit.read({})) {
    if (record.kind !== "delivery") continue;
    const data = record.data as { to?: string; label?: Level };
    const target = data.to ? byKey.get(data.to) : undefined;
    if (!target || !data.label) continue;
    expect(
      atMost(data.label, target.clearance),
      `delivery of ${data.label} data into ${data.to} (clearance ${target.clearance}); ${where()}`,
    ).toBe(true);
  }
  world.previous = await snapshot(gateway);
}

/** State that a simulation must leave alone (taints, ids, policies of every session; runs). */
function comparable(state: GatewaySnapshot, ignoreUpdatedAt?: string) {
  return {
    runs: state.runCount,
    sessions: [...state.sessions.values()]
      .map((s) => ({ ...s, updatedAt: s.key === ignoreUpdatedAt ? 0 : s.updatedAt }))
      .sort((a, b) => a.key.localeCompare(b.key)),
  };
}

async function runOp(world: World, op: Op): Promise<Set<string>> {
  const { gateway } = world.gw;
  const keys = (await allSessions(gateway.store)).map((entry) => entry.key).sort();
  const pick = (n: number) => keys[n % keys.length]!;
  if (op.kind === "chat") {
    const key = pick(op.session);
    const response = await world.op.request("chat.send", { sessionKey: key, message: "hi there" });
    world.log.push(`chat ${key} -> ${response.ok ? "accepted" : response.error?.code}`);
    if (!response.ok) expect(response.error?.code, response.error?.message).toBe("FORBIDDEN");
    return new Set();
  }
  if (op.kind === "reset") {
    const key = pick(op.session);
    await world.op.call("sessions.reset", { key });
    world.log.push(`reset ${key}`);
    return new Set([key]);
  }
  const caller = pick(op.caller);
  const target = pick(op.target);
  const args = argsFor(op, target);
  let simulated: SimulateResult;
  let real: Result;
  if (op.mode === "as") {
    const before = await snapshot(gateway);
    simulated =
      op.simulateWith === "policy.simulate"
        ? await world.op.call<SimulateResult>("policy.simulate", { as: caller, tool: op.tool, args })
        : await world.op.call<SimulateResult>("tools.invoke", {
            as: caller,
            tool: "simulate_tool_call",
            args: { tool_name: op.tool, args },
          });
    await settle(gateway);
    const after = await snapshot(gateway);
    // A simulation changes nothing: through tools.invoke, only the record of the call itself (a
    // toolCall and a toolResult in the caller's transcript) and the operator's impersonation entry.
    const viaInvoke = op.simulateWith === "tools.invoke";
    const expected = comparable(before, viaInvoke ? caller : undefined);
    if (viaInvoke) {
      const row = expected.sessions.find((s) => s.key === caller)!;
      row.entries += 2;
    }
    expect(
      comparable(after, viaInvoke ? caller : undefined),
      `simulating ${op.tool} as ${caller} changed state`,
    ).toEqual(expected);
    expect(after.auditCount, `simulating ${op.tool} as ${caller}: audit entries`).toBe(
      before.auditCount + (viaInvoke ? 1 : 0),
    );
    real = await world.op.call<Result>("tools.invoke", { as: caller, tool: op.tool, args });
  } else {
    const response = await world.op.request("agent", {
      sessionKey: caller,
      message: `simcall ${op.tool} ${JSON.stringify(args)}`,
    });
    if (!response.ok) {
      // Input into a session whose channel is classified above its clearance is refused.
      world.log.push(`run ${caller} ${op.tool} -> ${response.error?.code}`);
      expect(response.error?.code, response.error?.message).toBe("FORBIDDEN");
      return new Set();
    }
    const waited = await world.op.call<{ status: string; reply?: string; error?: string }>("agent.wait", {
      runId: String(response.result!.runId),
      timeoutMs: 15_000,
    });
    expect(waited.status, waited.error).toBe("ok");
    ({ simulated, real } = JSON.parse(waited.reply!) as { simulated: SimulateResult; real: Result });
  }
  world.log.push(
    `${op.mode} ${caller} ${op.tool} ${JSON.stringify(args)} -> sim ${simulated.decision ?? simulated.status} / real ${real.status}`,
  );
  // The simulated decision is the real outcome: BLOCK exactly when the real call is forbidden.
  if (simulated.status === "ok") {
    if (simulated.decision === "BLOCK") {
      expect(
        real.status,
        `simulated BLOCK (${simulated.message}) but the real ${op.tool} was ${JSON.stringify(real)}`,
      ).toBe("forbidden");
      // A simulated spawn cannot know the child's uuid; it names a placeholder child key instead.
      const uuidFree = (text: unknown) => String(text).replace(/subagent:[0-9a-f-]{36}/g, "subagent:<uuid>");
      expect(uuidFree(real.error)).toBe(uuidFree(simulated.message));
    } else {
      expect(
        ["ok", "accepted"],
        `simulated ${simulated.decision} but the real ${op.tool} was ${JSON.stringify(real)}`,
      ).toContain(real.status);
    }
  } else {
    expect(real.status, `simulation said ${JSON.stringify(simulated)}`).toBe(simulated.status);
  }
  return new Set();
}

describe("label rules over random gateways (fast-check)", () => {
  it("never lets data reach a session or channel below its label, never lowers taint, and simulates exactly", {
    timeout: 120_000,
  }, async () => {
    await fc.assert(
      fc.asyncProperty(scenarioArbitrary, async (scenario) => {
        const world = await openWorld(buildConfig(scenario), scenario.sessionClearance);
        try {
          for (const op of scenario.ops) {
            const reset = await runOp(world, op);
            await settle(world.gw.gateway);
            await checkInvariants(world, reset);
          }
          expect((await world.op.call<{ ok: boolean }>("audit.verify", {})).ok).toBe(true);
        } finally {
          await settle(world.gw.gateway).catch(() => undefined);
          worker?.close();
          await gw?.close();
          gw = undefined;
          worker = undefined;
        }
      }),
      { seed: SEED, numRuns: Number(process.env.SWITCHBOARD_PROPERTY_RUNS ?? 20), endOnFailure: true },
    );
  });

  it("labels tool results with the tool's configured label and keeps them within the caller's clearance", {
    timeout: 60_000,
  }, async () => {
    // labels.tools gives a tool's results a label; taking them in is taking in data at that label.
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          toolLabel: level,
          clearance: level,
          tool: fc.constantFrom("agents_list", "sessions_list", "session_status"),
        }),
        async ({ toolLabel, clearance, tool }) => {
          const world = await openWorld({
            auth: { tokens: [{ name: "worker", token: WORKER, role: "agent" }] },
            agents: { list: [{ id: "main", default: true, clearance }, { id: "research" }] },
            labels: { tools: { [tool]: toolLabel } },
          });
          try {
            const result = await world.op.call<Result>("tools.invoke", {
              as: "agent:main:main",
              tool,
              args: {},
            });
            world.log.push(
              `as agent:main:main ${tool} (labelled ${toolLabel}, clearance ${clearance}) -> ${result.status}`,
            );
            await settle(world.gw.gateway);
            if (!atMost(toolLabel, clearance)) expect(result.status, world.log.join("; ")).toBe("forbidden");
            await checkInvariants(world, new Set());
          } finally {
            worker?.close();
            await gw?.close();
            gw = undefined;
            worker = undefined;
          }
        },
      ),
      { seed: SEED, numRuns: 12, endOnFailure: true },
    );
  });
});
