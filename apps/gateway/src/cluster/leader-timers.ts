import type { Config } from "@switchboard/core";
import type { Cluster } from "@switchboard/store-pg";
import type { Logger } from "pino";
import type { AgentFlows } from "../agent-flows";

/**
 * Timers of the gateway that only one instance of a cluster runs at a time: the sub-agent
 * archiver (archiving a session twice, from two instances, would race on its transcript). Each
 * tick checks the leader lease, so the timers move to another instance within the lease when the
 * leader dies. Returns a stop function.
 */
export function startLeaderTimers(
  cluster: Cluster,
  config: Config,
  flows: AgentFlows,
  log: Logger,
  archiveEveryMs = 60_000,
): () => void {
  const timers: NodeJS.Timeout[] = [];
  const minutes = config.agents.defaults.subagents.archiveAfterMinutes;
  if (minutes > 0) {
    let running = false;
    const timer = setInterval(() => {
      if (running || !cluster.leader.isLeader) return;
      running = true;
      flows
        .archiveSweep(Date.now() - minutes * 60_000)
        .catch((error: unknown) => log.warn({ err: error }, "archive sweep failed"))
        .finally(() => {
          running = false;
        });
    }, archiveEveryMs);
    timer.unref();
    timers.push(timer);
  }
  return () => {
    for (const timer of timers) clearInterval(timer);
  };
}
