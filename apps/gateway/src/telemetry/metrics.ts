import { isToolName, type RunRecord, type Store } from "@switchboard/core";
import { Counter, collectDefaultMetrics, Gauge, Registry } from "prom-client";
import { SeriesCounter, SeriesHistogram } from "./series";

/** Latency buckets (seconds) for requests and store writes: sub-millisecond to seconds. */
const FAST_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Buckets for queue waits and run durations, which are model-bound: milliseconds to minutes. */
const RUN_BUCKETS = [0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800];

/** Distinct `tool` label values kept apart; the rest are counted as `other`. */
const MAX_TOOL_LABELS = 200;

/** What a tool call came to at the policy: executed, refused, or executed with redacted text. */
export type ToolDecision = "allow" | "block" | "redact";

/** Live figures read only when scraped, so nobody pays for them between scrapes. */
export interface MetricSources {
  connections(): Iterable<{ identity?: { role: string } | undefined }>;
  eventsPublished(): number;
  sessions(): Promise<number>;
  /** What retention pruned since start. */
  retentionPruned(): { runs: number; archives: number };
}

const STORE_WRITES = {
  sessions: ["put", "touch", "delete"],
  transcripts: ["append", "create", "archive", "remove"],
  runs: ["put"],
  audit: ["append"],
  meta: ["set"],
} as const;

let processRegistry: Registry | undefined;

/**
 * Event-loop delay, RSS, heap, GC and handles: prom-client's process metrics. They describe the
 * process, not one gateway, so one registry per process serves every gateway's scrape (its monitors
 * are started once, never once per gateway).
 */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

/**
 * The gateway's Prometheus metrics, in a registry of its own (several gateways may share a process).
 * Counters and histograms are updated on the hot path (`series.ts`: a map lookup and an add); gauges
 * that would need bookkeeping are computed at scrape time from `MetricSources` instead.
 */
export class GatewayMetrics {
  readonly registry = new Registry();
  private sources: MetricSources | undefined;
  private readonly toolNames = new Set<string>();
  private readonly requests: SeriesCounter;
  private readonly requestSeconds: SeriesHistogram;
  private readonly toolCalls: SeriesCounter;
  private readonly runs: SeriesCounter;
  private readonly queueWait: SeriesHistogram;
  private readonly runSeconds: SeriesHistogram;
  private readonly storeWrites: SeriesCounter;
  private readonly storeSeconds: SeriesHistogram;

  constructor() {
    const registers = [this.registry];
    processMetrics();
    this.requests = new SeriesCounter({
      name: "switchboard_requests_total",
      help: "Protocol requests handled, by method and outcome (ok or the error code).",
      labelNames: ["method", "outcome"],
      registers,
    });
    this.requestSeconds = new SeriesHistogram({
      name: "switchboard_request_duration_seconds",
      help: "Time to answer a protocol request, by method.",
      labelNames: ["method"],
      buckets: FAST_BUCKETS,
      registers,
    });
    this.toolCalls = new SeriesCounter({
      name: "switchboard_tool_calls_total",
      help: "Tool calls by tool and policy decision (allow, block, redact).",
      labelNames: ["tool", "decision"],
      registers,
    });
    this.runs = new SeriesCounter({
      name: "switchboard_runs_total",
      help: "Runs ended, by status (ok, error, timeout).",
      labelNames: ["status"],
      registers,
    });
    this.queueWait = new SeriesHistogram({
      name: "switchboard_run_queue_wait_seconds",
      help: "Time from a run's creation to its assignment to a worker, by lane.",
      labelNames: ["lane"],
      buckets: RUN_BUCKETS,
      registers,
    });
    this.runSeconds = new SeriesHistogram({
      name: "switchboard_run_duration_seconds",
      help: "Time from a run's assignment to its end, by lane and status.",
      labelNames: ["lane", "status"],
      buckets: RUN_BUCKETS,
      registers,
    });
    this.storeWrites = new SeriesCounter({
      name: "switchboard_store_writes_total",
      help: "Store writes (appends, puts) by operation and outcome (ok or error).",
      labelNames: ["op", "outcome"],
      registers,
    });
    this.storeSeconds = new SeriesHistogram({
      name: "switchboard_store_write_duration_seconds",
      help: "Time until a store write is durable (group commit with fsync, or the database round trip).",
      labelNames: ["op"],
      buckets: FAST_BUCKETS,
      registers,
    });
    const metrics = this;
    new Gauge({
      name: "switchboard_connections",
      help: "Open WebSocket connections by role (pending: not yet through the handshake).",
      labelNames: ["role"],
      registers,
      collect() {
        this.reset();
        const counts = new Map<string, number>();
        for (const connection of metrics.sources?.connections() ?? []) {
          const role = connection.identity?.role ?? "pending";
          counts.set(role, (counts.get(role) ?? 0) + 1);
        }
        for (const [role, count] of counts) this.set({ role }, count);
      },
    });
    new Counter({
      name: "switchboard_events_published_total",
      help: "Events numbered and sent since the gateway started (published and direct run.assigned).",
      registers,
      collect() {
        this.reset();
        this.inc(metrics.sources?.eventsPublished() ?? 0);
      },
    });
    new Counter({
      name: "switchboard_retention_pruned_total",
      help: "Ended runs and archived transcripts pruned by retention since the gateway started.",
      labelNames: ["kind"],
      registers,
      collect() {
        this.reset();
        const pruned = metrics.sources?.retentionPruned() ?? { runs: 0, archives: 0 };
        this.inc({ kind: "runs" }, pruned.runs);
        this.inc({ kind: "archives" }, pruned.archives);
      },
    });
    new Gauge({
      name: "switchboard_sessions",
      help: "Sessions in the index (archived sub-agent sessions included).",
      registers,
      async collect() {
        if (metrics.sources) this.set(await metrics.sources.sessions());
      },
    });
  }

  /** Wired once the transport and event bus exist. */
  setSources(sources: MetricSources): void {
    this.sources = sources;
  }

  request(method: string, outcome: string, seconds: number): void {
    this.requests.inc({ method, outcome });
    this.requestSeconds.observe({ method }, seconds);
  }

  toolCall(tool: string, decision: ToolDecision): void {
    // Workers name the tools they ran themselves: past a bound, new names share one series. The
    // gateway's own tools always keep theirs (a worker naming 200 made-up tools must not hide them).
    if (!this.toolNames.has(tool) && !isToolName(tool)) {
      if (this.toolNames.size >= MAX_TOOL_LABELS) tool = "other";
      else this.toolNames.add(tool);
    }
    this.toolCalls.inc({ tool, decision });
  }

  runStarted(record: RunRecord): void {
    if (record.startedAt !== undefined)
      this.queueWait.observe({ lane: record.lane }, Math.max(0, record.startedAt - record.createdAt) / 1000);
  }

  runEnded(record: RunRecord): void {
    this.runs.inc({ status: record.status });
    if (record.startedAt !== undefined && record.endedAt !== undefined)
      this.runSeconds.observe(
        { lane: record.lane, status: record.status },
        Math.max(0, record.endedAt - record.startedAt) / 1000,
      );
  }

  /** The Prometheus text exposition of every metric. */
  async scrape(): Promise<string> {
    const [own, process] = await Promise.all([this.registry.metrics(), processMetrics().metrics()]);
    return `${own}${process}`;
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /**
   * The store with its writes timed (until the promise settles: the write is durable then). Reads
   * pass through untouched; the wrapper is per sub-store, so `store.runs.put` costs one extra call.
   */
  instrumentStore<S extends Store>(store: S): S {
    const parts = new Map<PropertyKey, unknown>();
    for (const [part, methods] of Object.entries(STORE_WRITES) as Array<
      [keyof typeof STORE_WRITES, readonly string[]]
    >) {
      const timed = new Map<PropertyKey, unknown>();
      const target = store[part] as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
      for (const method of methods) {
        const original = target[method];
        if (typeof original !== "function") continue;
        const labels = { op: `${part}.${method}` };
        const ok = { ...labels, outcome: "ok" };
        const failed = { ...labels, outcome: "error" };
        timed.set(method, async (...args: unknown[]) => {
          const started = performance.now();
          try {
            const result = await original.apply(target, args);
            this.storeWrites.inc(ok);
            this.storeSeconds.observe(labels, (performance.now() - started) / 1000);
            return result;
          } catch (error) {
            this.storeWrites.inc(failed);
            throw error;
          }
        });
      }
      parts.set(part, passThrough(target, timed));
    }
    return passThrough(store, parts);
  }
}

/**
 * `target` with some properties replaced; everything else is read from `target` itself, and its
 * methods run with `this` = `target` (a store's own state never lands on the wrapper).
 *
 * A plain object, not a Proxy: every store call of a send went through two proxy traps (the store,
 * then its part), which V8 cannot inline. The wrapper inherits from `target`, so data properties
 * are read live; methods (own or inherited) get one bound copy each, made here, and accessors a
 * getter that reads `target`'s.
 */
function passThrough<T extends object>(target: T, replaced: Map<PropertyKey, unknown>): T {
  const wrapper = Object.create(target) as Record<PropertyKey, unknown>;
  const defined = new Set<PropertyKey>(replaced.keys());
  for (
    let level: object | null = target;
    level !== null && level !== Object.prototype;
    level = Object.getPrototypeOf(level) as object | null
  ) {
    for (const key of Reflect.ownKeys(level)) {
      if (key === "constructor" || defined.has(key)) continue;
      defined.add(key);
      const descriptor = Reflect.getOwnPropertyDescriptor(level, key)!;
      // Defined, not assigned: a read-only property up the chain would refuse an assignment.
      if (typeof descriptor.value === "function") {
        const value = (descriptor.value as (...args: unknown[]) => unknown).bind(target);
        Object.defineProperty(wrapper, key, { value, writable: true, configurable: true });
      } else if (descriptor.get) {
        Object.defineProperty(wrapper, key, {
          get: () => Reflect.get(target, key, target),
          configurable: true,
        });
      }
    }
  }
  for (const [key, value] of replaced) {
    Object.defineProperty(wrapper, key, { value, writable: true, configurable: true });
  }
  return wrapper as T;
}
