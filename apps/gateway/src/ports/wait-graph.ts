import { randomUUID } from "node:crypto";
import type { RunRecord } from "@switchboard/core";

/**
 * Who is blocked waiting on whom right now, across all agent-to-agent chains: two chains can
 * dead-lock each other through the sessions' lanes just as one chain can. Only this process sees
 * its own waits; instances sharing sessions need one graph (a table, a lock service).
 */
export interface WaitGraph {
  /** The wait cycle `waiter` waiting on `target` would close (e.g. `[A, B, A]`), or undefined. */
  cycleFor(waiter: string, target: string): string[] | undefined;
  /** Marks `waiter` as blocked on `target`; the returned function ends that wait. */
  wait(waiter: string, target: string): () => void;
}

/** waiter → target → count, walked depth-first. */
export class InProcessWaitGraph implements WaitGraph {
  private readonly waitsFor = new Map<string, Map<string, number>>();

  cycleFor(waiter: string, target: string): string[] | undefined {
    if (target === waiter) return [waiter, target];
    // Depth-first from the target along current waits: reaching the waiter closes a cycle.
    const path: string[] = [];
    const seen = new Set<string>();
    const visit = (key: string): boolean => {
      if (key === waiter) return true;
      if (seen.has(key)) return false;
      seen.add(key);
      path.push(key);
      for (const next of this.waitsFor.get(key)?.keys() ?? []) if (visit(next)) return true;
      path.pop();
      return false;
    };
    return visit(target) ? [waiter, ...path, waiter] : undefined;
  }

  wait(waiter: string, target: string): () => void {
    const targets = this.waitsFor.get(waiter) ?? new Map<string, number>();
    targets.set(target, (targets.get(target) ?? 0) + 1);
    this.waitsFor.set(waiter, targets);
    return () => {
      const count = (targets.get(target) ?? 1) - 1;
      if (count <= 0) targets.delete(target);
      else targets.set(target, count);
      if (targets.size === 0 && this.waitsFor.get(waiter) === targets) this.waitsFor.delete(waiter);
    };
  }
}

/** Where a call sits in an agent-to-agent chain. */
export interface ChainPosition {
  chainId: string;
  /** Hop the new message will carry. */
  hop: number;
}

/**
 * The position of a call made by the run `record` (undefined: not in a run): one hop past the run's
 * own, or the first hop of a new chain. Derived from the durable run record, so it needs no state.
 */
export function chainPositionOf(record: RunRecord | undefined): ChainPosition {
  const provenance = record?.provenance;
  if (provenance?.kind === "agent") return { chainId: provenance.chainId, hop: provenance.hop + 1 };
  const flowChain = record?.flow?.chainId;
  if (typeof flowChain === "string") return { chainId: flowChain, hop: Number(record?.flow?.hop ?? 0) + 1 };
  return { chainId: randomUUID(), hop: 1 };
}
