import { MAX_SUBSCRIPTIONS_PER_CONNECTION, SwitchboardError } from "@switchboard/core";
import type { Access } from "../access";
import type { Connection } from "../connection";
import type { BusEvent } from "../ports/event-log";
import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

/** Which bus events a connection may receive: its own, its agents', or its sessions'. */
function eventFilter(
  access: Access,
  connection: Connection,
  sessionKey?: string,
): (event: BusEvent) => boolean {
  const identity = connection.identity!;
  return (event) => {
    if (event.connectionId && event.connectionId !== connection.id) return false;
    if (sessionKey && event.sessionKey !== sessionKey) return false;
    if (identity.role === "operator") return true;
    if (identity.role === "agent") return event.agentId !== undefined && identity.agents.has(event.agentId);
    return access.clientMaySee(connection, event.sessionKey);
  };
}

/**
 * Live events held back per connection while an asynchronous replay (the cluster's, read from the
 * database) is being sent: sent after it, so the client sees one increasing order.
 */
const heldDuringReplay = new WeakMap<Connection, BusEvent[]>();

function frameOf(event: BusEvent): string {
  return JSON.stringify({ type: "event", event: event.event, seq: event.seq, payload: event.payload });
}

function send(connection: Connection, event: BusEvent, text?: string): void {
  if (event.seq <= connection.lastEventSeq) return;
  connection.lastEventSeq = event.seq;
  connection.sendText(text ?? frameOf(event));
}

/**
 * Sends the newest replayed events that fit in half the connection's send buffer (the rest is left
 * for live events), and returns the seq below which it sent nothing (0: it sent all). A window
 * bigger than one connection's buffer would otherwise be sent whole, and a client resuming after a
 * burst of big events would be dropped as a slow reader on every reconnect instead of being told
 * what it missed.
 */
function sendReplay(connection: Connection, events: BusEvent[]): number {
  const budget = connection.maxBufferedBytes / 2;
  const frames: Array<{ event: BusEvent; text: string }> = [];
  let total = 0;
  let cut = 0;
  for (let index = events.length - 1; index >= 0; index--) {
    const event = events[index]!;
    if (event.seq <= connection.lastEventSeq) break;
    const text = frameOf(event);
    total += Buffer.byteLength(text);
    if (total > budget) {
      cut = event.seq + 1;
      break;
    }
    frames.push({ event, text });
  }
  // Collected newest first; sent oldest first.
  for (let kept = frames.length - 1; kept >= 0; kept--)
    send(connection, frames[kept]!.event, frames[kept]!.text);
  return cut;
}

/** Live events, with replay from a cursor. */
export function eventMethods({
  sessions,
  bus,
  access,
}: Pick<MethodDeps, "sessions" | "bus" | "access">): Handlers<"events.subscribe"> {
  return {
    "events.subscribe": async (params, connection) => {
      const named = [...(params.sessionKey ? [params.sessionKey] : []), ...(params.sessionKeys ?? [])];
      const keys: string[] = [];
      for (const key of named) {
        const sessionKey = await sessions.resolveInput(key);
        access.requireClientSession(connection, sessionKey, key);
        if (!keys.includes(sessionKey)) keys.push(sessionKey);
      }
      const byKey = new Map(keys.map((key) => [key, eventFilter(access, connection, key)]));
      // One replay over every session of the call: their events come out in one `seq` order.
      const accepts =
        keys.length === 0
          ? eventFilter(access, connection)
          : (event: BusEvent) => {
              for (const filter of byKey.values()) if (filter(event)) return true;
              return false;
            };
      // A client resuming past what this instance has read (its reader was behind: a failover to an
      // instance whose database connection just came back) waits for the reader to catch up, so the
      // answer's `seq` and the replay reach its cursor.
      if (params.after !== undefined && params.after > bus.currentSeq) await bus.catchUp?.();
      const seq = bus.currentSeq;
      if (!connection.subscribed) {
        connection.subscribed = true;
        const unsubscribe = bus.subscribe({
          accepts: (event) => {
            for (const accepts of connection.subscriptionFilters.values()) if (accepts(event)) return true;
            return false;
          },
          deliver: (event) => {
            const held = heldDuringReplay.get(connection);
            if (held) held.push(event);
            else send(connection, event);
          },
        });
        connection.onClosed(unsubscribe);
      }
      // Subscriptions add up (a client following two sessions gets both), as the SDK renews them.
      // They live as long as the connection, one per key: bounded, since each one is run on every
      // event published. All events (`*`) covers every session's, which then go.
      const filters = connection.subscriptionFilters;
      if (keys.length === 0) {
        filters.clear();
        filters.set("*", accepts);
      } else if (!filters.has("*")) {
        const added = keys.filter((key) => !filters.has(key)).length;
        const field = params.sessionKeys ? "sessionKeys" : "sessionKey";
        if (filters.size + added > MAX_SUBSCRIPTIONS_PER_CONNECTION)
          throw new SwitchboardError(
            "RATE_LIMITED",
            `${field}: this connection would follow more than ${MAX_SUBSCRIPTIONS_PER_CONNECTION} sessions (the most one may); subscribe without a sessionKey for all events, or open another connection`,
            { details: { field, limit: MAX_SUBSCRIPTIONS_PER_CONNECTION } },
          );
        for (const [key, filter] of byKey) if (!filters.has(key)) filters.set(key, filter);
      }
      let missed: { after: number; before: number } | undefined;
      if (params.after !== undefined) {
        // The client holds everything up to `after` (in this numbering: the stream has reached it):
        // nothing at or below it is sent again, replayed or live.
        if (params.after <= seq) connection.lastEventSeq = Math.max(connection.lastEventSeq, params.after);
        const replayed = bus.replay(params.after, accepts);
        let cut = 0;
        if (Array.isArray(replayed)) {
          // Replayed synchronously: no live event can interleave, so order and uniqueness hold.
          cut = sendReplay(connection, replayed);
        } else {
          // The replay covers up to `seq` (the position at the call); what arrives live meanwhile
          // is above it and waits until the replay is out.
          const held = heldDuringReplay.get(connection) ?? [];
          heldDuringReplay.set(connection, held);
          try {
            cut = sendReplay(connection, await replayed);
          } finally {
            heldDuringReplay.delete(connection);
            for (const event of held) send(connection, event);
          }
        }
        // Read after the replay: a prune during it makes this later, never hides what it removed.
        const before = Math.max(await bus.replayableFrom(), cut);
        if (params.after + 1 < before && params.after < seq) missed = { after: params.after, before };
      } else {
        connection.lastEventSeq = Math.max(connection.lastEventSeq, seq);
      }
      return { subscribed: true, seq, ...(missed ? { missed } : {}) };
    },
  };
}
