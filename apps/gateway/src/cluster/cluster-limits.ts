import type { Cluster } from "@switchboard/store-pg";
import type { Logger } from "pino";
import type { AdmittedCall, CallAdmission } from "../ports/call-admission";

/**
 * `CallAdmission` over the cluster's tables: the budget slot (`budget.reserve`), the wait
 * (`waits.tryWait`) and the child slot (`children.take`) are each counted and taken in one
 * transaction under a lock, and what they counted is what the policy engine decides on. A call
 * refused by any rule gives its budget slot, wait and child slot back, so a refusal costs nothing.
 * Calls of one session taken at the same moment see each other's slots: never more than a limit
 * pass. (A concurrent call refused for another reason may briefly count against the others.)
 */
export class ClusterCallAdmission implements CallAdmission {
  constructor(
    private readonly cluster: Cluster,
    private readonly log: Logger,
  ) {}

  private quietly(what: string, task: Promise<void> | undefined, context: Record<string, unknown>): void {
    void task?.catch((error: unknown) => this.log.warn({ err: error, ...context }, `could not ${what}`));
  }

  /** Both taken, or neither: what one took is given back when the other failed. */
  private async both<A, B>(
    a: Promise<A>,
    b: Promise<B>,
    undoA: (taken: A) => Promise<void> | undefined,
    undoB: (taken: B) => Promise<void> | undefined,
  ): Promise<[A, B]> {
    const [first, second] = await Promise.allSettled([a, b]);
    if (first.status === "fulfilled" && second.status === "fulfilled") return [first.value, second.value];
    if (first.status === "fulfilled") this.quietly("give back a call", undoA(first.value), {});
    if (second.status === "fulfilled") this.quietly("give back a slot", undoB(second.value), {});
    throw first.status === "rejected" ? first.reason : (second as PromiseRejectedResult).reason;
  }

  async send(callerKey: string, targetKey: string, waits: boolean): Promise<AdmittedCall> {
    const [slot, wait] = await this.both(
      this.cluster.budget.reserve(callerKey, "send"),
      waits ? this.cluster.waits.tryWait(callerKey, targetKey) : Promise.resolve(undefined),
      (taken) => taken.release(),
      (taken) => taken?.release?.(),
    );
    const context = { callerKey, targetKey };
    return {
      budgetUsed: slot.used,
      ...(wait?.cycle ? { cycle: wait.cycle } : {}),
      refused: () => {
        this.quietly("give back a refused call", slot.release(), context);
        this.quietly("remove a wait from the cluster", wait?.release?.(), context);
      },
      endWait: () => this.quietly("remove a wait from the cluster", wait?.release?.(), context),
      childStored: () => undefined,
    };
  }

  async spawn(requesterKey: string, childKey: string): Promise<AdmittedCall> {
    const [slot, child] = await this.both(
      this.cluster.budget.reserve(requesterKey, "spawn"),
      this.cluster.children.take(requesterKey, childKey),
      (taken) => taken.release(),
      (taken) => taken.settle(),
    );
    const context = { requesterKey };
    return {
      budgetUsed: slot.used,
      activeChildren: child.active,
      refused: () => {
        this.quietly("give back a refused spawn", slot.release(), context);
        this.quietly("give back a child slot", child.settle(), context);
      },
      endWait: () => undefined,
      childStored: () => this.quietly("give back a child slot", child.settle(), context),
    };
  }
}
