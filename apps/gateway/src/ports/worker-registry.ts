/**
 * Worker connections: which agents each serves, its announced concurrency limit, the runs it holds
 * (its load) and the lanes waiting for a free slot. A worker is connected to one process; several
 * instances need a shared view of slots and starved lanes behind this interface.
 */
export interface WorkerRegistry<W extends { readonly isOpen: boolean }> {
  /** A connected worker serving `agentIds`; with `concurrency` it never holds more runs at once. */
  add(worker: W, agentIds: Iterable<string>, concurrency?: number): void;
  /** Forgets the worker; returns the runs it held. */
  remove(worker: W): string[];
  /** Workers serving the agent. */
  count(agentId: string): number;
  /** The agents a worker serves, or undefined once it is removed. */
  agentsOf(worker: W): Iterable<string> | undefined;
  /** Agents with at least one worker connected here. */
  agentIds(): string[];
  /** The open worker of the agent with a free slot and the lowest load. */
  pick(agentId: string): W | undefined;
  /** The worker takes a slot for `runId`. */
  take(worker: W, runId: string): void;
  /** The worker gives the slot of `runId` back. */
  release(worker: W, runId: string): void;
  /** A lane of the agent waits for a free slot. */
  starve(agentId: string, laneKey: string): void;
  /** The lane no longer waits for a slot. */
  unstarve(agentId: string, laneKey: string): void;
  /** Lanes of the agent waiting for a slot, oldest first. */
  starvedLanes(agentId: string): Iterable<string>;
}

export class InProcessWorkerRegistry<W extends { readonly isOpen: boolean }> implements WorkerRegistry<W> {
  private readonly workers = new Map<string, Set<W>>();
  private readonly load = new Map<W, Set<string>>();
  /** Announced concurrency per worker; a worker without one has no limit. */
  private readonly limit = new Map<W, number>();
  private readonly agents = new Map<W, ReadonlySet<string>>();
  /** Lanes whose next run waits for a worker slot, per agent, oldest first. */
  private readonly starved = new Map<string, Set<string>>();

  add(worker: W, agentIds: Iterable<string>, concurrency?: number): void {
    const agents = new Set(agentIds);
    this.agents.set(worker, agents);
    if (concurrency !== undefined) this.limit.set(worker, concurrency);
    for (const agentId of agents) {
      const set = this.workers.get(agentId) ?? new Set();
      set.add(worker);
      this.workers.set(agentId, set);
    }
    this.load.set(worker, new Set());
  }

  remove(worker: W): string[] {
    // Only the worker's own agents; an agent with no worker left goes, so agent ids that workers
    // served once (any id a token without an `agents` list names) do not pile up.
    for (const agentId of this.agents.get(worker) ?? []) {
      const set = this.workers.get(agentId);
      set?.delete(worker);
      if (set?.size === 0) this.workers.delete(agentId);
    }
    const held = [...(this.load.get(worker) ?? [])];
    this.load.delete(worker);
    this.limit.delete(worker);
    this.agents.delete(worker);
    return held;
  }

  count(agentId: string): number {
    return this.workers.get(agentId)?.size ?? 0;
  }

  agentsOf(worker: W): Iterable<string> | undefined {
    return this.agents.get(worker);
  }

  agentIds(): string[] {
    return [...this.workers].filter(([, set]) => set.size > 0).map(([agentId]) => agentId);
  }

  pick(agentId: string): W | undefined {
    let best: W | undefined;
    let bestLoad = Number.POSITIVE_INFINITY;
    for (const worker of this.workers.get(agentId) ?? []) {
      if (!worker.isOpen) continue;
      const load = this.load.get(worker)?.size ?? 0;
      if (load >= (this.limit.get(worker) ?? Number.POSITIVE_INFINITY)) continue;
      if (load < bestLoad) {
        best = worker;
        bestLoad = load;
      }
    }
    return best;
  }

  take(worker: W, runId: string): void {
    this.load.get(worker)?.add(runId);
  }

  release(worker: W, runId: string): void {
    this.load.get(worker)?.delete(runId);
  }

  starve(agentId: string, laneKey: string): void {
    let lanes = this.starved.get(agentId);
    if (!lanes) {
      lanes = new Set();
      this.starved.set(agentId, lanes);
    }
    lanes.add(laneKey);
  }

  unstarve(agentId: string, laneKey: string): void {
    const lanes = this.starved.get(agentId);
    if (!lanes) return;
    lanes.delete(laneKey);
    if (lanes.size === 0) this.starved.delete(agentId);
  }

  starvedLanes(agentId: string): Iterable<string> {
    return this.starved.get(agentId) ?? [];
  }
}
