import { createHash } from "node:crypto";
import type { Coordination } from "./context";

/**
 * Cancellations of calls that may run on another instance: an MCP client's `notifications/cancelled`
 * arrives in a request of its own, which a load balancer may send to any instance. The instance that
 * got it and holds no such call tells the others with a NOTIFY; each checks its own calls.
 *
 * Best effort by nature, like the notification itself: a NOTIFY sent while an instance's listener
 * is reconnecting is lost, and that call then runs to its own timeout (never worse than before).
 */
export interface ClusterCancellations {
  /** Asks every other instance to cancel the call `key` names (its meaning is the caller's). */
  broadcast(key: string): Promise<void>;
  /** Handles other instances' cancellations until the returned function is called. */
  listen(handler: (key: string) => void): Promise<() => Promise<void>>;
}

/** Keys longer than this are refused before NOTIFY (whose payload must stay under 8000 bytes). */
export const MAX_CANCELLATION_KEY_BYTES = 4096;

/** The LISTEN channel of a schema's cancellations (identifiers are at most 63 bytes). */
export function cancellationChannel(schema: string): string {
  return `sb_cancel_${createHash("sha256").update(schema).digest("hex").slice(0, 24)}`;
}

export function openClusterCancellations(coordination: Coordination): ClusterCancellations {
  const channel = cancellationChannel(coordination.schema);
  const from = coordination.instanceId;
  return {
    async broadcast(key) {
      if (Buffer.byteLength(key) > MAX_CANCELLATION_KEY_BYTES) return;
      await coordination.db.query("broadcasting a cancellation", "SELECT pg_notify($1, $2)", [
        channel,
        JSON.stringify({ from, key }),
      ]);
    },
    listen(handler) {
      return coordination.listener.listen(channel, {
        notify(payload) {
          let message: { from?: unknown; key?: unknown };
          try {
            message = JSON.parse(payload) as typeof message;
          } catch {
            return;
          }
          // Its own broadcast: the sender already found no such call here.
          if (message.from === from || typeof message.key !== "string") return;
          handler(message.key);
        },
      });
    },
  };
}
