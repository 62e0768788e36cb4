import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

/** Configured agents and whether a worker serves them now. */
export function agentMethods({
  config,
  scheduler,
}: Pick<MethodDeps, "config" | "scheduler">): Handlers<"agents.list"> {
  return {
    "agents.list": async () => ({
      agents: config.agents.list.map((agent) => ({
        id: agent.id,
        ...(agent.name ? { name: agent.name } : {}),
        configured: true,
        connected: scheduler.hasWorker(agent.id),
        workers: scheduler.workerCount(agent.id),
      })),
    }),
  };
}
