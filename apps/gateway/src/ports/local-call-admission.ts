import type { AdmittedCall, CallAdmission } from "./call-admission";
import type { CallBudget } from "./call-budget";
import type { WaitGraph } from "./wait-graph";

const nothing = () => undefined;

/** `fn` at most once, however often the result is called. */
function once(fn: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    fn();
  };
}

/**
 * `CallAdmission` of one process: the budget slot, the wait and the child slot are taken when the
 * call is admitted, in one synchronous step, so calls of one session made in parallel (a run
 * firing five spawns at once) count each other before the first of them reaches its policy
 * decision. Reading the counts at the decision and recording them after it let every parallel
 * call see the same count and pass. A refused call gives back what it took.
 *
 * A spawned child counts from its admission until its run is stored (`childStored`); from then on
 * the scheduler's active runs count it. In between the two overlap for a moment, which can only
 * refuse a parallel spawn that a moment later would pass (never let one through).
 */
export class LocalCallAdmission implements CallAdmission {
  /** Requester → children admitted whose run is not stored yet. */
  private readonly admittedChildren = new Map<string, number>();

  constructor(
    private readonly budget: CallBudget,
    private readonly waits: WaitGraph,
    /** The requester's spawned runs not ended yet (the scheduler's count). */
    private readonly activeChildrenOf: (requesterKey: string) => number,
  ) {}

  async send(callerKey: string, targetKey: string, waits: boolean): Promise<AdmittedCall> {
    const budgetUsed = this.budget.used(callerKey, "send");
    const giveBack = this.budget.record(callerKey, "send");
    const cycle = waits ? this.waits.cycleFor(callerKey, targetKey) : undefined;
    const endWait = waits && !cycle ? once(this.waits.wait(callerKey, targetKey)) : nothing;
    return {
      budgetUsed,
      ...(cycle ? { cycle } : {}),
      refused: once(() => {
        giveBack();
        endWait();
      }),
      endWait,
      childStored: nothing,
    };
  }

  async spawn(requesterKey: string, _childKey: string): Promise<AdmittedCall> {
    const budgetUsed = this.budget.used(requesterKey, "spawn");
    const giveBack = this.budget.record(requesterKey, "spawn");
    const admitted = this.admittedChildren.get(requesterKey) ?? 0;
    const activeChildren = this.activeChildrenOf(requesterKey) + admitted;
    this.admittedChildren.set(requesterKey, admitted + 1);
    const settle = once(() => {
      const left = (this.admittedChildren.get(requesterKey) ?? 1) - 1;
      if (left <= 0) this.admittedChildren.delete(requesterKey);
      else this.admittedChildren.set(requesterKey, left);
    });
    return {
      budgetUsed,
      activeChildren,
      refused: once(() => {
        giveBack();
        settle();
      }),
      endWait: nothing,
      childStored: settle,
    };
  }
}
