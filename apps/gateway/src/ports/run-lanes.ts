/**
 * Run claiming per lane (a session and lane: one run at a time, FIFO). Which run of a lane holds
 * it is known only to the process that claimed it; several instances need the claim in a shared
 * place (a row lock or a compare-and-set on the run record) behind this interface.
 */
export interface RunLanes {
  /** Queues `runId` at the back of its lane (`front`: at the head, for a run handed back). */
  enqueue(laneKey: string, runId: string, front?: boolean): void;
  /** The run next in line, or undefined when nothing waits (an empty lane is forgotten). */
  next(laneKey: string): string | undefined;
  /** Drops the head of the lane (a run that no longer exists). */
  skip(laneKey: string): void;
  /** `next` takes the lane: it leaves the queue and holds the lane until released. */
  claim(laneKey: string, runId: string): void;
  /** The run that holds the lane, if any. */
  holder(laneKey: string): string | undefined;
  /**
   * `runId` ended or was handed back: it gives up the lane, or leaves the queue. Returns true when
   * the lane's queue is now empty.
   */
  release(laneKey: string, runId: string): boolean;
  /** Every lane with a queue (to start them after a restart or when a worker connects). */
  laneKeys(): string[];
  /** Runs waiting in lanes whose key starts with `prefix`. */
  queuedUnder(prefix: string): number;
  /** The run holding a lane whose key starts with `prefix`. */
  holderUnder(prefix: string): string | undefined;
}

export class InProcessRunLanes implements RunLanes {
  private readonly queues = new Map<string, string[]>();
  private readonly busy = new Map<string, string>();

  enqueue(laneKey: string, runId: string, front = false): void {
    const queue = this.queues.get(laneKey) ?? [];
    if (front) queue.unshift(runId);
    else queue.push(runId);
    this.queues.set(laneKey, queue);
  }

  next(laneKey: string): string | undefined {
    const queue = this.queues.get(laneKey);
    if (!queue || queue.length === 0) {
      this.queues.delete(laneKey);
      return undefined;
    }
    return queue[0];
  }

  skip(laneKey: string): void {
    this.queues.get(laneKey)?.shift();
  }

  claim(laneKey: string, runId: string): void {
    const queue = this.queues.get(laneKey);
    if (queue?.[0] === runId) queue.shift();
    this.busy.set(laneKey, runId);
  }

  holder(laneKey: string): string | undefined {
    return this.busy.get(laneKey);
  }

  release(laneKey: string, runId: string): boolean {
    if (this.busy.get(laneKey) === runId) {
      this.busy.delete(laneKey);
      return false;
    }
    const queue = this.queues.get(laneKey);
    const index = queue?.indexOf(runId) ?? -1;
    if (queue && index >= 0) queue.splice(index, 1);
    return queue?.length === 0;
  }

  laneKeys(): string[] {
    return [...this.queues.keys()];
  }

  queuedUnder(prefix: string): number {
    let count = 0;
    for (const [laneKey, queue] of this.queues) if (laneKey.startsWith(prefix)) count += queue.length;
    return count;
  }

  holderUnder(prefix: string): string | undefined {
    for (const [laneKey, runId] of this.busy) if (laneKey.startsWith(prefix)) return runId;
    return undefined;
  }
}
