import type { SwitchboardClient } from "@switchboard/client";

/**
 * Whether no worker serving agent `agentId` is connected (configured or not). Then its runs wait
 * queued, and a command that shows "no active run" or times out should say so, with the command
 * that fixes it.
 */
export async function lacksWorker(client: SwitchboardClient, agentId: string): Promise<boolean> {
  const { agents } = await client.agents.list();
  const agent = agents.find((candidate) => candidate.id === agentId);
  // An agent the list does not name is neither configured nor served by any worker.
  return agent === undefined || !agent.connected;
}

export function noWorkerText(agentId: string): string {
  return `no worker for agent ${agentId} is connected, so its runs wait queued (start one: switchboard agent --agents ${agentId})`;
}
