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

/** Live events, with replay from a cursor. */
export function eventMethods({
  sessions,
  bus,
  access,
}: Pick<MethodDeps, "sessions" | "bus" | "access">): Handlers<"events.subscribe"> {
  return {
    "events.subscribe": async (params, connection) => {
      let sessionKey: string | undefined;
      if (params.sessionKey) {
        sessionKey = await sessions.resolveInput(params.sessionKey);
        access.requireClientSession(connection, sessionKey);
      }
      const accepts = eventFilter(access, connection, sessionKey);
      const seq = bus.currentSeq;
      if (!connection.subscribed) {
        connection.subscribed = true;
        const unsubscribe = bus.subscribe({
          accepts: (event) => connection.subscriptionFilter?.(event) ?? false,
          deliver: (event) => {
            if (event.seq <= connection.lastEventSeq) return;
            connection.lastEventSeq = event.seq;
            connection.send({ type: "event", event: event.event, seq: event.seq, payload: event.payload });
          },
        });
        connection.onClosed(unsubscribe);
      }
      connection.subscriptionFilter = accepts;
      if (params.after !== undefined) {
        // Replay synchronously: no live event can interleave, so order and uniqueness hold.
        for (const event of bus.replay(params.after, accepts)) {
          if (event.seq <= connection.lastEventSeq) continue;
          connection.lastEventSeq = event.seq;
          connection.send({ type: "event", event: event.event, seq: event.seq, payload: event.payload });
        }
      } else {
        connection.lastEventSeq = Math.max(connection.lastEventSeq, seq);
      }
      return { subscribed: true, seq };
    },
  };
}
