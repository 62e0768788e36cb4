import type { Level, SessionEntry, Store, TranscriptEntry } from "@switchboard/core";
import type { Gateway } from "../gateway";

/** Read-only views of a running in-process gateway's store, for invariant checks in reliability tests. */

export interface SessionSnapshot {
  key: string;
  sessionId: string;
  taint: Level;
  clearance: Level;
  updatedAt: number;
  sendPolicy?: string;
  entries: number;
}

export interface GatewaySnapshot {
  sessions: Map<string, SessionSnapshot>;
  auditCount: number;
  runCount: number;
}

export async function allSessions(store: Store): Promise<SessionEntry[]> {
  return (await store.sessions.list({ limit: 100_000, includeArchived: true })).entries;
}

export async function transcriptOf(store: Store, sessionId: string): Promise<TranscriptEntry[]> {
  return (await store.transcripts.read(sessionId, { limit: 1_000_000 })).entries;
}

export async function snapshot(gateway: Gateway): Promise<GatewaySnapshot> {
  const sessions = new Map<string, SessionSnapshot>();
  for (const entry of await allSessions(gateway.store)) {
    sessions.set(entry.key, {
      key: entry.key,
      sessionId: entry.sessionId,
      taint: entry.taint,
      clearance: entry.clearance,
      updatedAt: entry.updatedAt,
      ...(entry.sendPolicy ? { sendPolicy: entry.sendPolicy } : {}),
      entries: (await transcriptOf(gateway.store, entry.sessionId)).length,
    });
  }
  return {
    sessions,
    auditCount: await gateway.store.audit.count(),
    runCount: (await gateway.store.runs.list({})).length,
  };
}

/**
 * Waits until the gateway is quiet: no queued or running run and no background flow (reply-back
 * loops, announces, deliveries). Checked twice across a timer tick, because a run's end hands its
 * follow-up work to the flows only after the run record is stored.
 */
export async function settle(gateway: Gateway, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let quietChecks = 0;
  while (quietChecks < 2) {
    if (Date.now() > deadline) {
      const open = await gateway.store.runs.list({ statuses: ["queued", "running"] });
      throw new Error(
        `gateway did not settle: ${open.length} open runs (${open.map((run) => `${run.sessionKey}/${run.origin}/${run.status}`).join(", ")})`,
      );
    }
    await gateway.flows.idle();
    const open = await gateway.store.runs.list({ statuses: ["queued", "running"] });
    quietChecks = open.length === 0 ? quietChecks + 1 : 0;
    await new Promise((resolve) => setTimeout(resolve, open.length === 0 ? 1 : 3));
  }
}
