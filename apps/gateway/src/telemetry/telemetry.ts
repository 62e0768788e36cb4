import type { Config, RunRecord } from "@switchboard/core";
import { isSwitchboardError } from "@switchboard/core";
import { GatewayMetrics, type ToolDecision } from "./metrics";
import { GatewayTracing, type TracingOptions, tracesWanted } from "./tracing";

export type { ToolDecision } from "./metrics";

/** What the dispatcher reports: every protocol request, timed and (traces on) in a span. */
export interface RequestObserver {
  request<T>(method: string, params: unknown, role: string | undefined, handle: () => Promise<T>): Promise<T>;
}

/** What the tool-call pipeline reports. */
export interface ToolCallObserver {
  /** Runs one gateway-executed call (in its span when traces are on). */
  call<T>(tool: string, runId: string | undefined, handle: () => Promise<T>): Promise<T>;
  decided(tool: string, decision: ToolDecision): void;
}

/** What the run scheduler reports over a run's life. */
export interface RunObserver {
  created(record: RunRecord): void;
  /** Assigned to a worker (the record's `startedAt` is set). */
  started(record: RunRecord): void;
  /** `after` (what follows the end: announce, reply delivery) runs inside the run's trace. */
  ended(record: RunRecord, after: () => Promise<void>): Promise<void>;
  /**
   * Its end here was not written (several instances: another holds the run now, and counts its end):
   * its span ends, so none stays open in memory.
   */
  dropped(record: RunRecord): void;
  traceparent(runId: string): string | undefined;
}

/**
 * Metrics and traces of one gateway. Each part is undefined when off, and the services then take
 * their plain path: nothing is timed, wrapped or allocated for telemetry.
 */
export interface Telemetry {
  readonly metrics: GatewayMetrics | undefined;
  readonly tracing: GatewayTracing | undefined;
  readonly requests: RequestObserver | undefined;
  readonly toolCalls: ToolCallObserver | undefined;
  readonly runs: RunObserver | undefined;
  shutdown(): Promise<void>;
}

export interface TelemetryOptions {
  tracing?: TracingOptions;
}

function outcomeOf(error: unknown): string {
  return isSwitchboardError(error) ? error.code : "INTERNAL";
}

export async function createTelemetry(config: Config, options: TelemetryOptions = {}): Promise<Telemetry> {
  const metrics = config.telemetry.metrics.enabled ? new GatewayMetrics() : undefined;
  const tracing =
    options.tracing?.exporter || tracesWanted(config, options.tracing?.env ?? process.env)
      ? await GatewayTracing.create(config, options.tracing)
      : undefined;

  const timed = metrics
    ? async <T>(method: string, handle: () => Promise<T>): Promise<T> => {
        const started = performance.now();
        try {
          const result = await handle();
          metrics.request(method, "ok", (performance.now() - started) / 1000);
          return result;
        } catch (error) {
          metrics.request(method, outcomeOf(error), (performance.now() - started) / 1000);
          throw error;
        }
      }
    : undefined;

  const requests: RequestObserver | undefined =
    timed && tracing
      ? {
          request: (method, params, role, handle) =>
            tracing.request(method, params, role, () => timed(method, handle)),
        }
      : timed
        ? { request: (method, _params, _role, handle) => timed(method, handle) }
        : tracing
          ? { request: (method, params, role, handle) => tracing.request(method, params, role, handle) }
          : undefined;

  const toolCalls: ToolCallObserver | undefined =
    metrics || tracing
      ? {
          call: (tool, runId, handle) => (tracing ? tracing.tool(tool, runId, handle) : handle()),
          decided: (tool, decision) => metrics?.toolCall(tool, decision),
        }
      : undefined;

  const runs: RunObserver | undefined =
    metrics || tracing
      ? {
          created: (record) => tracing?.runCreated(record),
          started: (record) => {
            metrics?.runStarted(record);
            tracing?.runStarted(record);
          },
          ended: async (record, after) => {
            metrics?.runEnded(record);
            if (!tracing) return after();
            try {
              await tracing.withRun(record.runId, after);
            } finally {
              tracing.runEnded(record);
            }
          },
          dropped: (record) => tracing?.runEnded(record),
          traceparent: (runId) => tracing?.traceparent(runId),
        }
      : undefined;

  return {
    metrics,
    tracing,
    requests,
    toolCalls,
    runs,
    shutdown: async () => {
      await tracing?.shutdown();
    },
  };
}
