import { MAX_SUBSCRIPTIONS_PER_CONNECTION, SwitchboardError } from "@switchboard/core";
import type { Access } from "../access";
import type { Connection } from "../connection";
import { ALL_EVENTS, EventSubscriptions, type StreamSubscriber } from "../event-subscriptions";
import type { BusEvent } from "../ports/event-log";
import { InProcessReplayBudget, type ReplayBudget } from "../ports/replay-budget";
import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

/** Which bus events a connection's role lets it receive: its own, its agents', or its sessions'. */
function roleFilter(access: Access, connection: Connection): (event: BusEvent) => boolean {
  const identity = connection.identity!;
  return (event) => {
    if (event.connectionId && event.connectionId !== connection.id) return false;
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

function send(connection: Connection, event: BusEvent, text?: string, onWritten?: () => void): boolean {
  if (event.seq <= connection.lastEventSeq) return false;
  connection.lastEventSeq = event.seq;
  return connection.sendText(text ?? frameOf(event), onWritten) === "sent";
}

interface ReplayFrames {
  frames: Array<{ event: BusEvent; text: string }>;
  bytes: number;
  /** The seq below which nothing is sent (0: all of it is). */
  cut: number;
}

/**
 * The newest replayed events that fit in half the connection's send buffer (the rest is left for
 * live events), oldest first. A window bigger than one connection's buffer would otherwise be sent
 * whole, and a client resuming after a burst of big events would be dropped as a slow reader on
 * every reconnect instead of being told what it missed.
 */
function replayFrames(connection: Connection, events: BusEvent[]): ReplayFrames {
  const budget = connection.maxBufferedBytes / 2;
  const frames: ReplayFrames["frames"] = [];
  let bytes = 0;
  let cut = 0;
  for (let index = events.length - 1; index >= 0; index--) {
    const event = events[index]!;
    if (event.seq <= connection.lastEventSeq) break;
    const text = frameOf(event);
    const size = Buffer.byteLength(text);
    if (bytes + size > budget) {
      cut = event.seq + 1;
      break;
    }
    bytes += size;
    frames.push({ event, text });
  }
  frames.reverse();
  return { frames, bytes, cut };
}

/**
 * Per connection, the replay bytes it holds in the budget: given back when the connection goes,
 * should a socket's write callback never come.
 */
const heldReplays = new WeakMap<Connection, Set<() => void>>();

/**
 * Takes the replay's bytes from the budget, or refuses the subscribe (before anything is sent):
 * a replay queued on a socket whose peer does not read stays in memory until it goes.
 */
function takeReplayBytes(
  budget: ReplayBudget,
  limit: number,
  connection: Connection,
  bytes: number,
): () => void {
  const give = budget.take(connection.identity!.tokenName, bytes);
  if (!give)
    throw new SwitchboardError(
      "RATE_LIMITED",
      `after: a replay of ${bytes} bytes does not fit in what this gateway queues unsent (gateway.limits.maxQueuedReplayBytes is ${limit}, a quarter of it per token); retry once earlier replays are read, or subscribe from a later cursor`,
      { retryable: true, details: { limit: "gateway.limits.maxQueuedReplayBytes", value: limit } },
    );
  let held = heldReplays.get(connection);
  if (!held) {
    const replays = new Set<() => void>();
    held = replays;
    heldReplays.set(connection, replays);
    connection.onClosed(() => {
      for (const release of replays) release();
      replays.clear();
    });
  }
  const replays = held;
  const release = () => {
    replays.delete(release);
    give();
  };
  replays.add(release);
  return release;
}

/** Sends the replay; its bytes go back to the budget once its last frame has left for the socket. */
function sendReplay(connection: Connection, replay: ReplayFrames, release: () => void): void {
  const last = replay.frames.length - 1;
  let waiting = false;
  for (let index = 0; index <= last; index++) {
    const { event, text } = replay.frames[index]!;
    // Frames leave in order: once the last is written, so is every one before it.
    if (index === last) waiting = send(connection, event, text, release);
    else send(connection, event, text);
  }
  if (!waiting) release();
}

/** Live events, with replay from a cursor. */
export function eventMethods(
  deps: Pick<MethodDeps, "config" | "sessions" | "bus" | "access" | "replayBudget">,
): Handlers<"events.subscribe"> {
  const { sessions, bus, access } = deps;
  // Made on first use: the handler map is also built without a gateway behind it.
  let index: EventSubscriptions | undefined;
  let budget: ReplayBudget | undefined;
  const limit = () => deps.config.gateway.limits.maxQueuedReplayBytes;
  const subscribers = new WeakMap<Connection, StreamSubscriber>();

  function subscriberOf(connection: Connection): StreamSubscriber {
    let subscriber = subscribers.get(connection);
    if (subscriber) return subscriber;
    index ??= new EventSubscriptions(bus);
    const subscriptions = index;
    subscriber = {
      id: connection.id,
      follows: connection.subscriptionFilters,
      mayReceive: roleFilter(access, connection),
      deliver: (event) => {
        const held = heldDuringReplay.get(connection);
        if (held) held.push(event);
        else send(connection, event);
      },
    };
    const added = subscriber;
    subscribers.set(connection, added);
    connection.subscribed = true;
    connection.onClosed(() => subscriptions.remove(added));
    return added;
  }

  return {
    "events.subscribe": async (params, connection) => {
      const keys: string[] = [];
      const named: Array<{ key: string; field: string }> = [
        ...(params.sessionKey ? [{ key: params.sessionKey, field: "sessionKey" }] : []),
        ...(params.sessionKeys ?? []).map((key, at) => ({ key, field: `sessionKeys[${at}]` })),
      ];
      for (const { key, field } of named) {
        const sessionKey = await sessions.resolveInput(key, undefined, field);
        access.requireClientSession(connection, sessionKey, key);
        if (!keys.includes(sessionKey)) keys.push(sessionKey);
      }
      const mayReceive = roleFilter(access, connection);
      const wanted = new Set(keys);
      // One replay over every session of the call: their events come out in one `seq` order.
      const accepts =
        keys.length === 0
          ? mayReceive
          : (event: BusEvent) =>
              event.sessionKey !== undefined && wanted.has(event.sessionKey) && mayReceive(event);
      // A client resuming past what this instance has read (its reader was behind: a failover to an
      // instance whose database connection just came back) waits for the reader to catch up, so the
      // answer's `seq` and the replay reach its cursor.
      if (params.after !== undefined && params.after > bus.currentSeq) await bus.catchUp?.();
      const seq = bus.currentSeq;
      const subscriber = subscriberOf(connection);
      const subscriptions = index!;
      // Subscriptions add up (a client following two sessions gets both), as the SDK renews them.
      // They live as long as the connection, one per key, bounded so one connection's bookkeeping
      // is. All events (`*`) covers every session's, which then go.
      const follows = connection.subscriptionFilters;
      const before = new Set(follows);
      if (keys.length > 0 && !follows.has(ALL_EVENTS)) {
        const added = keys.filter((key) => !follows.has(key)).length;
        const field = params.sessionKeys ? "sessionKeys" : "sessionKey";
        if (follows.size + added > MAX_SUBSCRIPTIONS_PER_CONNECTION)
          throw new SwitchboardError(
            "RATE_LIMITED",
            `${field}: this connection would follow more than ${MAX_SUBSCRIPTIONS_PER_CONNECTION} sessions (the most one may); subscribe without a sessionKey for all events, or open another connection`,
            { details: { field, limit: MAX_SUBSCRIPTIONS_PER_CONNECTION } },
          );
      }
      // A connection that went while the keys were resolved has been removed from the index for
      // good: added back, it would stay there.
      const open = () => connection.state !== "closed";
      if (open()) subscriptions.follow(subscriber, keys);
      let missed: { after: number; before: number } | undefined;
      if (params.after !== undefined) {
        const after = params.after;
        budget ??= deps.replayBudget ?? new InProcessReplayBudget(limit());
        const replayBudget = budget;
        const lastEventSeq = connection.lastEventSeq;
        // The client holds everything up to `after` (in this numbering: the stream has reached it):
        // nothing at or below it is sent again, replayed or live.
        if (after <= seq) connection.lastEventSeq = Math.max(connection.lastEventSeq, after);
        let refused = false;
        // Events up to the connection's last seq can no longer go out (a connection's events only
        // ever rise), so an event of a session it did not follow then, from between `after` and
        // there, is missed on this connection: said so rather than skipped unseen.
        let unsentBelow = 0;
        const replayAndSend = (events: BusEvent[]): number => {
          for (const event of events) {
            if (event.seq > lastEventSeq) break;
            const followed =
              before.has(ALL_EVENTS) || (event.sessionKey !== undefined && before.has(event.sessionKey));
            if (event.seq > after && !followed) unsentBelow = event.seq + 1;
          }
          const replay = replayFrames(connection, events);
          if (replay.frames.length === 0) return replay.cut;
          let release: () => void;
          try {
            release = takeReplayBytes(replayBudget, limit(), connection, replay.bytes);
          } catch (error) {
            // Refused as if never asked: a retry must find the cursor and the subscriptions as
            // they were, or live events sent meanwhile would move the cursor past its replay.
            refused = true;
            if (open()) subscriptions.replace(subscriber, before);
            connection.lastEventSeq = lastEventSeq;
            throw error;
          }
          sendReplay(connection, replay, release);
          return replay.cut;
        };
        const replayed = bus.replay(after, accepts);
        let cut = 0;
        if (Array.isArray(replayed)) {
          // Replayed synchronously: no live event can interleave, so order and uniqueness hold.
          cut = replayAndSend(replayed);
        } else {
          // The replay covers up to `seq` (the position at the call); what arrives live meanwhile
          // is above it and waits until the replay is out.
          const held = heldDuringReplay.get(connection) ?? [];
          heldDuringReplay.set(connection, held);
          try {
            cut = replayAndSend(await replayed);
          } finally {
            heldDuringReplay.delete(connection);
            for (const event of held)
              if (!refused || follows.has(ALL_EVENTS) || (event.sessionKey && follows.has(event.sessionKey)))
                send(connection, event);
          }
        }
        // Read after the replay: a prune during it makes this later, never hides what it removed.
        const from = Math.max(await bus.replayableFrom(), cut, unsentBelow);
        if (after + 1 < from && after < seq) missed = { after, before: from };
      } else {
        connection.lastEventSeq = Math.max(connection.lastEventSeq, seq);
      }
      return { subscribed: true, seq, ...(missed ? { missed } : {}) };
    },
  };
}
