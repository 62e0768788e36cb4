import type { RunRecord } from "@switchboard/core";

/**
 * How a wait ended: the run's final record (with `settled` when the end's writes were issued but
 * may not be durable yet: no answer built on it goes out before it settles), or why the waiter
 * stopped waiting first.
 */
export type RunWaitOutcome =
  | { ended: RunRecord; settled?: Promise<void> }
  | { stopped: string }
  /** The run left this process (handed to another instance): wait for it there. */
  | { moved: true };

/**
 * Callers waiting for a run's end (`agent.wait`, a waiting `sessions_send`, a summary). Only the
 * process that ends a run can wake its waiters here; with several instances, the end must reach
 * every instance (the event log) and wake the waiters there.
 */
export interface RunWaiters {
  /** Resolves when `ended` is called for `runId`, after `timeoutMs`, or when `signal` aborts. */
  wait(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<RunWaitOutcome>;
  /**
   * The run ended: wakes everyone waiting for it. With `settled`, the end's writes are issued but
   * not yet durable; the waiters get it along.
   */
  ended(record: RunRecord, settled?: Promise<void>): void;
  /** The run left this process: everyone waiting for it here is told to wait elsewhere. */
  moved(runId: string): void;
}

/** Wake-up callbacks per run id; a run nobody waits for holds no memory. */
export class InProcessRunWaiters implements RunWaiters {
  private readonly byRun = new Map<string, Set<(outcome: RunWaitOutcome) => void>>();

  wait(runId: string, timeoutMs: number, signal?: AbortSignal): Promise<RunWaitOutcome> {
    // Its caller is gone already (a request handled after its connection closed): no waiter.
    if (signal?.aborted) return Promise.resolve({ stopped: "wait aborted" });
    return new Promise<RunWaitOutcome>((resolve) => {
      let waiters = this.byRun.get(runId);
      if (!waiters) {
        waiters = new Set();
        this.byRun.set(runId, waiters);
      }
      const set = waiters;
      const forget = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        set.delete(done);
        if (set.size === 0 && this.byRun.get(runId) === set) this.byRun.delete(runId);
      };
      const done = (outcome: RunWaitOutcome) => {
        forget();
        resolve(outcome);
      };
      const onAbort = () => {
        forget();
        resolve({ stopped: "wait aborted" });
      };
      const timer = setTimeout(() => {
        forget();
        resolve({ stopped: `run still in progress after waiting ${timeoutMs} ms` });
      }, timeoutMs);
      timer.unref();
      signal?.addEventListener("abort", onAbort, { once: true });
      set.add(done);
    });
  }

  ended(record: RunRecord, settled?: Promise<void>): void {
    const waiters = this.byRun.get(record.runId);
    if (!waiters) return;
    this.byRun.delete(record.runId);
    for (const wake of [...waiters]) wake(settled ? { ended: record, settled } : { ended: record });
  }

  moved(runId: string): void {
    const waiters = this.byRun.get(runId);
    if (!waiters) return;
    this.byRun.delete(runId);
    for (const wake of [...waiters]) wake({ moved: true });
  }

  /** Runs somebody waits for (tests: nothing is left behind). */
  get size(): number {
    return this.byRun.size;
  }
}
