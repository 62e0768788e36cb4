import type { SwitchboardClient } from "@switchboard/client";
import type { ConfigInput, EventName, ScriptedRuleInput } from "@switchboard/core";
import { CliError, EXIT } from "./cli-errors";
import type { EventLike } from "./event-text";

export const MAIN_KEY = "agent:main:main";
export const LAB_KEY = "agent:research:discord:group:lab";
export const CAROL_KEY = "agent:main:webchat:dm:carol";

const MAIN_RULES: ScriptedRuleInput[] = [
  { context: "Agent-to-agent reply step", reply: "Thanks! How tall is it, exactly?" },
  { context: "Agent-to-agent announce step", reply: "ANNOUNCE_SKIP" },
  { provenance: "subagent", reply: "The researcher reported back: {{message}}" },
  {
    when: "^spawn (.+)$",
    call: { tool: "sessions_spawn", args: { task: "$1", agentId: "research", label: "researcher" } },
    reply: "{{result.status}}: spawned {{result.childSessionKey}}{{result.error}}",
  },
  {
    when: "^ask (\\S+) (.+)$",
    call: { tool: "sessions_send", args: { sessionKey: "$1", message: "$2", timeoutSeconds: 10 } },
    reply: "{{result.status}}: {{result.reply}}{{result.error}}",
  },
  { when: "^remember", reply: "Noted. I will keep that between us." },
  { reply: "echo: {{message}}" },
];

const RESEARCH_RULES: ScriptedRuleInput[] = [
  { context: "Sub-agent context", reply: "Octopuses have three hearts, blue blood and a brain in each arm." },
  { context: "Agent-to-agent reply step", reply: "About 116 metres, measured in 2019." },
  {
    context: "Agent-to-agent announce step",
    reply: "For the lab: main asked about the tallest tree. It is Hyperion, a coast redwood of about 116 m.",
  },
  {
    context: "Agent-to-agent message context",
    reply: "The tallest known tree is Hyperion, a coast redwood in California.",
  },
  { reply: "echo: {{message}}" },
];

/** The demo's gateway: two scripted agents, agent-to-agent on, two ping-pong turns, labelled channels. */
export function demoConfig(): ConfigInput {
  return {
    gateway: { host: "127.0.0.1", port: 0 },
    session: { agentToAgent: { maxPingPongTurns: 2 } },
    agents: {
      list: [
        {
          id: "main",
          default: true,
          model: { provider: "scripted", rules: MAIN_RULES },
          subagents: { allowAgents: ["research"] },
        },
        { id: "research", model: { provider: "scripted", rules: RESEARCH_RULES } },
      ],
    },
    tools: { agentToAgent: { enabled: true, allow: ["main", "research"] } },
    labels: { channels: { discord: "PUBLIC", webchat: "CONFIDENTIAL" } },
    logging: { level: "silent" },
  };
}

export interface TimelineEntry {
  /** ms since the demo started. */
  at: number;
  actor: string;
  text: string;
  kind: "step" | "operator" | "event" | "check";
  event?: EventLike;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

const WAIT_MS = 15_000;

/** Collects the gateway's events and lets the scenario wait for a particular one. */
export class EventLog {
  readonly events: Array<{ at: number; event: EventLike }> = [];
  private readonly waiters = new Set<{
    match: (event: EventLike) => boolean;
    resolve: (event: EventLike) => void;
  }>();

  constructor(private readonly started: number) {}

  attach(client: SwitchboardClient, names: readonly EventName[]): void {
    for (const name of names) {
      client.on(name, (event) => this.push({ event: event.event, seq: event.seq, payload: event.payload }));
    }
  }

  private push(event: EventLike): void {
    this.events.push({ at: performance.now() - this.started, event });
    for (const waiter of [...this.waiters]) {
      if (waiter.match(event)) {
        this.waiters.delete(waiter);
        waiter.resolve(event);
      }
    }
  }

  /** The first event (already seen or still to come) that matches, or a failure naming `what`. */
  waitFor<P = Record<string, unknown>>(
    what: string,
    name: string,
    match: (payload: P, event: EventLike) => boolean,
  ): Promise<EventLike & { payload: P }> {
    const test = (event: EventLike) => event.event === name && match(event.payload as P, event);
    const seen = this.events.find((entry) => test(entry.event));
    if (seen) return Promise.resolve(seen.event as EventLike & { payload: P });
    return new Promise((resolve, reject) => {
      const waiter = {
        match: test,
        resolve: (event: EventLike) => resolve(event as EventLike & { payload: P }),
      };
      this.waiters.add(waiter);
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new CliError(`the demo waited ${WAIT_MS / 1000}s for ${what}, in vain`, EXIT.failure));
      }, WAIT_MS);
      timer.unref();
      const settle = waiter.resolve;
      waiter.resolve = (event) => {
        clearTimeout(timer);
        settle(event);
      };
    });
  }

  runEnded(runId: string, what: string) {
    return this.waitFor<{ runId: string; status: string; reply?: string; error?: string }>(
      what,
      "run.ended",
      (p) => p.runId === runId,
    );
  }
}

type RunEnded = { runId: string; sessionKey: string; status: string; reply?: string; error?: string };

export interface ScenarioContext {
  client: SwitchboardClient;
  log: EventLog;
  /** Adds a line of the demo's own (a step header or an operator action) to the timeline. */
  note(kind: "step" | "operator", actor: string, text: string): void;
  /** Run ids → what they were, for the timeline. */
  runKinds: Map<string, string>;
  checks: Check[];
}

function check(context: ScenarioContext, name: string, ok: boolean, detail: string): void {
  context.checks.push({ name, ok, detail });
}

async function say(context: ScenarioContext, sessionKey: string, message: string): Promise<string> {
  context.note("operator", "operator", `→ ${sessionKey}: ${JSON.stringify(message)}`);
  const { runId } = await context.client.chat.send({ sessionKey, message });
  context.runKinds.set(runId, "chat input");
  return runId;
}

interface AuditRow {
  index: number;
  kind: string;
  data?: { runId?: string; announceRunId?: string; origin?: string; to?: string };
}

async function auditEntries(context: ScenarioContext, afterIndex: number): Promise<AuditRow[]> {
  const { entries } = await context.client.audit.tail({ after: afterIndex, limit: 1000 });
  return entries as unknown as AuditRow[];
}

async function lastAuditIndex(context: ScenarioContext): Promise<number> {
  const { entries } = await context.client.audit.tail({ limit: 1 });
  return typeof entries[0]?.index === "number" ? (entries[0].index as number) : -1;
}

/** 1. main spawns a researcher; the child's findings are announced back to main. */
async function spawnStep(context: ScenarioContext): Promise<void> {
  context.note("step", "", "1. main spawns a researcher sub-agent");
  const runId = await say(context, MAIN_KEY, "spawn find three surprising facts about octopuses");
  const ended = await context.log.runEnded(runId, "main's spawn run to end");
  const children = await context.client.sessions.list({ spawnedBy: MAIN_KEY, kinds: ["subagent"] });
  const child = children.sessions[0]?.key;
  if (ended.payload.status !== "ok" || !child) {
    check(
      context,
      "spawn",
      false,
      `main's spawn did not go through: ${ended.payload.reply ?? ended.payload.error ?? ""}`,
    );
    return;
  }
  const childEnded = await context.log.waitFor<RunEnded>(
    "the sub-agent's run to end",
    "run.ended",
    (p) => p.sessionKey === child,
  );
  context.runKinds.set(childEnded.payload.runId, "sub-agent task");
  const announced = await context.log.waitFor<{ index: number; kind: string; sessionKey?: string }>(
    "the sub-agent's announce to main",
    "audit.appended",
    (p) => p.kind === "announce" && p.sessionKey === MAIN_KEY,
  );
  const [entry] = await auditEntries(context, announced.payload.index - 1);
  const announceRunId = String(entry?.data?.announceRunId ?? "");
  context.runKinds.set(announceRunId, "announce of the sub-agent's result");
  const announceEnded = await context.log.runEnded(announceRunId, "main's announce run to end");
  const reply = announceEnded.payload.reply ?? "";
  check(
    context,
    "spawn",
    childEnded.payload.status === "ok" &&
      announceEnded.payload.status === "ok" &&
      reply.includes("completed successfully"),
    `main spawned ${child}; its findings were announced back to main ("${reply.split("\n")[0]}")`,
  );
}

/** 2. main asks research's lab session and waits; two reply-back turns; research announces to discord. */
async function sendStep(context: ScenarioContext): Promise<void> {
  context.note(
    "step",
    "",
    "2. main asks research's lab session (send + wait), reply-back loop, announce to discord",
  );
  await context.client.sessions.create({ key: LAB_KEY, channel: "discord", chatType: "group" });
  const before = await lastAuditIndex(context);
  const runId = await say(context, MAIN_KEY, `ask ${LAB_KEY} Which is the tallest tree in the world?`);
  const ended = await context.log.runEnded(runId, "main's ask run to end");
  const delivered = await context.log.waitFor<{
    sessionKey: string;
    channel: string;
    to: string;
    text: string;
  }>("research's announce to the discord channel", "delivery", (p) => p.sessionKey === LAB_KEY);
  // The delivery's audit entry follows the event; waiting for it keeps this step's lines together.
  await context.log.waitFor<{ kind: string; sessionKey?: string }>(
    "the announce's audit entry",
    "audit.appended",
    (p, event) => p.kind === "delivery" && p.sessionKey === LAB_KEY && event.seq > delivered.seq,
  );
  const deliveries = (await auditEntries(context, before)).filter((entry) => entry.kind === "delivery");
  const primary = deliveries.find((entry) => entry.data?.origin === "send" && entry.data?.to === LAB_KEY);
  if (primary) context.runKinds.set(String(primary.data?.runId), "agent-to-agent message from main");
  const replySteps = deliveries.filter((entry) => entry.data?.origin === "reply");
  const turns: string[] = [];
  for (const [index, step] of replySteps.entries()) {
    const stepRun = String(step.data?.runId);
    context.runKinds.set(stepRun, `reply-back turn ${index + 1}`);
    const stepEnded = await context.log.runEnded(stepRun, `reply-back turn ${index + 1} to end`);
    if (stepEnded.payload.status === "ok") turns.push(String(step.data?.to));
  }
  // The announce step is the lab's nested run that is neither the primary nor a reply step.
  for (const { event } of context.log.events) {
    const payload = event.payload as { runId?: string; sessionKey?: string; lane?: string };
    if (
      event.event === "run.started" &&
      payload.sessionKey === LAB_KEY &&
      payload.runId &&
      !context.runKinds.has(payload.runId)
    ) {
      context.runKinds.set(payload.runId, "announce step");
    }
  }
  const reply = ended.payload.reply ?? "";
  check(
    context,
    "send and wait",
    ended.payload.status === "ok" && reply.startsWith("ok: "),
    `main asked ${LAB_KEY} and got the answer back within its wait ("${reply}")`,
  );
  check(
    context,
    "reply-back",
    turns.length === 2 && turns[0] === MAIN_KEY && turns[1] === LAB_KEY,
    `${turns.length} reply-back turns ran, alternating ${turns.map((key) => (key === MAIN_KEY ? "main" : "research")).join(" → ")}`,
  );
  check(
    context,
    "announce",
    delivered.payload.channel === "discord" && delivered.payload.to === "lab",
    `research announced the outcome to ${delivered.payload.channel}:${delivered.payload.to} ("${delivered.payload.text}")`,
  );
}

/** 3. A CONFIDENTIAL webchat session tries to pass a secret to the PUBLIC discord session. */
async function writeDownStep(context: ScenarioContext): Promise<void> {
  context.note("step", "", "3. a CONFIDENTIAL webchat session tries to write down to a PUBLIC session");
  await context.client.sessions.create({ key: CAROL_KEY, channel: "webchat", chatType: "direct" });
  const secretRun = await say(context, CAROL_KEY, "remember: the launch code is 0000");
  await context.log.runEnded(secretRun, "the webchat session's first run to end");
  const leakRun = await say(context, CAROL_KEY, `ask ${LAB_KEY} the launch code is 0000`);
  const leak = await context.log.runEnded(leakRun, "the webchat session's ask run to end");
  const blocked = await context.log.waitFor<{ message: string }>(
    "the gateway to block the write-down",
    "policy.blocked",
    (p) => p.message.includes("write-down"),
  );
  const lab = await context.client.sessions.history({ sessionKey: LAB_KEY, limit: 500, includeTools: true });
  const leaked = JSON.stringify(lab.messages).includes("launch code");
  const message = blocked.payload.message;
  check(
    context,
    "write-down blocked",
    (leak.payload.reply ?? "").startsWith("forbidden: ") &&
      message.includes("CONFIDENTIAL") &&
      message.includes("PUBLIC") &&
      !leaked,
    `${message}${leaked ? " — BUT the text reached the lab session" : "; nothing reached the lab session"}`,
  );
}

export async function playScenario(context: ScenarioContext): Promise<void> {
  await spawnStep(context);
  await sendStep(context);
  await writeDownStep(context);
  const verify = await context.client.audit.verify({});
  check(
    context,
    "audit",
    verify.ok,
    `audit log ${verify.ok ? "intact" : "DAMAGED"}: ${verify.entries} entries verified`,
  );
}
