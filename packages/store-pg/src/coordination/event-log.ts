import { createHash, randomUUID } from "node:crypto";
import { type EventName, type EventPayload, SwitchboardError } from "@switchboard/core";
import { toNumber } from "../versions";

/** `cluster_meta` row: the newest seq retention removed from the event table. */
const PRUNED_THROUGH = "events.prunedThrough";

import { clusterValue } from "./cluster-meta";
import type { Coordination } from "./context";

/** An event as subscribers see it (the gateway's `BusEvent`). */
export interface ClusterEvent {
  event: string;
  seq: number;
  payload: Record<string, unknown>;
  sessionKey?: string;
  agentId?: string;
  connectionId?: string;
}

export interface ClusterEventSubscriber {
  accepts(event: ClusterEvent): boolean;
  deliver(event: ClusterEvent): void;
}

export interface ClusterEventScope {
  sessionKey?: string;
  agentId?: string;
  connectionId?: string;
}

/**
 * Backs the gateway's `EventLog` port when several instances share one database.
 *
 * What changes for callers: `publish` and `withSeq` resolve with the seq once the event is
 * committed (the seq is not known before); local subscribers get every instance's events —
 * this instance's own included — from the database reader, in one global seq order, so delivery
 * is a few milliseconds after the publish instead of synchronous; `replay` reads the database and
 * is async; `stop` is async. `epoch` identifies the cluster's event stream (the SDK resumes by
 * epoch + seq): the same on every instance, unlike an instance id.
 */
export interface ClusterEventLog {
  readonly epoch: string;
  /** The seq of the last event this instance delivered (or the stream's position at open). */
  readonly currentSeq: number;
  publish<E extends EventName>(
    event: E,
    payload: EventPayload<E>,
    scope?: ClusterEventScope,
  ): Promise<number>;
  /**
   * Calls `send` with a fresh seq for a frame sent directly to one peer of this instance, in order
   * with the events delivered here (it is called when the reader reaches that seq). Such seqs are
   * never replayed and other instances skip them.
   */
  withSeq(send: (seq: number) => void): Promise<number>;
  /**
   * Retained events with `seq > after` up to `currentSeq` at the call, oldest first. Subscribe
   * first, then replay: the subscriber gets everything after that point live, with no overlap.
   */
  replay(after: number, accepts: (event: ClusterEvent) => boolean): Promise<ClusterEvent[]>;
  subscribe(subscriber: ClusterEventSubscriber): () => void;
  /** Reads and delivers everything committed since the last delivered seq (also run on wake-ups). */
  catchUp(): Promise<void>;
  /**
   * The lowest seq from which every event is still retained: one above the newest event retention
   * removed (1 when none was: numbers below the table's first were never handed out). A cursor
   * below it minus one has lost events.
   */
  replayableFrom(): Promise<number>;
  /**
   * Retention: deletes events beyond the newest `keep`, except those younger than `minAgeMs` (an
   * instance reading behind must not lose them); returns how many. The table holds at most `keep`
   * events or `minAgeMs` worth of them, whichever is more.
   */
  prune(options: { keep: number; minAgeMs?: number }): Promise<number>;
  /** Stops the listener and timers (the coordination's pool stays open). */
  stop(): Promise<void>;
}

export interface ClusterEventLogOptions {
  /**
   * Safety-net poll (ms): a catch-up read even without a NOTIFY, for a wake-up lost in a way the
   * listener connection cannot notice (a half-open TCP connection). Default 1000.
   */
  pollMs?: number;
  /** Delay before re-opening a lost listener connection (ms). Default 250. */
  reconnectMs?: number;
  /** Rows per catch-up read. Default 1000. */
  readBatch?: number;
  /** Failures of the background reader (the next wake-up or poll tries again). */
  onError?: (error: unknown) => void;
}

/** Events per publishing statement. */
const MAX_BATCH = 500;
/**
 * A NOTIFY payload must be shorter than 8000 bytes; a batch whose events fit in this many rides
 * along with its wake-up, and listeners deliver it without reading the table.
 */
const MAX_CARRIED_BYTES = 7900;
/** Carried batches waiting for a reader before they are dropped for one read of the table. */
const MAX_CARRIED = 1000;
/** First key of the publish lock; the second is the schema's events table. */
const EVENT_LOCK_CLASS = 0x5357_4245; // "SWBE"

interface PendingEvent {
  event: string;
  payload: string;
  scope: ClusterEventScope;
  direct: boolean;
  send?: (seq: number) => void;
  resolve: (seq: number) => void;
  reject: (error: unknown) => void;
}

interface EventRow {
  seq: string;
  event: string;
  payload: Record<string, unknown>;
  session_key: string | null;
  agent_id: string | null;
  connection_id: string | null;
  direct: boolean;
}

/** The LISTEN channel of a schema (identifiers are at most 63 bytes; a schema name may be 63). */
export function eventChannel(schema: string): string {
  return `sb_events_${createHash("sha256").update(schema).digest("hex").slice(0, 24)}`;
}

/**
 * Opens the event log of one instance.
 *
 * Order: seq numbers are taken from a sequence inside a transaction that first takes a
 * transaction-level advisory lock, held until COMMIT. So the next publisher (on any instance) can
 * only draw its numbers after the previous one committed: seq order is commit order, and a reader
 * that sees seq n also sees every retained seq below n — it can never deliver n and later find
 * n-1. The lock is one hot spot for the whole cluster, so each instance batches every event
 * published in the same tick into one transaction (one lock acquisition per batch, not per event).
 *
 * Wake-ups: the publishing transaction NOTIFYs the schema's channel (delivered at commit); every
 * instance LISTENs on its one listener connection (`listener.ts`) and then reads `seq > last
 * delivered` in order. A lost listener connection is re-opened and followed by a catch-up read; a
 * slow poll covers wake-ups lost without the connection noticing.
 */
export async function openClusterEventLog(
  coordination: Coordination,
  options: ClusterEventLogOptions = {},
): Promise<ClusterEventLog> {
  const pollMs = options.pollMs ?? 1000;
  const reconnectMs = options.reconnectMs ?? 250;
  const readBatch = options.readBatch ?? 1000;
  const { db, q, instanceId, logger } = coordination;
  const table = q("events");
  const meta = q("cluster_meta");
  const sequence = q("event_seq");
  const channel = eventChannel(coordination.schema);
  const lockKey: unknown[] = [EVENT_LOCK_CLASS, `${coordination.schema}.events`];
  const onError =
    options.onError ??
    ((error: unknown) => logger.warn({ error: (error as Error).message }, "event log reader failed"));

  const epoch = await clusterValue(coordination, "events.epoch", () => randomUUID());
  // Under the publish lock nobody is between nextval and commit: the sequence's position is the
  // newest seq anyone will ever commit at or below, so delivery starts right after it.
  const start = await db.transaction("reading the event stream position", async (client) => {
    await client.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", lockKey);
    const found = await client.query<{ last_value: string; is_called: boolean }>(
      `SELECT last_value, is_called FROM ${sequence}`,
    );
    const row = found.rows[0]!;
    return row.is_called ? toNumber(row.last_value) : toNumber(row.last_value) - 1;
  });

  let delivered = start;
  let stopped = false;
  const subscribers = new Set<ClusterEventSubscriber>();
  const directSends = new Map<number, (seq: number) => void>();
  const batch: PendingEvent[] = [];
  let flushScheduled = false;
  let flushing: Promise<void> = Promise.resolve();
  /** This instance's publish statement in flight (one at a time; see `deliver`). */
  let publishing: Promise<unknown> | undefined;
  const sequenceName = sequence.replaceAll("'", "''");

  const flush = async (items: PendingEvent[]): Promise<void> => {
    // One statement, so one round trip, holds the lock from drawing the numbers to the commit:
    // the lock is taken first (the CTE `base` reads from `lock`), and a transaction-level lock
    // lasts until the statement's own transaction has committed. The NOTIFY goes out at commit.
    const statement = db.query<{ first: string }>(
      "publishing events",
      `WITH lock AS (SELECT pg_advisory_xact_lock($9, hashtext($10)) AS held),
       base AS (
         SELECT setval('${sequenceName}', nextval('${sequenceName}') + $1::int - 1) - $1::int + 1 AS first
         FROM lock
       ),
       inserted AS (
         INSERT INTO ${table} (seq, instance_id, event, payload, session_key, agent_id, connection_id, direct)
         SELECT base.first + t.ord - 1, $2, t.event, t.payload, t.session_key, t.agent_id, t.connection_id, t.direct
         FROM base, unnest($3::text[], $4::json[], $5::text[], $6::text[], $7::text[], $8::boolean[])
           WITH ORDINALITY AS t(event, payload, session_key, agent_id, connection_id, direct, ord)
       )
       SELECT base.first, pg_notify($11, (base.first + $1::int - 1)::text || $12::text) FROM base`,
      [
        items.length,
        instanceId,
        items.map((item) => item.event),
        items.map((item) => item.payload),
        items.map((item) => item.scope.sessionKey ?? null),
        items.map((item) => item.scope.agentId ?? null),
        items.map((item) => item.scope.connectionId ?? null),
        items.map((item) => item.direct),
        ...lockKey,
        channel,
        carriedEvents(items),
      ],
    );
    publishing = statement;
    try {
      const first = toNumber((await statement).rows[0]!.first);
      for (const [index, item] of items.entries()) {
        if (item.send) directSends.set(first + index, item.send);
        item.resolve(first + index);
      }
      // Our own NOTIFY brings the batch back to the reader; without a listener, read.
      if (!coordination.listener.listening(channel)) wake();
    } catch (error) {
      // Failed or rolled back: the numbers drawn, if any, are gaps nobody will ever see filled.
      for (const item of items) item.reject(error);
    } finally {
      if (publishing === statement) publishing = undefined;
    }
  };

  const enqueue = (item: Omit<PendingEvent, "resolve" | "reject">): Promise<number> => {
    if (stopped) return Promise.reject(new SwitchboardError("UNAVAILABLE", "the event log is stopped"));
    return new Promise<number>((resolve, reject) => {
      batch.push({ ...item, resolve, reject });
      if (flushScheduled) return;
      flushScheduled = true;
      // Group commit: everything published in this tick, and everything published while the
      // previous statement was in flight, goes in the next one (one lock and one commit for all
      // of it, instead of one per tick queued behind each other). Batches leave in order.
      setImmediate(() => {
        flushing = flushing.then(async () => {
          flushScheduled = false;
          // Bounded statements: a burst of thousands of events goes in several, still in order.
          while (batch.length > 0) await flush(batch.splice(0, MAX_BATCH));
        });
      });
    });
  };

  /**
   * Delivers one committed event if it is past what was delivered. A direct seq of this instance
   * is known only once its publish statement returned, which can be after the commit made the
   * row (or its NOTIFY) visible here: the reader then waits for that statement first.
   */
  const deliver = async (item: StreamItem): Promise<void> => {
    if (item.seq <= delivered) return;
    if (item.event === undefined) {
      let send = directSends.get(item.seq);
      if (send === undefined && publishing !== undefined) {
        await publishing.catch(() => undefined);
        send = directSends.get(item.seq);
      }
      delivered = Math.max(delivered, item.seq);
      if (send) {
        directSends.delete(item.seq);
        send(item.seq);
      }
      return;
    }
    delivered = item.seq;
    for (const subscriber of subscribers) {
      // One failing subscriber must not keep the event from the others, nor stop the reader.
      try {
        if (subscriber.accepts(item.event)) subscriber.deliver(item.event);
      } catch (error) {
        onError(error);
      }
    }
  };

  /** Batches carried by NOTIFYs, in commit order, not yet delivered. */
  const carried: StreamItem[][] = [];
  /** Something may have been committed that no carried batch holds: query the table. */
  let mustRead = true;
  const readOnce = async (): Promise<void> => {
    // A carried batch that continues the stream is delivered as it came. One that does not is
    // past a gap: the numbers of a rolled-back publish (never filled), or a batch whose NOTIFY
    // could not carry its events; the table tells which.
    while (carried.length > 0 && !mustRead) {
      const next = carried[0]!;
      if (next[0]!.seq > delivered + 1) {
        mustRead = true;
        break;
      }
      carried.shift();
      for (const item of next) await deliver(item);
    }
    if (!mustRead) return;
    mustRead = false;
    for (;;) {
      const rows = await db.read<EventRow>(
        "reading new events",
        `SELECT seq, event, payload, session_key, agent_id, connection_id, direct
         FROM ${table} WHERE seq > $1 ORDER BY seq LIMIT $2`,
        [delivered, readBatch],
      );
      for (const row of rows.rows) await deliver(toStreamItem(row));
      if (rows.rows.length < readBatch || stopped) break;
    }
    // What the read passed is dropped; what is newer is delivered on the next turn.
    while (carried.length > 0 && carried[0]!.at(-1)!.seq <= delivered) carried.shift();
    if (carried.length > 0) readAgain = true;
  };
  /** One reader at a time; a wake-up during a read makes it read once more. */
  let reading: Promise<void> | undefined;
  let readAgain = false;
  const catchUp = (): Promise<void> => {
    if (reading) {
      readAgain = true;
      return reading;
    }
    reading = (async () => {
      try {
        do {
          readAgain = false;
          await readOnce();
        } while (readAgain && !stopped);
      } catch (error) {
        // The table is read again on the next wake-up (or poll).
        mustRead = true;
        throw error;
      } finally {
        reading = undefined;
      }
    })();
    return reading;
  };
  /** Reads the table: a poll, a (re)connected listener, a NOTIFY without its events. */
  const readTable = (): Promise<void> => {
    mustRead = true;
    return catchUp();
  };
  const wake = () => {
    if (!stopped) readTable().catch(onError);
  };
  const notified = (payload: string) => {
    const batch = carriedBatch(payload);
    if (batch === undefined || carried.length >= MAX_CARRIED) {
      carried.length = 0;
      wake();
      return;
    }
    carried.push(batch);
    if (!stopped) catchUp().catch(onError);
  };

  // On the instance's shared listener connection; each (re)connection is followed by a read of
  // whatever was committed while no one listened.
  const unlisten = await coordination.listener.listen(
    channel,
    {
      notify: (payload) => notified(payload),
      connected: wake,
    },
    { reconnectMs },
  );
  const poll = setInterval(wake, pollMs);
  poll.unref();

  return {
    epoch,
    get currentSeq() {
      return delivered;
    },
    publish(event, payload, scope = {}) {
      return enqueue({ event, payload: JSON.stringify(payload), scope, direct: false });
    },
    withSeq(send) {
      return enqueue({ event: "direct", payload: "{}", scope: {}, direct: true, send });
    },
    async replay(after, accepts) {
      // Up to what was delivered when called: a subscriber registered before this call gets the
      // rest live, without overlap (the reader keeps delivering during the replay).
      const upTo = delivered;
      const out: ClusterEvent[] = [];
      let from = after;
      for (;;) {
        const rows = await db.read<EventRow>(
          "replaying events",
          `SELECT seq, event, payload, session_key, agent_id, connection_id, direct
           FROM ${table} WHERE seq > $1 AND seq <= $2 AND NOT direct ORDER BY seq LIMIT $3`,
          [from, upTo, readBatch],
        );
        for (const row of rows.rows) {
          const event = toEvent(row);
          if (accepts(event)) out.push(event);
        }
        if (rows.rows.length < readBatch) return out;
        from = toNumber(rows.rows.at(-1)!.seq);
      }
    },
    subscribe(subscriber) {
      subscribers.add(subscriber);
      return () => subscribers.delete(subscriber);
    },
    catchUp: readTable,
    async replayableFrom() {
      const found = await db.read<{ value: string }>(
        "reading how far retention removed events",
        `SELECT value FROM ${meta} WHERE name = '${PRUNED_THROUGH}'`,
      );
      const value = found.rows[0]?.value;
      return value === undefined ? 1 : toNumber(value) + 1;
    },
    async prune({ keep, minAgeMs = 0 }) {
      if (!Number.isInteger(keep) || keep < 1) {
        throw new SwitchboardError("INVALID_REQUEST", "keep: must be an integer >= 1", {
          details: { field: "keep" },
        });
      }
      // The newest `keep` stay whatever their age; the others once older than minAgeMs. The newest
      // seq removed is kept in the same statement: a resuming client is told it lost what was below.
      const removed = await db.query<{ removed: string }>(
        "pruning old events",
        `WITH gone AS (
           DELETE FROM ${table}
           WHERE seq < coalesce((SELECT seq FROM ${table} ORDER BY seq DESC OFFSET $1 - 1 LIMIT 1), 0)
             AND at < now() - make_interval(secs => $2::double precision / 1000)
           RETURNING seq
         ), marked AS (
           INSERT INTO ${meta} (name, value)
           SELECT '${PRUNED_THROUGH}', max(seq)::text FROM gone HAVING count(*) > 0
           ON CONFLICT (name) DO UPDATE
             SET value = greatest(${meta}.value::bigint, excluded.value::bigint)::text
         )
         SELECT count(*) AS removed FROM gone`,
        [keep, minAgeMs],
      );
      return toNumber(removed.rows[0]?.removed ?? "0");
    },
    async stop() {
      stopped = true;
      clearInterval(poll);
      await unlisten();
      await flushing;
      await reading?.catch(() => undefined);
    },
  };
}

/** An event of the stream as the reader delivers it; a direct seq has no event. */
interface StreamItem {
  seq: number;
  event?: ClusterEvent;
}

function toStreamItem(row: EventRow): StreamItem {
  const seq = toNumber(row.seq);
  return row.direct ? { seq } : { seq, event: toEvent(row) };
}

/**
 * The tail of a publish's NOTIFY payload, after the batch's last seq: `:` and the batch's events
 * as JSON (`0` for a direct seq, which only its own instance sends), or nothing when they do not
 * fit. The payload strings are JSON already and are spliced in.
 */
function carriedEvents(items: readonly PendingEvent[]): string {
  const parts: string[] = [];
  let bytes = 3;
  for (const item of items) {
    const part = item.direct
      ? "0"
      : `[${JSON.stringify(item.event)},${item.payload},${JSON.stringify(item.scope.sessionKey ?? null)},${JSON.stringify(item.scope.agentId ?? null)},${JSON.stringify(item.scope.connectionId ?? null)}]`;
    bytes += Buffer.byteLength(part) + 1;
    if (bytes > MAX_CARRIED_BYTES) return "";
    parts.push(part);
  }
  return `:[${parts.join(",")}]`;
}

type CarriedEvent = 0 | [string, Record<string, unknown>, string | null, string | null, string | null];

/** A batch from a NOTIFY payload (`<last seq>:<events>`); undefined when it carries none. */
function carriedBatch(payload: string | undefined): StreamItem[] | undefined {
  const colon = payload?.indexOf(":") ?? -1;
  if (payload === undefined || colon < 0) return undefined;
  const last = Number(payload.slice(0, colon));
  let events: CarriedEvent[];
  try {
    events = JSON.parse(payload.slice(colon + 1)) as CarriedEvent[];
  } catch {
    return undefined;
  }
  if (!Number.isSafeInteger(last) || !Array.isArray(events) || events.length === 0) return undefined;
  const first = last - events.length + 1;
  return events.map((carried, index) => {
    const seq = first + index;
    if (carried === 0) return { seq };
    const [event, eventPayload, sessionKey, agentId, connectionId] = carried;
    return {
      seq,
      event: toEvent({
        seq: String(seq),
        event,
        payload: eventPayload,
        session_key: sessionKey,
        agent_id: agentId,
        connection_id: connectionId,
        direct: false,
      }),
    };
  });
}

function toEvent(row: EventRow): ClusterEvent {
  const event: ClusterEvent = { event: row.event, seq: toNumber(row.seq), payload: row.payload };
  if (row.session_key !== null) event.sessionKey = row.session_key;
  if (row.agent_id !== null) event.agentId = row.agent_id;
  if (row.connection_id !== null) event.connectionId = row.connection_id;
  return event;
}
