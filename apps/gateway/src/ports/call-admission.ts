/**
 * The facts of a send or spawn that other processes change too — the caller's budget, the wait
 * graph, the requester's children — taken together with the call's slot in one step, so that the
 * policy decision made on them holds however many calls are decided at once: one process takes
 * them in memory (`local-call-admission.ts`), several instances over their shared database
 * (cluster/cluster-limits.ts).
 *
 * The decision itself stays the policy engine's: it reads these facts as it reads the in-process
 * ones, so a call that lost a race is refused by the same rule, with the same message and audit
 * record, as one refused in a single process.
 */
export interface CallAdmission {
  /** A send by `callerKey` to `targetKey`; `waits`: the caller will wait for the reply. */
  send(callerKey: string, targetKey: string, waits: boolean): Promise<AdmittedCall>;
  /** A spawn by `requesterKey` of the child session `childKey`. */
  spawn(requesterKey: string, childKey: string): Promise<AdmittedCall>;
}

export interface AdmittedCall {
  /** Calls of this kind by the caller in the window before this one (`a2a.budget`). */
  budgetUsed: number;
  /** Send with a wait: the cycle the wait would close (`a2a.cycle`); without one the wait is recorded. */
  cycle?: string[];
  /** Spawn: the requester's children not ended yet, this one excluded (`maxChildren`). */
  activeChildren?: number;
  /** The call was refused or failed before it started: the budget slot, wait and child slot go back. */
  refused(): void;
  /** Send: the caller stopped waiting. */
  endWait(): void;
  /** Spawn: the child's run is stored (it counts from the store now), or the spawn failed. */
  childStored(): void;
}
