import type { Cluster } from "@switchboard/store-pg";
import type { Logger } from "pino";
import type { BudgetKind, CallBudget } from "../ports/call-budget";
import { InProcessWaitGraph, type WaitGraph } from "../ports/wait-graph";

/** Entries kept per map before the oldest refreshes are dropped (memory bound). */
const MAX_ENTRIES = 10_000;

/**
 * The gateway's `CallBudget` (a synchronous port) over the cluster's call budget table: `refresh`
 * reads a session's cluster-wide counts just before its send or spawn is decided (the tool
 * backend calls it), `used` answers from that, and `record` counts here at once and in the table.
 * Sequential calls through different instances are therefore counted exactly; two calls of one
 * session decided at the same moment on two instances may both pass — the same window the
 * in-process budget leaves between its check and its record.
 */
export class ClusterCallBudgetView implements CallBudget {
  private readonly counts = new Map<string, number>();

  constructor(
    private readonly cluster: Cluster,
    private readonly log: Logger,
  ) {}

  async refresh(sessionKey: string, kinds: readonly BudgetKind[]): Promise<void> {
    const counts = await Promise.all(kinds.map((kind) => this.cluster.budget.used(sessionKey, kind)));
    if (this.counts.size > MAX_ENTRIES) this.counts.clear();
    for (const [i, kind] of kinds.entries()) this.counts.set(`${kind}\0${sessionKey}`, counts[i]!);
  }

  used(sessionKey: string, kind: BudgetKind): number {
    return this.counts.get(`${kind}\0${sessionKey}`) ?? 0;
  }

  record(sessionKey: string, kind: BudgetKind): void {
    const key = `${kind}\0${sessionKey}`;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    this.cluster.budget
      .record(sessionKey, kind)
      .catch((error: unknown) => this.log.warn({ err: error, sessionKey, kind }, "could not record a call"));
  }
}

/**
 * The gateway's `WaitGraph` (a synchronous port) over the cluster's waits table: waits of this
 * instance are checked exactly in process (as the single-process graph does), and `refresh` asks
 * the cluster, just before a send is decided, whether the caller waiting on the target would close
 * a cycle through waits recorded anywhere; `cycleFor` answers with either. Each wait is recorded
 * in the table too (removed on release, or with its instance by the sweep). Two sends closing a
 * cycle at the same moment on two instances may both pass; each then ends at its timeout.
 */
export class ClusterWaitGraphView implements WaitGraph {
  private readonly local = new InProcessWaitGraph();
  private readonly remoteCycles = new Map<string, string[] | undefined>();

  constructor(
    private readonly cluster: Cluster,
    private readonly log: Logger,
  ) {}

  async refresh(waiter: string, target: string): Promise<void> {
    const cycle = await this.cluster.waits.cycleFor(waiter, target);
    if (this.remoteCycles.size > MAX_ENTRIES) this.remoteCycles.clear();
    this.remoteCycles.set(`${waiter}\0${target}`, cycle);
  }

  cycleFor(waiter: string, target: string): string[] | undefined {
    return this.local.cycleFor(waiter, target) ?? this.remoteCycles.get(`${waiter}\0${target}`);
  }

  wait(waiter: string, target: string): () => void {
    const releaseLocal = this.local.wait(waiter, target);
    this.remoteCycles.delete(`${waiter}\0${target}`);
    const recorded = this.cluster.waits.wait(waiter, target).catch((error: unknown) => {
      this.log.warn({ err: error, waiter, target }, "could not record a wait in the cluster");
      return undefined;
    });
    return () => {
      releaseLocal();
      void recorded.then((release) =>
        release?.().catch((error: unknown) =>
          this.log.warn({ err: error, waiter, target }, "could not remove a wait from the cluster"),
        ),
      );
    };
  }
}
