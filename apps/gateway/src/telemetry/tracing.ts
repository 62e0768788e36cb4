import {
  type Context,
  context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from "@opentelemetry/api";
import type { BasicTracerProvider, SpanExporter } from "@opentelemetry/sdk-trace-base";
import type { Config, RunRecord } from "@switchboard/core";
import { isSwitchboardError } from "@switchboard/core";
import { VERSION } from "../version";

export interface TracingOptions {
  /** Spans go here, each exported as it ends (tests: the SDK's `InMemorySpanExporter`). */
  exporter?: SpanExporter;
  /** The environment the OTEL_* variables are read from (default `process.env`). */
  env?: Record<string, string | undefined>;
}

/**
 * Whether traces are on: `telemetry.traces` in the config, or the standard OTEL_* variables naming
 * an OTLP exporter or endpoint; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` wins.
 */
export function tracesWanted(config: Config, env: Record<string, string | undefined>): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return false;
  const exporters = env.OTEL_TRACES_EXPORTER?.split(",").map((name) => name.trim().toLowerCase());
  if (exporters?.includes("none")) return false;
  if (config.telemetry.traces) return true;
  return (
    exporters?.includes("otlp") === true ||
    Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
  );
}

/** How long closing waits for the last spans to be exported. */
const SHUTDOWN_GRACE_MS = 3_000;

const ENDED = new Set(["ok", "error", "timeout"]);

/**
 * The OpenTelemetry SDK (provider, processors, OTLP exporter, context manager): loaded only when a
 * gateway traces, since it costs ~150 ms of every start-up and traces are off by default.
 */
async function loadSdk() {
  const [asyncHooks, otlp, resources, base] = await Promise.all([
    import("@opentelemetry/context-async-hooks"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/sdk-trace-base"),
  ]);
  return {
    AsyncLocalStorageContextManager: asyncHooks.AsyncLocalStorageContextManager,
    OTLPTraceExporter: otlp.OTLPTraceExporter,
    resourceFromAttributes: resources.resourceFromAttributes,
    BasicTracerProvider: base.BasicTracerProvider,
    BatchSpanProcessor: base.BatchSpanProcessor,
    SimpleSpanProcessor: base.SimpleSpanProcessor,
  };
}
type Sdk = Awaited<ReturnType<typeof loadSdk>>;

/** The longest attribute value (and error message) a span carries. */
const SPAN_ATTRIBUTE_MAX_LENGTH = 256;

let contextManagerSet = false;

/**
 * Spans follow work through the gateway by the async context (AsyncLocalStorage), so a run created
 * inside a traced tool call is its child without every layer passing a context along. Registered
 * once per process, and only when some gateway traces.
 */
function ensureContextManager(sdk: Sdk): void {
  if (contextManagerSet) return;
  contextManagerSet = true;
  // false when the embedding application registered its own: that one is used.
  context.setGlobalContextManager(new sdk.AsyncLocalStorageContextManager().enable());
}

function traceparentOf(span: Span): string {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${(traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/**
 * The gateway's OpenTelemetry traces: a provider of its own (not the global one, so several gateways
 * in one process keep their spans apart). One span per protocol request, per tool call and per run
 * (from creation to end); the run's span is the parent of the requests its worker makes for it and
 * of the runs started from them, and travels to the worker in `run.assigned.traceparent`. Run spans
 * live in memory: a run recovered after a restart starts a new trace.
 */
export class GatewayTracing {
  private readonly provider: BasicTracerProvider;
  private readonly tracer: Tracer;
  private readonly runs = new Map<string, Span>();

  /** Loads the SDK first (see `loadSdk`). */
  static async create(config: Config, options: TracingOptions = {}): Promise<GatewayTracing> {
    return new GatewayTracing(await loadSdk(), config, options);
  }

  private constructor(sdk: Sdk, config: Config, options: TracingOptions) {
    ensureContextManager(sdk);
    const env = options.env ?? process.env;
    const exporter =
      options.exporter ??
      new sdk.OTLPTraceExporter(
        // Absent: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT and headers itself.
        config.telemetry.traces?.endpoint
          ? { url: `${config.telemetry.traces.endpoint.replace(/\/+$/, "")}/v1/traces` }
          : {},
      );
    this.provider = new sdk.BasicTracerProvider({
      resource: sdk.resourceFromAttributes({
        "service.name": env.OTEL_SERVICE_NAME || "switchboard-gateway",
        "service.version": VERSION,
      }),
      spanProcessors: [
        options.exporter ? new sdk.SimpleSpanProcessor(exporter) : new sdk.BatchSpanProcessor(exporter),
      ],
      // Attribute values come partly from clients (ids, tool names): whatever the protocol's bounds,
      // no span carries a long one into the export queue.
      spanLimits: { attributeValueLengthLimit: SPAN_ATTRIBUTE_MAX_LENGTH },
    });
    this.tracer = this.provider.getTracer("switchboard-gateway", VERSION);
  }

  /** A protocol request's span; a worker's request for a run is a child of the run's span. */
  request<T>(
    method: string,
    params: unknown,
    role: string | undefined,
    handle: () => Promise<T>,
  ): Promise<T> {
    const runId = (params as { runId?: unknown } | undefined)?.runId;
    // Only a worker's requests join a run's trace: a client naming a run it may not even see (its
    // request refused) must not put its span into that run's trace.
    const run = typeof runId === "string" && role === "agent" ? this.runs.get(runId) : undefined;
    const parent = run ? trace.setSpan(context.active(), run) : context.active();
    const span = this.tracer.startSpan(
      method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          "rpc.system": "switchboard",
          "rpc.method": method,
          ...(role ? { "switchboard.role": role } : {}),
          ...(typeof runId === "string" ? { "switchboard.run_id": runId } : {}),
        },
      },
      parent,
    );
    return this.within(span, trace.setSpan(parent, span), handle);
  }

  /** A gateway-executed tool call's span (its policy decisions are events on it). */
  tool<T>(name: string, runId: string | undefined, handle: () => Promise<T>): Promise<T> {
    const parent = context.active();
    const span = this.tracer.startSpan(
      `tool ${name}`,
      {
        attributes: {
          "switchboard.tool": name,
          ...(runId ? { "switchboard.run_id": runId } : {}),
        },
      },
      parent,
    );
    return this.within(span, trace.setSpan(parent, span), handle);
  }

  /** A run's span starts with the run, as a child of whatever is active (the call that created it). */
  runCreated(record: RunRecord): void {
    // An end that came first (a worker gone while the record was written) leaves nothing open.
    if (this.runs.has(record.runId) || ENDED.has(record.status)) return;
    const span = this.tracer.startSpan(
      `run ${record.agentId}`,
      {
        kind: SpanKind.PRODUCER,
        attributes: {
          "switchboard.run_id": record.runId,
          "switchboard.session_key": record.sessionKey,
          "switchboard.agent_id": record.agentId,
          "switchboard.lane": record.lane,
          "switchboard.origin": record.origin ?? "unknown",
        },
      },
      context.active(),
    );
    this.runs.set(record.runId, span);
  }

  runStarted(record: RunRecord): void {
    this.runs.get(record.runId)?.addEvent("run.assigned", { "switchboard.attempt": record.attempts });
  }

  runEnded(record: RunRecord): void {
    const span = this.runs.get(record.runId);
    if (!span) return;
    this.runs.delete(record.runId);
    span.setAttribute("switchboard.run_status", record.status);
    if (record.status !== "ok")
      span.setStatus({
        code: SpanStatusCode.ERROR,
        // A worker writes a failed run's error (up to 10 000 characters): the span keeps its start.
        message: (record.error ?? record.status).slice(0, SPAN_ATTRIBUTE_MAX_LENGTH),
      });
    span.end();
  }

  /** The W3C trace context for `run.assigned`: the run's span, so the worker's spans are its children. */
  traceparent(runId: string): string | undefined {
    const span = this.runs.get(runId);
    return span ? traceparentOf(span) : undefined;
  }

  /** Runs `fn` inside the run's span (what follows a run's end: reply delivery, announce). */
  withRun<T>(runId: string, fn: () => T): T {
    const span = this.runs.get(runId);
    return span ? context.with(trace.setSpan(ROOT_CONTEXT, span), fn) : fn();
  }

  /** Ends the spans of runs still open and flushes what is buffered. */
  async shutdown(): Promise<void> {
    for (const span of this.runs.values()) span.end();
    this.runs.clear();
    // Flushes what is buffered, but an unreachable collector must not hold up the gateway's stop.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.provider.shutdown().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, SHUTDOWN_GRACE_MS);
      }),
    ]);
    clearTimeout(timer);
  }

  private async within<T>(span: Span, active: Context, handle: () => Promise<T>): Promise<T> {
    try {
      return await context.with(active, handle);
    } catch (error) {
      span.setStatus({
        code: SpanStatusCode.ERROR,
        message: isSwitchboardError(error) ? error.code : String(error),
      });
      if (error instanceof Error) span.recordException(error);
      throw error;
    } finally {
      span.end();
    }
  }
}
