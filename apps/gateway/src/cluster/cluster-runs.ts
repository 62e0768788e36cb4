import { type RunRecord, type Store, SwitchboardError, TERMINAL_RUN_STATUSES } from "@switchboard/core";
import type { ClusterRunLanes, LostRun } from "@switchboard/store-pg";
import type { Logger } from "pino";
import type { EventLog } from "../ports/event-log";
import type { WaitResult } from "../run-scheduler";

/** How often a run waiting for its lane (held by another instance) tries the claim again. */
const CLAIM_RETRY_MS = 25;

/** Lane key of a run, as the scheduler forms it (summaries have a lane of their own). */
export function clusterLaneKey(record: Pick<RunRecord, "sessionKey" | "lane" | "origin">): string {
  return record.origin === "summarize"
    ? `${record.sessionKey}|summary`
    : `${record.sessionKey}|${record.lane}`;
}

/**
 * The cluster's part of running runs, beside the scheduler's local lanes and workers:
 *
 * - **One active run per lane cluster-wide**: a run is claimed in `run_claims` (UNIQUE lane key,
 *   held under this instance's membership lease) before its worker gets it; while another instance
 *   holds the lane the run waits for it. The claim is released when the run ends.
 * - **Lost instances**: a run held by an instance whose lease ran out is ended `error` with a reason
 *   naming that instance (the leader's sweep, within the lease + one sweep: ≈ 6 s), and the end is
 *   announced, so waits anywhere answer.
 * - **`agent.wait` on any instance**: a run not held here is awaited on the cluster's event log
 *   (`run.ended`), with the store as the source of truth before and after subscribing.
 */
export class ClusterRuns {
  constructor(
    private readonly lanes: ClusterRunLanes,
    private readonly store: Pick<Store, "runs">,
    private readonly bus: EventLog,
    private readonly log: Logger,
  ) {}

  /** Takes the run's lane for this instance; waits while another instance's run holds it. */
  async claim(record: RunRecord): Promise<void> {
    const laneKey = clusterLaneKey(record);
    for (;;) {
      if (TERMINAL_RUN_STATUSES.includes(record.status)) return;
      if (await this.lanes.claim(laneKey, record.runId, record.agentId)) return;
      const holder = await this.lanes.holder(laneKey);
      // Claimed by this very run earlier (a reassignment to another worker here): still ours.
      if (holder?.runId === record.runId) return;
      await new Promise((resolve) => setTimeout(resolve, CLAIM_RETRY_MS));
    }
  }

  /** The run ended: its lane is free for any instance. */
  async release(record: RunRecord): Promise<void> {
    await this.lanes.release(clusterLaneKey(record), record.runId);
  }

  /**
   * The leader's sweep found runs of lost instances. The worker that executed them was connected
   * to the lost instance (its connection died with it), so each run ends `error` naming the
   * instance; its claim or queue entry is then dropped. Idempotent: a run already ended is only
   * acknowledged.
   */
  async lost(runs: { requeued: LostRun[]; failed: LostRun[] }): Promise<void> {
    for (const lost of [...runs.requeued, ...runs.failed]) {
      const reason = lost.reason ?? `gateway instance ${lost.lostInstance} was lost while running the run`;
      const record = await this.store.runs.get(lost.runId);
      if (record && !TERMINAL_RUN_STATUSES.includes(record.status)) {
        record.status = "error";
        record.error = reason;
        record.endedAt = Date.now();
        await this.store.runs.put(record);
        this.bus.publish(
          "run.ended",
          { runId: record.runId, sessionKey: record.sessionKey, status: "error", error: reason },
          { sessionKey: record.sessionKey, agentId: record.agentId },
        );
        this.log.warn(
          { runId: record.runId, lostInstance: lost.lostInstance },
          "run of a lost instance ended",
        );
      }
      await this.lanes.release(lost.laneKey, lost.runId);
      if (runs.failed.includes(lost)) await this.lanes.acknowledgeFailure(lost.runId);
    }
  }

  /** Waits for a run held by another instance (or not started yet) to end, up to `timeoutMs`. */
  async wait(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<WaitResult> {
    let finish: (record: RunRecord | undefined) => void = () => undefined;
    const ended = new Promise<RunRecord | undefined>((resolve) => {
      finish = resolve;
    });
    const unsubscribe = this.bus.subscribe({
      accepts: (event) => event.event === "run.ended" && event.payload.runId === runId,
      deliver: () => {
        void this.store.runs.get(runId).then(finish, () => finish(undefined));
      },
    });
    const timer = setTimeout(() => finish(undefined), timeoutMs);
    const onAbort = () => finish(undefined);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      // Subscribed first: an end committed from now on is heard; one committed before is stored.
      const stored = await this.store.runs.get(runId);
      if (!stored) throw new SwitchboardError("NOT_FOUND", `run not found: ${runId}`, { details: { runId } });
      if (TERMINAL_RUN_STATUSES.includes(stored.status)) return toWaitResult(stored);
      const record = await ended;
      if (record && TERMINAL_RUN_STATUSES.includes(record.status)) return toWaitResult(record);
      return {
        runId,
        status: "timeout",
        error: signal?.aborted ? "the wait was cancelled" : "run has not ended yet",
      };
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      unsubscribe();
    }
  }
}

function toWaitResult(record: RunRecord): WaitResult {
  const status =
    record.status === "ok" || record.status === "error" || record.status === "timeout"
      ? record.status
      : "timeout";
  return {
    runId: record.runId,
    status,
    ...(record.reply !== undefined ? { reply: record.reply } : {}),
    ...(record.error !== undefined ? { error: record.error } : {}),
    ...(record.startedAt !== undefined ? { startedAt: record.startedAt } : {}),
    ...(record.endedAt !== undefined ? { endedAt: record.endedAt } : {}),
  };
}
