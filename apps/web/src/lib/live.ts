import { signal } from "@preact/signals";
import type { SwitchboardClient } from "@switchboard/client";
import type { Edge, HistoryMessage } from "./format";
import { type AuditEntryLike, blockedCall, hourOfAudit } from "./live-probe";

/**
 * What the page learns from the event stream (and one probe at sign-in): runs with their timelines,
 * blocked calls, who talks to whom. Runs that started before the page opened (running, queued, and
 * the last hour's ended ones) come from `runs.list`.
 */

export interface RunEvent {
  at: number;
  text: string;
}

export interface RunInfo {
  runId: string;
  sessionKey: string;
  agentId: string;
  lane: string;
  startedAt: number;
  endedAt?: number;
  status: "running" | "ok" | "error" | "timeout";
  error?: string;
  reply?: string;
  /** The label the reply or error carries (from `run.ended`). */
  label?: string;
  timeline: RunEvent[];
  /** Tool calls made and not answered yet, by id: a pending `sessions_send` means "waiting". */
  pendingTools: Map<string, string>;
}

type ListedRun = Awaited<ReturnType<SwitchboardClient["run"]["list"]>>["runs"][number];

/** A run known from `runs.list` (it started before this page opened), as running. */
function listedRun(run: ListedRun): RunInfo {
  const startedAt = run.startedAt ?? run.createdAt;
  return {
    runId: run.runId,
    sessionKey: run.sessionKey,
    agentId: run.agentId,
    lane: run.lane,
    startedAt,
    status: "running",
    timeline: [{ at: startedAt, text: `started on lane ${run.lane} (before this page opened)` }],
    pendingTools: new Map(),
  };
}

export interface BlockedCall {
  at: number;
  hook: string;
  ruleId: string | null;
  message: string;
  sessionKey?: string | undefined;
  target?: string | undefined;
}

export const runs = new Map<string, RunInfo>();
/** Bumped on every change of `runs`, `edges` or `queued`, so views re-render. */
export const liveRevision = signal(0);
export const blocked = signal<BlockedCall[]>([]);
/**
 * Sends and spawns seen, keyed by kind/from/to, oldest first: a tab left open for days sees edges
 * without end, and the topology only ever shows those near recent runs, so the oldest go.
 */
export const edges = new Map<string, Edge>();
/** Runs queued behind a session's lanes (from `runs.list` at sign-in). */
export const queued = new Map<string, number>();
export const probed = signal(false);

const KEEP_ENDED_RUNS = 500;
export const KEEP_EDGES = 1_000;
/** Failed runs the probe asks for on their own (newer ok runs would crowd them out of one list). */
const FAILED_RUNS = 200;
const ENRICH_AT_ONCE = 8;
let enriching = 0;
let bumpScheduled = false;

function bump(): void {
  if (bumpScheduled) return;
  bumpScheduled = true;
  // Coalesce bursts of events into one render.
  setTimeout(() => {
    bumpScheduled = false;
    liveRevision.value += 1;
  }, 50);
}

function trimEnded(): void {
  if (runs.size <= KEEP_ENDED_RUNS) return;
  for (const [id, run] of runs) {
    if (runs.size <= KEEP_ENDED_RUNS) break;
    if (run.status !== "running") runs.delete(id);
  }
}

export function isWaiting(run: RunInfo): boolean {
  return run.status === "running" && [...run.pendingTools.values()].includes("sessions_send");
}

function addEdge(edge: Edge): void {
  const key = `${edge.kind}\u0000${edge.from}\u0000${edge.to}`;
  // Seen again: it moves to the newest end, so a chain still talking keeps its edges.
  edges.delete(key);
  edges.set(key, edge);
  for (const oldest of edges.keys()) {
    if (edges.size <= KEEP_EDGES) break;
    edges.delete(oldest);
  }
}

/** Who started this session's run: a send from another session (provenance) or a spawn (parent). */
async function enrich(api: SwitchboardClient, sessionKey: string): Promise<void> {
  if (enriching >= ENRICH_AT_ONCE) return;
  enriching += 1;
  const mine = generation;
  try {
    const [history, status] = await Promise.all([
      api.sessions.history({ sessionKey, limit: 3 }),
      api.sessions.status({ sessionKey }),
    ]);
    if (mine !== generation) return;
    const input = [...(history.messages as HistoryMessage[])].reverse().find((m) => m.provenance);
    if (input?.provenance?.kind === "agent") {
      addEdge({ from: input.provenance.fromSessionKey, to: sessionKey, kind: "send" });
    }
    if (status.spawnedBy) addEdge({ from: status.spawnedBy, to: sessionKey, kind: "spawn" });
    bump();
  } catch {
    // A session deleted meanwhile, or not readable: the topology just lacks that edge.
  } finally {
    enriching -= 1;
  }
}

export function reset(): void {
  // Answers to calls made before (a probe, an enrichment) describe what was reset: they are dropped.
  generation += 1;
  probing = undefined;
  runs.clear();
  edges.clear();
  queued.clear();
  blocked.value = [];
  probed.value = false;
}

/** Subscribes to every event (operator) and seeds the runs in progress. Returns the unsubscribe. */
export async function startLive(api: SwitchboardClient): Promise<() => void> {
  reset();
  const offs = [
    api.on("run.started", (event) => {
      const p = event.payload;
      runs.set(p.runId, {
        runId: p.runId,
        sessionKey: p.sessionKey,
        agentId: p.agentId,
        lane: p.lane,
        startedAt: p.startedAt,
        status: "running",
        timeline: [{ at: p.startedAt, text: `started on lane ${p.lane} (agent ${p.agentId})` }],
        pendingTools: new Map(),
      });
      const waiting = queued.get(p.sessionKey);
      if (waiting) queued.set(p.sessionKey, waiting - 1);
      trimEnded();
      void enrich(api, p.sessionKey);
      bump();
    }),
    api.on("run.progress", (event) => {
      const p = event.payload;
      const run = runs.get(p.runId);
      if (!run || p.kind === "text-delta") return;
      if (p.kind === "tool-call") {
        run.pendingTools.set(p.toolCallId ?? p.name ?? "?", p.name ?? "?");
        run.timeline.push({ at: Date.now(), text: `tool call ${p.name ?? "?"}` });
      } else {
        run.pendingTools.delete(p.toolCallId ?? p.name ?? "?");
        run.timeline.push({ at: Date.now(), text: `tool result ${p.name ?? "?"}` });
      }
      bump();
    }),
    api.on("run.ended", (event) => {
      const p = event.payload;
      const run = runs.get(p.runId);
      const at = Date.now();
      const ended: RunInfo = run ?? {
        runId: p.runId,
        sessionKey: p.sessionKey,
        agentId: "?",
        lane: "?",
        startedAt: at,
        status: "running",
        timeline: [],
        pendingTools: new Map(),
      };
      ended.status = p.status;
      ended.endedAt = at;
      ended.pendingTools.clear();
      if (p.error !== undefined) ended.error = p.error;
      if (p.reply !== undefined) ended.reply = p.reply;
      if (p.label !== undefined) ended.label = p.label;
      ended.timeline.push({
        at,
        text: p.status === "ok" ? "ended ok" : `ended ${p.status}: ${p.error ?? ""}`,
      });
      runs.set(p.runId, ended);
      bump();
    }),
    api.on("policy.blocked", (event) => {
      blocked.value = [{ at: Date.now(), ...event.payload }, ...blocked.value].slice(0, 200);
    }),
  ];
  // A reconnect whose replay could not cover the time away: what the lost events told (a run that
  // ended, a call blocked) is read again, or ended runs would show as working until a reload.
  offs.push(
    api.onEventsMissed(() => {
      reset();
      bump();
      if (probeWanted) ensureProbe();
    }),
  );
  await api.subscribe({});
  probeClient = api;
  if (probeWanted) ensureProbe();
  return () => {
    probeClient = undefined;
    for (const off of offs) off();
  };
}

let probeClient: SwitchboardClient | undefined;
/** Bumped by `reset()`: a probe or enrichment from before must not write into the data after it. */
let generation = 0;
let probing: SwitchboardClient | undefined;
/** A view asked for the probe (possibly before the subscription was up). */
let probeWanted = false;

/**
 * Called by the views that show runs (Overview, Agents and runs): the probe costs a status call per
 * recently active session, so the Sessions and Session views (and their first paint) do without it.
 */
export function ensureProbe(): void {
  probeWanted = true;
  const api = probeClient;
  if (!api || probing === api) return;
  probing = api;
  void probe(api);
}

/** Runs that were already in progress when the page opened, and the last hour's blocked calls. */
async function probe(api: SwitchboardClient): Promise<void> {
  const mine = generation;
  try {
    const hourAgo = Date.now() - 3_600_000;
    const [active, recent, failed, audit] = await Promise.all([
      api.run.list({}),
      api.run.list({ statuses: ["ok", "error", "timeout"], limit: 100 }),
      api.run.list({ statuses: ["error", "timeout"], limit: FAILED_RUNS }),
      hourOfAudit((params) => api.audit.tail(params), hourAgo),
    ]);
    if (mine !== generation) return;
    for (const run of active.runs) {
      if (run.status === "queued") {
        queued.set(run.sessionKey, (queued.get(run.sessionKey) ?? 0) + 1);
        continue;
      }
      if (runs.has(run.runId)) continue;
      runs.set(run.runId, listedRun(run));
      void enrich(api, run.sessionKey);
    }
    for (const run of [...recent.runs, ...failed.runs]) {
      if (runs.has(run.runId) || run.endedAt === undefined || run.endedAt < hourAgo) continue;
      if (run.status === "queued" || run.status === "running") continue;
      const info = listedRun(run);
      runs.set(run.runId, {
        ...info,
        endedAt: run.endedAt,
        status: run.status,
        ...(run.error !== undefined ? { error: run.error } : {}),
        timeline: [
          ...info.timeline,
          { at: run.endedAt, text: `ended ${run.status}${run.error ? `: ${run.error}` : ""}` },
        ],
      });
    }
    trimEnded();
    const earlier = audit
      .map((entry: AuditEntryLike) => blockedCall(entry, hourAgo))
      .filter((b): b is BlockedCall => b !== undefined);
    earlier.sort((a, b) => b.at - a.at);
    // Events that arrived during the probe are newer than anything in the audit tail.
    const seen = new Set(blocked.value.map((b) => `${b.message}\u0000${b.sessionKey}`));
    blocked.value = [
      ...blocked.value,
      ...earlier.filter((b) => !seen.has(`${b.message}\u0000${b.sessionKey}`)),
    ];
  } catch {
    // The overview then shows only what happens from now on.
  } finally {
    if (mine === generation) {
      probed.value = true;
      bump();
    }
  }
}
