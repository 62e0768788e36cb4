import type { Config } from "@switchboard/core";
import { longestArchiveWindowMinutes } from "@switchboard/core";
import type { Cluster } from "@switchboard/store-pg";
import type { Logger } from "pino";
import type { AgentFlows } from "../agent-flows";
import type { ClusterRuns } from "./cluster-runs";

/**
 * Timers of the gateway that only one instance of a cluster runs at a time: the sub-agent
 * archiver (archiving a session twice, from two instances, would race on its transcript), the
 * timeouts of runs waiting in the cluster's queue (every second), and taking over announces and
 * send follow-ups left by lost instances (every 2 s). Each
 * tick checks the leader lease, so the timers move to another instance within the lease when the
 * leader dies. Returns a stop function.
 */
export function startLeaderTimers(
  cluster: Cluster,
  config: Config,
  flows: AgentFlows,
  runs: ClusterRuns,
  log: Logger,
  archiveEveryMs = 60_000,
): () => void {
  const timers: NodeJS.Timeout[] = [];
  const every = (ms: number, what: string, task: () => Promise<unknown>) => {
    let running = false;
    const timer = setInterval(() => {
      if (running || !cluster.leader.isLeader) return;
      running = true;
      task()
        .catch((error: unknown) => log.warn({ err: error, task: what }, "cluster timer failed"))
        .finally(() => {
          running = false;
        });
    }, ms);
    timer.unref();
    timers.push(timer);
  };
  if (longestArchiveWindowMinutes(config) > 0) every(archiveEveryMs, "archive", () => flows.archiveSweep());
  every(1000, "queued run timeouts", () => runs.expireQueued());
  // Announces whose run ended where nobody announced it (a lost instance's run ended by the sweep,
  // a queued run timed out) or whose instance died before finishing them, and sends whose
  // follow-up (reply turns, announce) lost its instance: performed here, once (flow claims).
  every(2000, "pending announces", async () => {
    await flows.resumePendingAnnounces();
    await flows.resumeOrphanedSends();
  });
  return () => {
    for (const timer of timers) clearInterval(timer);
  };
}
