import { createHash, randomUUID } from "node:crypto";
import { type EventName, type EventPayload, SwitchboardError } from "@switchboard/core";
import type pg from "pg";
import { toNumber } from "../versions";
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
  /** The oldest retained seq (undefined: none retained): a cursor below it has lost events. */
  oldestSeq(): Promise<number | undefined>;
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

/** Events per publishing transaction. */
const MAX_BATCH = 500;
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
 * instance LISTENs on a dedicated connection and then reads `seq > last delivered` in order. A
 * lost listener connection is re-opened and followed by a catch-up read; a slow poll covers
 * wake-ups lost without the connection noticing.
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

  const flush = async (items: PendingEvent[]): Promise<void> => {
    try {
      const seqs = await db.transaction("publishing events", async (client) => {
        await client.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", lockKey);
        // One nextval + setval claims a block of n numbers; nobody else draws under the lock.
        const inserted = await client.query<{ seq: string }>(
          `WITH base AS (
             SELECT setval('${sequence.replaceAll("'", "''")}', nextval('${sequence.replaceAll("'", "''")}') + $1::int - 1) - $1::int + 1 AS first
           )
           INSERT INTO ${table} (seq, instance_id, event, payload, session_key, agent_id, connection_id, direct)
           SELECT base.first + t.ord - 1, $2, t.event, t.payload, t.session_key, t.agent_id, t.connection_id, t.direct
           FROM base, unnest($3::text[], $4::json[], $5::text[], $6::text[], $7::text[], $8::boolean[])
             WITH ORDINALITY AS t(event, payload, session_key, agent_id, connection_id, direct, ord)
           RETURNING seq`,
          [
            items.length,
            instanceId,
            items.map((item) => item.event),
            items.map((item) => item.payload),
            items.map((item) => item.scope.sessionKey ?? null),
            items.map((item) => item.scope.agentId ?? null),
            items.map((item) => item.scope.connectionId ?? null),
            items.map((item) => item.direct),
          ],
        );
        const numbers = inserted.rows.map((row) => toNumber(row.seq)).sort((a, b) => a - b);
        // Registered before COMMIT, so the reader cannot pass a direct seq before knowing it.
        for (const [index, item] of items.entries())
          if (item.send) directSends.set(numbers[index]!, item.send);
        await client.query("SELECT pg_notify($1, $2)", [channel, String(numbers.at(-1))]);
        return numbers;
      });
      for (const [index, item] of items.entries()) item.resolve(seqs[index]!);
      wake();
    } catch (error) {
      // Rolled back: the numbers drawn are gaps nobody will ever see filled.
      for (const item of items) {
        if (item.send) for (const [seq, send] of directSends) if (send === item.send) directSends.delete(seq);
        item.reject(error);
      }
    }
  };

  const enqueue = (item: Omit<PendingEvent, "resolve" | "reject">): Promise<number> => {
    if (stopped) return Promise.reject(new SwitchboardError("UNAVAILABLE", "the event log is stopped"));
    return new Promise<number>((resolve, reject) => {
      batch.push({ ...item, resolve, reject });
      if (flushScheduled) return;
      flushScheduled = true;
      // Group commit: everything published in this tick, and everything published while the
      // previous transaction was in flight, goes in the next one (one lock and one commit for all
      // of it, instead of one transaction per tick queued behind each other). Batches leave in order.
      setImmediate(() => {
        flushing = flushing.then(async () => {
          flushScheduled = false;
          // Bounded transactions: a burst of thousands of events goes in several, still in order.
          while (batch.length > 0) await flush(batch.splice(0, MAX_BATCH));
        });
      });
    });
  };

  let reading: Promise<void> | undefined;
  let readAgain = false;
  const readOnce = async (): Promise<void> => {
    for (;;) {
      const rows = await db.read<EventRow>(
        "reading new events",
        `SELECT seq, event, payload, session_key, agent_id, connection_id, direct
         FROM ${table} WHERE seq > $1 ORDER BY seq LIMIT $2`,
        [delivered, readBatch],
      );
      for (const row of rows.rows) {
        const seq = toNumber(row.seq);
        delivered = seq;
        if (row.direct) {
          const send = directSends.get(seq);
          if (send) {
            directSends.delete(seq);
            send(seq);
          }
          continue;
        }
        const event = toEvent(row);
        for (const subscriber of subscribers) {
          // One failing subscriber must not keep the event from the others, nor stop the reader.
          try {
            if (subscriber.accepts(event)) subscriber.deliver(event);
          } catch (error) {
            onError(error);
          }
        }
      }
      if (rows.rows.length < readBatch || stopped) return;
    }
  };
  /** One reader at a time; a wake-up during a read makes it read once more. */
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
      } finally {
        reading = undefined;
      }
    })();
    return reading;
  };
  const wake = () => {
    if (!stopped) catchUp().catch(onError);
  };

  let listener: pg.Client | undefined;
  let reconnectTimer: NodeJS.Timeout | undefined;
  const listen = async (): Promise<void> => {
    if (stopped) return;
    let client: pg.Client;
    try {
      client = await coordination.connect("listening for events");
      await client.query(`LISTEN ${channel}`);
    } catch (error) {
      onError(error);
      reconnectTimer = setTimeout(() => void listen(), reconnectMs);
      reconnectTimer.unref();
      return;
    }
    if (stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    listener = client;
    client.on("notification", wake);
    const lost = () => {
      if (listener !== client) return;
      listener = undefined;
      logger.warn({ channel }, "event listener connection lost; reconnecting");
      reconnectTimer = setTimeout(() => void listen(), reconnectMs);
      reconnectTimer.unref();
    };
    client.on("error", lost);
    client.on("end", lost);
    // Whatever was committed while no one listened.
    wake();
  };
  await listen();
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
    catchUp,
    async oldestSeq() {
      const found = await db.read<{ seq: string | null }>(
        "reading the oldest event",
        `SELECT min(seq) AS seq FROM ${table}`,
      );
      const seq = found.rows[0]?.seq;
      return seq === null || seq === undefined ? undefined : toNumber(seq);
    },
    async prune({ keep, minAgeMs = 0 }) {
      if (!Number.isInteger(keep) || keep < 1) {
        throw new SwitchboardError("INVALID_REQUEST", "keep: must be an integer >= 1", {
          details: { field: "keep" },
        });
      }
      // The newest `keep` stay whatever their age; the others once older than minAgeMs.
      const removed = await db.query(
        "pruning old events",
        `DELETE FROM ${table}
         WHERE seq < coalesce((SELECT seq FROM ${table} ORDER BY seq DESC OFFSET $1 - 1 LIMIT 1), 0)
           AND at < now() - make_interval(secs => $2::double precision / 1000)`,
        [keep, minAgeMs],
      );
      return removed.rowCount ?? 0;
    },
    async stop() {
      stopped = true;
      clearInterval(poll);
      clearTimeout(reconnectTimer);
      const client = listener;
      listener = undefined;
      await client?.end().catch(() => undefined);
      await flushing;
      await reading?.catch(() => undefined);
    },
  };
}

function toEvent(row: EventRow): ClusterEvent {
  const event: ClusterEvent = { event: row.event, seq: toNumber(row.seq), payload: row.payload };
  if (row.session_key !== null) event.sessionKey = row.session_key;
  if (row.agent_id !== null) event.agentId = row.agent_id;
  if (row.connection_id !== null) event.connectionId = row.connection_id;
  return event;
}
