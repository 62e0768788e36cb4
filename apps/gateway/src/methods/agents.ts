import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

/**
 * Configured agents and whether a worker serves them now, then the agents workers serve that the
 * config does not name (`configured: false`): runs of their sessions are served like any, and an
 * operator wondering why a send to one waits must see whether anything serves it.
 */
export function agentMethods({
  config,
  scheduler,
}: Pick<MethodDeps, "config" | "scheduler">): Handlers<"agents.list"> {
  return {
    "agents.list": async () => {
      const configured = new Set(config.agents.list.map((agent) => agent.id));
      return {
        agents: [
          ...config.agents.list.map((agent) => ({
            id: agent.id,
            ...(agent.name ? { name: agent.name } : {}),
            configured: true,
            connected: scheduler.hasWorker(agent.id),
            workers: scheduler.workerCount(agent.id),
          })),
          ...scheduler
            .connectedAgents()
            .filter((id) => !configured.has(id))
            .sort()
            .map((id) => ({ id, configured: false, connected: true, workers: scheduler.workerCount(id) })),
        ],
      };
    },
  };
}
