import type { SwitchboardClient } from "@switchboard/client";

/**
 * Whether agent `agentId` is configured but has no worker connected. Then its runs wait queued, and a
 * command that shows "no active run" or times out should say so, with the command that fixes it.
 */
export async function lacksWorker(client: SwitchboardClient, agentId: string): Promise<boolean> {
  const { agents } = await client.agents.list();
  const agent = agents.find((candidate) => candidate.id === agentId);
  return agent !== undefined && !agent.connected;
}

export function noWorkerText(agentId: string): string {
  return `no worker for agent ${agentId} is connected, so its runs wait queued (start one: switchboard agent --agents ${agentId})`;
}
