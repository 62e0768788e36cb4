import type { SwitchboardClient } from "@switchboard/client";
import { afterEach, describe, expect, it } from "vitest";
import { blocked, edges, ensureProbe, KEEP_EDGES, reset, runs, startLive } from "./live";
import { type AuditEntryLike, hourOfAudit } from "./live-probe";

type Listener = (event: { payload: Record<string, unknown> }) => void;
type ListedRun = Record<string, unknown> & { status: string };

/** The part of the SDK client `live.ts` uses: events are emitted by the test, calls answer from its data. */
function fakeClient(data: { runs?: ListedRun[]; audit?: AuditEntryLike[]; spawnedBy?: string } = {}) {
  const listeners = new Map<string, Set<Listener>>();
  const missed = new Set<() => void>();
  const state = { runs: data.runs ?? [], audit: data.audit ?? [] };
  const client = {
    on(event: string, listener: Listener) {
      const set = listeners.get(event) ?? new Set();
      set.add(listener);
      listeners.set(event, set);
      return () => set.delete(listener);
    },
    onEventsMissed(listener: () => void) {
      missed.add(listener);
      return () => missed.delete(listener);
    },
    subscribe: async () => ({ subscribed: true, seq: 0 }),
    run: {
      // Like the gateway: newest first, cut at `limit` (default: queued and running).
      list: async ({ statuses, limit }: { statuses?: string[]; limit?: number }) => {
        const wanted = statuses ?? ["queued", "running"];
        const matching = state.runs.filter((run) => wanted.includes(run.status)).reverse();
        return { runs: matching.slice(0, limit ?? 50) };
      },
    },
    audit: {
      tail: async ({ limit = 50, after }: { limit?: number; after?: number }) => ({
        entries:
          after === undefined
            ? state.audit.slice(-limit)
            : state.audit.filter((entry) => (entry.index as number) > after).slice(0, limit),
      }),
    },
    sessions: {
      history: async () => ({ messages: [] }),
      status: async ({ sessionKey }: { sessionKey: string }) => ({
        sessionKey,
        ...(data.spawnedBy ? { spawnedBy: data.spawnedBy } : {}),
      }),
    },
  };
  return {
    api: client as unknown as SwitchboardClient,
    state,
    emit(event: string, payload: Record<string, unknown>) {
      for (const listener of listeners.get(event) ?? []) listener({ payload });
    },
    missEvents() {
      for (const listener of missed) listener();
    },
  };
}

const settle = () => new Promise((done) => setTimeout(done, 0));
/** Lets answers of the fake client (a few promise steps each) land, without a timer per run. */
async function flush(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await settle();
  expect(check()).toBe(true);
}

function listed(runId: string, status: string, endedAt?: number, error?: string): ListedRun {
  const now = Date.now();
  return {
    runId,
    sessionKey: `agent:main:${runId}`,
    agentId: "main",
    lane: "main",
    status,
    origin: "chat",
    createdAt: now - 10_000,
    startedAt: now - 10_000,
    ...(endedAt !== undefined ? { endedAt } : {}),
    ...(error !== undefined ? { error } : {}),
    attempts: 1,
  };
}

let stop: (() => void) | undefined;
afterEach(() => {
  stop?.();
  stop = undefined;
  reset();
});

describe("live data", () => {
  it("keeps the topology bounded through 20 000 sub-agent runs, newest edges kept, none twice", async () => {
    const fake = fakeClient({ spawnedBy: "agent:main:main" });
    stop = await startLive(fake.api);
    for (let i = 0; i < 20_000; i++) {
      const sessionKey = `agent:research:subagent:${i}`;
      fake.emit("run.started", {
        runId: `r${i}`,
        sessionKey,
        agentId: "research",
        lane: "subagent",
        startedAt: i,
      });
      fake.emit("run.ended", { runId: `r${i}`, sessionKey, status: "ok", reply: "done" });
      await flush();
    }
    expect(edges.size).toBe(KEEP_EDGES);
    expect(runs.size).toBeLessThanOrEqual(500);
    const newest = [...edges.values()].at(-1);
    expect(newest).toEqual({ from: "agent:main:main", to: "agent:research:subagent:19999", kind: "spawn" });
    // The same spawn seen again stays one edge.
    fake.emit("run.started", {
      runId: "again",
      sessionKey: "agent:research:subagent:19999",
      agentId: "research",
      lane: "subagent",
      startedAt: 1,
    });
    await settle();
    expect([...edges.values()].filter((e) => e.to === "agent:research:subagent:19999")).toHaveLength(1);
  });

  it("keeps the label of a run's reply", async () => {
    const fake = fakeClient();
    stop = await startLive(fake.api);
    fake.emit("run.started", { runId: "r1", sessionKey: "s", agentId: "main", lane: "main", startedAt: 1 });
    fake.emit("run.ended", {
      runId: "r1",
      sessionKey: "s",
      status: "ok",
      reply: "hi",
      label: "CONFIDENTIAL",
    });
    expect(runs.get("r1")?.label).toBe("CONFIDENTIAL");
  });

  it("counts a failed run behind more than 100 newer ended runs", async () => {
    const now = Date.now();
    const fake = fakeClient({
      runs: [
        listed("failed", "error", now - 60_000, "boom"),
        ...Array.from({ length: 101 }, (_, i) => listed(`ok${i}`, "ok", now - 50_000 + i)),
      ],
    });
    stop = await startLive(fake.api);
    ensureProbe();
    await until(() => runs.size > 0);
    expect(runs.get("failed")).toMatchObject({ status: "error", error: "boom" });
  });

  it("on a missed-events notice, forgets what it knew and probes again", async () => {
    const fake = fakeClient({ runs: [listed("held", "running")] });
    stop = await startLive(fake.api);
    ensureProbe();
    await until(() => runs.get("held")?.status === "running");
    fake.emit("policy.blocked", { hook: "h", ruleId: "r", message: "old block", sessionKey: "s" });
    expect(blocked.value).toHaveLength(1);

    // The run ended while the page was away and its run.ended is beyond the replay window.
    fake.state.runs = [listed("held", "ok", Date.now())];
    fake.missEvents();
    expect(runs.has("held")).toBe(false);
    expect(blocked.value).toEqual([]);
    await until(() => runs.get("held")?.status === "ok");
  });
});

describe("the hour of the audit log", () => {
  const now = Date.now();
  const entry = (index: number, kind = "delivery") => ({
    index,
    kind,
    at: now - 1000 + index,
  });

  it("pages back past 500 newer entries to find the hour's blocked call", async () => {
    const log = Array.from({ length: 1_700 }, (_, i) => entry(i, i === 300 ? "policy.blocked" : "delivery"));
    const calls: unknown[] = [];
    const read = await hourOfAudit(async ({ limit = 50, after }) => {
      calls.push(after);
      return {
        entries:
          after === undefined
            ? log.slice(-limit)
            : log.filter((e) => (e.index as number) > after).slice(0, limit),
      };
    }, now - 3_600_000);
    expect(read.map((e) => e.index)).toEqual(log.map((e) => e.index));
    expect(read.filter((e) => e.kind === "policy.blocked")).toHaveLength(1);
    // One call per page back, the last one from the start.
    expect(calls).toEqual([undefined, 699, 199, -1]);
  });

  it("stops at entries older than the hour, and after a few calls", async () => {
    const log = Array.from({ length: 100_000 }, (_, i) => ({ ...entry(i), at: i < 99_000 ? 0 : now }));
    let calls = 0;
    const tail = async ({ limit = 50, after }: { limit?: number; after?: number }) => {
      calls += 1;
      return {
        entries:
          after === undefined
            ? log.slice(-limit)
            : log.filter((e) => (e.index as number) > after).slice(0, limit),
      };
    };
    await hourOfAudit(tail, now - 3_600_000);
    // 99 000..99 999 are in the hour: two pages, then one whose oldest is older.
    expect(calls).toBe(3);
    calls = 0;
    const busy = log.map((e) => ({ ...e, at: now }));
    const read = await hourOfAudit(async (params) => {
      calls += 1;
      return {
        entries:
          params.after === undefined
            ? busy.slice(-(params.limit ?? 50))
            : busy.filter((e) => e.index > (params.after ?? 0)).slice(0, params.limit),
      };
    }, now - 3_600_000);
    expect(calls).toBe(6);
    expect(read).toHaveLength(3_000);
  });

  it("pages back through a cluster's sparse positions", async () => {
    // Positions are a transaction id times 1024 plus a place: 3 records per transaction.
    const log = Array.from({ length: 1_200 }, (_, i) => ({
      ...entry(i % 3, i === 10 ? "policy.blocked" : "delivery"),
      position: Math.floor(i / 3) * 1024 + (i % 3),
    }));
    const read = await hourOfAudit(
      async ({ limit = 50, after }) => ({
        entries:
          after === undefined ? log.slice(-limit) : log.filter((e) => e.position > after).slice(0, limit),
      }),
      now - 3_600_000,
    );
    expect(read.map((e) => e.position)).toEqual(log.map((e) => e.position));
  });
});
