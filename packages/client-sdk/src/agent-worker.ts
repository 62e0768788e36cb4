import { type Context, context as otelContext, ROOT_CONTEXT, trace } from "@opentelemetry/api";
import {
  type EventPayload,
  formatPath,
  formatZodIssues,
  isSwitchboardError,
  type MethodParams,
  type MethodResult,
  monotonicDeadline,
  SwitchboardError,
  timerDelay,
  UsageSchema,
} from "@switchboard/core";
import { z } from "zod";
import { backoffDelay } from "./backoff";
import { type ConnectionState, SwitchboardClient } from "./client";
import { describeError } from "./client-errors";
import type { ClientOptions } from "./client-options";
import { DeltaBuffer } from "./delta-buffer";
import { type Logger, silentLogger } from "./logger";

/** A run as the gateway assigned it: message, provenance, context, recent history, tools, deadline. */
export type AssignedRun = EventPayload<"run.assigned">;

export const RunReplySchema = z.object({ reply: z.string(), usage: UsageSchema.optional() });
export type RunReply = z.input<typeof RunReplySchema>;

export type RunProgressKind = MethodParams<"run.progress">["kind"];
export type RunProgressData = Omit<MethodParams<"run.progress">, "runId" | "kind">;

export interface RunContext {
  readonly runId: string;
  /** Aborted when the run's deadline passes, the worker stops, or the connection is lost. */
  readonly signal: AbortSignal;
  readonly client: SwitchboardClient;
  /** `tools.invoke` for this run: the gateway runs the tool as the run's session. */
  invokeTool(
    name: string,
    args?: Record<string, unknown>,
    options?: { toolCallId?: string; timeoutMs?: number },
  ): Promise<MethodResult<"tools.invoke">>;
  /**
   * `run.progress` for this run, e.g. `progress("text-delta", { text })`. Text deltas are coalesced
   * (see `progressIntervalMs`): the call resolves once the delta is buffered, and everything buffered
   * is sent before any other progress, tool call, completion or failure of the run.
   */
  progress(kind: RunProgressKind, data?: RunProgressData): Promise<void>;
  /**
   * The OpenTelemetry context of the run's span in the gateway (from `run.assigned.traceparent`), or
   * undefined when the gateway does not trace. The handler already runs inside it, so spans started
   * with the active context join the run's trace; pass it explicitly where no context manager is set.
   */
  readonly traceContext: Context | undefined;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * The OpenTelemetry context a run's `traceparent` names (W3C trace context, version 00), as a remote
 * parent; undefined without one, or for an all-zero trace or span id.
 */
export function runTraceContext(run: Pick<AssignedRun, "traceparent">): Context | undefined {
  const match = run.traceparent ? TRACEPARENT.exec(run.traceparent) : null;
  if (!match) return undefined;
  const [, traceId, spanId, flags] = match as unknown as [string, string, string, string];
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId,
    spanId,
    traceFlags: Number.parseInt(flags, 16),
    isRemote: true,
  });
}

/** Returns the reply (the run completes) or throws (the run fails with the error's message). */
export type RunHandler = (run: AssignedRun, context: RunContext) => RunReply | Promise<RunReply>;

export const AgentWorkerOptionsSchema = z.object({
  /**
   * Runs handled at once (default: the client's announced concurrency, else 4). It is announced to
   * the gateway in `connect`, which never assigns more at a time and keeps the rest queued there.
   */
  concurrency: z.number().int().min(1).max(1024).optional(),
  /** Text deltas of a run are joined and sent at most this often (0 sends each delta at once; default 50). */
  progressIntervalMs: z.number().int().min(0).max(60_000).default(50),
  /** A run's buffered text deltas are sent at once when they reach this many characters (default 16 384). */
  progressMaxChars: z.number().int().min(1).max(262_144).default(16_384),
  /** How long `stop()` lets running handlers finish before aborting them (default 10 s). */
  stopGraceMs: z.number().int().min(0).max(3_600_000).default(10_000),
  /** After aborting, how long `stop()` waits for handlers to settle before failing their runs itself. */
  abortGraceMs: z.number().int().min(0).max(3_600_000).default(1_000),
  /** Close the client when the worker stops (default true). */
  closeClient: z.boolean().default(true),
});
export type AgentWorkerOptions = z.input<typeof AgentWorkerOptionsSchema> & { logger?: Logger };

/** `run.fail`'s `error` is at most this long (the protocol schema). */
const MAX_ERROR_LENGTH = 10_000;
const DEFAULT_CONCURRENCY = 4;
/** Report failures after which the gateway no longer holds the run for us: no fallback helps. */
const RUN_GONE_CODES: ReadonlySet<string> = new Set(["UNAVAILABLE", "FORBIDDEN", "NOT_FOUND"]);
/** Tries of a run's end refused as retryable: ~1.5 min in all at REPORT_BACKOFF (or the deadline). */
const REPORT_ATTEMPTS = 20;
const REPORT_BACKOFF = { initialDelayMs: 250, maxDelayMs: 5_000, jitter: true } as const;

interface ActiveRun {
  readonly run: AssignedRun;
  readonly controller: AbortController;
  deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  started: boolean;
  /** Reported to the gateway (or given up because the gateway no longer holds it for us). */
  settled: boolean;
  done: Promise<void> | undefined;
  deltas: DeltaBuffer | undefined;
}

/**
 * Serves agent ids on a role-`agent` connection: each `run.assigned` becomes a `handler(run, ctx)`
 * call whose outcome is reported once, as `run.complete` or `run.fail`.
 */
export class AgentWorker {
  readonly client: SwitchboardClient;
  readonly agentIds: ReadonlySet<string>;
  private readonly handler: RunHandler;
  private readonly options: z.output<typeof AgentWorkerOptionsSchema> & { concurrency: number };
  private readonly logger: Logger;
  private readonly runs = new Map<string, ActiveRun>();
  private readonly queue: ActiveRun[] = [];
  private readonly detach: Array<() => void> = [];
  private running = 0;
  private stopping: Promise<void> | undefined;

  constructor(
    client: SwitchboardClient,
    agentIds: readonly string[],
    handler: RunHandler,
    options: AgentWorkerOptions = {},
  ) {
    if (client.role !== "agent") {
      throw new SwitchboardError(
        "INVALID_REQUEST",
        `an agent worker needs a client connected as role agent, not ${client.role}`,
      );
    }
    if (agentIds.length === 0)
      throw new SwitchboardError("INVALID_REQUEST", "agentIds: must name at least one agent");
    const missing = agentIds.filter((id) => !client.agentIds.includes(id));
    if (missing.length > 0) {
      throw new SwitchboardError(
        "INVALID_REQUEST",
        `agentIds: the client does not serve ${missing.join(", ")} (it serves ${client.agentIds.join(", ")})`,
      );
    }
    const { logger, ...rest } = options;
    const parsed = AgentWorkerOptionsSchema.safeParse(rest);
    if (!parsed.success) {
      throw new SwitchboardError(
        "INVALID_REQUEST",
        `invalid agent worker options: ${formatZodIssues(parsed.error, "options").join("; ")}`,
        {
          details: {
            issues: parsed.error.issues.map((issue) => ({
              path: formatPath(issue.path as PropertyKey[]),
              message: issue.message,
            })),
          },
        },
      );
    }
    this.client = client;
    this.agentIds = new Set(agentIds);
    this.handler = handler;
    const concurrency = parsed.data.concurrency ?? client.concurrency ?? DEFAULT_CONCURRENCY;
    this.options = { ...parsed.data, concurrency };
    this.logger = logger ?? silentLogger;
    if (!client.announceConcurrency(concurrency)) {
      this.logger.warn(
        { concurrency },
        "the client connected before the worker was created: the gateway learns its concurrency on the next reconnect",
      );
    }
    this.detach.push(
      client.on("run.assigned", (event) => this.onAssigned(event.payload)),
      client.onStateChange((state) => this.onConnectionState(state)),
    );
  }

  /** Runs being handled right now. */
  get activeRuns(): number {
    return this.running;
  }

  /** Runs assigned but waiting for a free slot. */
  get queuedRuns(): number {
    return this.queue.length;
  }

  /**
   * Stops taking runs: running handlers get `stopGraceMs` to finish, then their signal is aborted
   * and whatever has not ended is failed. Then closes the client. Runs it never started (waiting
   * here for a slot, or assigned during the stop) are not failed: closing the connection hands
   * them back, and the gateway reassigns each once to another connected worker of its agent
   * (protocol.md), else ends it. With `closeClient: false` there is no hand-back: they fail.
   */
  stop(): Promise<void> {
    this.stopping ??= this.shutdown();
    return this.stopping;
  }

  private async shutdown(): Promise<void> {
    for (const active of this.queue.splice(0)) {
      this.clearRun(active);
      await this.decline(active);
    }
    await this.settleWithin(this.options.stopGraceMs);
    const stopReason = new SwitchboardError("UNAVAILABLE", "the agent worker is stopping", {
      retryable: true,
    });
    for (const active of this.runs.values()) active.controller.abort(stopReason);
    await this.settleWithin(this.options.abortGraceMs);
    // Handlers that ignore their signal: the gateway still hears about the run, they just lose the race.
    await Promise.all(
      [...this.runs.values()].map((active) =>
        this.report(active, { ok: false, error: "the agent worker stopped" }),
      ),
    );
    for (const detach of this.detach.splice(0)) detach();
    if (this.options.closeClient) await this.client.close();
  }

  /**
   * A run this stopping worker will not start. Held unreported, the connection's close hands it back
   * (the gateway takes back the runs of a worker that goes); failing it would end for good a run
   * that never began. A client left open has no close to hand it back with: the run fails.
   */
  private async decline(active: ActiveRun): Promise<void> {
    if (this.options.closeClient) {
      active.settled = true;
      this.logger.info(
        { runId: active.run.runId },
        "not starting a run while stopping; the gateway takes it back when the connection closes",
      );
      return;
    }
    await this.report(active, { ok: false, error: "the agent worker stopped before starting the run" });
  }

  private async settleWithin(ms: number): Promise<void> {
    const pending = [...this.runs.values()].flatMap((active) => (active.done ? [active.done] : []));
    if (pending.length === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.allSettled(pending),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, ms);
      }),
    ]);
    clearTimeout(timer);
  }

  private onAssigned(run: AssignedRun): void {
    if (!this.agentIds.has(run.agentId)) return;
    // A run taken back at a disconnect (settled) may come back to this worker once it reconnects
    // while its old handler is still winding down: that is a new assignment, not a repeat.
    const held = this.runs.get(run.runId);
    if (held && !held.settled) {
      this.logger.debug({ runId: run.runId }, "ignoring a repeated assignment of a run already held");
      return;
    }
    const active: ActiveRun = {
      run,
      controller: new AbortController(),
      deadlineTimer: undefined,
      started: false,
      settled: false,
      done: undefined,
      deltas: undefined,
    };
    if (this.stopping) {
      void this.decline(active);
      return;
    }
    this.runs.set(run.runId, active);
    if (run.deadline !== undefined) {
      const deadline = run.deadline;
      // Counted on the monotonic clock from here: a wall clock set back must not keep the run on.
      const due = monotonicDeadline(deadline);
      const arm = () => {
        active.deadlineTimer = setTimeout(
          () => {
            // A deadline past setTimeout's range (~24.8 days) fires early: wait on.
            if (performance.now() < due) return arm();
            active.controller.abort(
              new SwitchboardError("TIMEOUT", `run ${run.runId} passed its deadline`, {
                details: { deadline },
              }),
            );
          },
          timerDelay(due, performance.now()),
        );
      };
      arm();
    }
    this.queue.push(active);
    this.pump();
  }

  private onConnectionState(state: ConnectionState): void {
    if (state !== "reconnecting" && state !== "closed") return;
    // The gateway reassigns or ends the runs of a worker that disconnects (protocol.md), so
    // anything reported for them later would be refused: stop the work instead.
    const reason = new SwitchboardError(
      "UNAVAILABLE",
      "the connection to the gateway was lost; the gateway takes the run back",
      {
        retryable: true,
      },
    );
    for (const active of this.queue.splice(0)) {
      active.settled = true;
      this.clearRun(active);
    }
    for (const active of this.runs.values()) {
      active.settled = true;
      active.deltas?.discard();
      active.controller.abort(reason);
    }
  }

  private pump(): void {
    while (this.running < this.options.concurrency && this.queue.length > 0) {
      const active = this.queue.shift()!;
      active.started = true;
      this.running += 1;
      active.done = this.execute(active).finally(() => {
        this.running -= 1;
        this.clearRun(active);
        this.pump();
      });
    }
  }

  private async execute(active: ActiveRun): Promise<void> {
    const { run, controller } = active;
    let outcome: { ok: true; reply: z.output<typeof RunReplySchema> } | { ok: false; error: string };
    try {
      controller.signal.throwIfAborted();
      const context = this.context(active);
      // The handler runs in the run's trace, so its own spans (model calls) are children of the run.
      const returned = await (context.traceContext
        ? otelContext.with(context.traceContext, () => this.handler(run, context))
        : this.handler(run, context));
      const parsed = RunReplySchema.safeParse(returned);
      outcome = parsed.success
        ? { ok: true, reply: parsed.data }
        : {
            ok: false,
            error: `the run handler returned an invalid result: ${formatZodIssues(parsed.error).join("; ")}`,
          };
    } catch (error) {
      outcome = { ok: false, error: describeError(error) || "the run handler failed" };
    }
    await this.report(active, outcome);
  }

  private context(active: ActiveRun): RunContext {
    const { runId } = active.run;
    const client = this.client;
    const deltas = new DeltaBuffer(
      (text) => client.run.progress({ runId, kind: "text-delta", text }).then(() => undefined),
      this.options.progressIntervalMs,
      this.options.progressMaxChars,
      (error) =>
        this.logger.warn({ runId, error: describeError(error) }, "could not report the run's text deltas"),
    );
    active.deltas = deltas;
    const flushDeltas = () => {
      deltas
        .flush()
        .catch((error: unknown) =>
          this.logger.warn({ runId, error: describeError(error) }, "could not report the run's text deltas"),
        );
    };
    return {
      runId,
      signal: active.controller.signal,
      client,
      traceContext: runTraceContext(active.run),
      invokeTool: (name, args = {}, options = {}) => {
        // The gateway reports the tool call as progress: the text before it must arrive first.
        flushDeltas();
        return client.tools.invoke(
          {
            tool: name,
            args,
            runId,
            ...(options.toolCallId !== undefined ? { toolCallId: options.toolCallId } : {}),
          },
          {
            signal: active.controller.signal,
            ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
          },
        );
      },
      progress: async (kind, data = {}) => {
        if (kind === "text-delta" && isPlainDelta(data)) {
          await deltas.add(data.text);
          return;
        }
        flushDeltas();
        await client.run.progress({ ...data, runId, kind });
      },
    };
  }

  private async report(
    active: ActiveRun,
    outcome: { ok: true; reply: z.output<typeof RunReplySchema> } | { ok: false; error: string },
  ): Promise<void> {
    if (active.settled) return;
    active.settled = true;
    const { runId } = active.run;
    // Deltas still buffered go out first: issued before the end, they arrive before it.
    active.deltas
      ?.flush()
      .catch((error: unknown) =>
        this.logger.warn({ runId, error: describeError(error) }, "could not report the run's text deltas"),
      );
    try {
      await this.retryingWhileHeld(active, () =>
        outcome.ok
          ? this.client.run.complete({
              runId,
              reply: outcome.reply.reply,
              ...(outcome.reply.usage ? { usage: outcome.reply.usage } : {}),
            })
          : this.client.run.fail({ runId, error: outcome.error.slice(0, MAX_ERROR_LENGTH) }),
      );
    } catch (error) {
      this.logger.warn(
        { runId, error: describeError(error) },
        `could not report the run's ${outcome.ok ? "completion" : "failure"}`,
      );
      if (outcome.ok && !(isSwitchboardError(error) && RUN_GONE_CODES.has(error.code))) {
        // The completion cannot be delivered (e.g. a reply above the frame limit): fail the run now
        // rather than leave the caller waiting until its deadline.
        await this.client.run
          .fail({
            runId,
            error: undeliveredReplyError(error, outcome.reply.reply).slice(0, MAX_ERROR_LENGTH),
          })
          .catch((failError: unknown) =>
            this.logger.warn(
              { runId, error: describeError(failError) },
              "could not report the run's failure",
            ),
          );
      }
    }
  }

  /**
   * Sends a run's end, again after a retryable refusal (the gateway's database out for a moment):
   * given up, the run would hold its session's lane, and this worker's slot, until its deadline.
   * Stops once the connection drops (the gateway takes the run back), the deadline passes, the
   * worker stops, or after REPORT_ATTEMPTS tries.
   */
  private async retryingWhileHeld(active: ActiveRun, send: () => Promise<unknown>): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await send();
        return;
      } catch (error) {
        const deadline = active.run.deadline;
        const retry =
          isSwitchboardError(error) &&
          error.retryable === true &&
          attempt + 1 < REPORT_ATTEMPTS &&
          this.client.state === "open" &&
          !this.stopping &&
          (deadline === undefined || Date.now() < deadline);
        if (!retry) throw error;
        this.logger.info(
          { runId: active.run.runId, attempt: attempt + 1, error: describeError(error) },
          "the gateway could not take the run's end yet; retrying",
        );
        await new Promise((resolve) => setTimeout(resolve, backoffDelay(attempt, REPORT_BACKOFF)));
      }
    }
  }

  private clearRun(active: ActiveRun): void {
    clearTimeout(active.deadlineTimer);
    active.deltas?.discard();
    // Not the run's new assignment, when the old one ends after it came back.
    if (this.runs.get(active.run.runId) === active) this.runs.delete(active.run.runId);
  }
}

function isPlainDelta(data: RunProgressData): data is { text: string } {
  return typeof data.text === "string" && Object.keys(data).every((key) => key === "text");
}

function undeliveredReplyError(error: unknown, reply: string): string {
  if (isSwitchboardError(error) && error.code === "PAYLOAD_TOO_LARGE") {
    const limit = (error.details as { maxPayload?: number } | undefined)?.maxPayload;
    const bytes = new TextEncoder().encode(reply).length;
    return `the reply (${bytes} bytes) is too large to deliver: run.complete must fit the gateway's frame limit (limits.maxPayload${limit !== undefined ? `, ${limit} bytes` : ""})`;
  }
  return `the reply could not be delivered: ${describeError(error)}`;
}

/** Where `serve` gets its connection: an existing role-`agent` client, or options to open one. */
export type AgentConnectionOptions = Omit<ClientOptions, "role" | "agents">;

/**
 * Serves `agentIds` with `handler`. Given connection options it connects as role `agent` for
 * exactly those ids (rejecting if the first attempt fails); given a client it uses that one.
 */
export async function serve(
  connection: SwitchboardClient | AgentConnectionOptions,
  agentIds: readonly string[],
  handler: RunHandler,
  options: AgentWorkerOptions = {},
): Promise<AgentWorker> {
  if (connection instanceof SwitchboardClient) {
    const worker = new AgentWorker(connection, agentIds, handler, options);
    await connection.ready();
    return worker;
  }
  const clientOptions: ClientOptions = {
    ...connection,
    role: "agent",
    agents: [...agentIds],
    concurrency: options.concurrency ?? DEFAULT_CONCURRENCY,
  };
  const client = new SwitchboardClient(clientOptions, { failFast: true });
  // Listen before the handshake completes: a run can be assigned in the same packet as its answer.
  const worker = new AgentWorker(client, agentIds, handler, { logger: connection.logger, ...options });
  await client.ready();
  return worker;
}
