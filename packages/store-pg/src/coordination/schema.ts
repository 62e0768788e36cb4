import type pg from "pg";
import { applyMigrations, type Migration } from "../migrations";

/**
 * The coordination tables, numbered like the store's migrations and never edited once released.
 * They are kept apart from the store's list (`../migrations.ts`) so that the store stays usable
 * without a cluster; both share the schema and the migration advisory lock.
 */
export const COORDINATION_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "events, run claims, cluster secrets, waits, call budget, audit chains, leases",
    statements: (q) => [
      // Values created once per schema: the cluster epoch, the operator token, the audit key.
      `CREATE TABLE ${q("cluster_meta")} (name text COLLATE "C" PRIMARY KEY, value text NOT NULL)`,

      // Every instance's events in one order. `seq` comes from a sequence, but only under a
      // transaction-level advisory lock held until commit (see event-log.ts), so seq order is
      // commit order and a reader never sees a later seq before an earlier one.
      `CREATE SEQUENCE ${q("event_seq")}`,
      `CREATE TABLE ${q("events")} (
        seq bigint PRIMARY KEY,
        at timestamptz NOT NULL DEFAULT now(),
        instance_id text NOT NULL,
        event text NOT NULL,
        payload json NOT NULL,
        session_key text,
        agent_id text,
        connection_id text,
        direct boolean NOT NULL DEFAULT false
      )`,

      // Instances alive: each renews its row; an expired row is a dead instance. Run claims and
      // waits name their instance and live exactly as long as its row (one renewal per instance,
      // not one per claim).
      `CREATE TABLE ${q("cluster_instances")} (
        instance_id text COLLATE "C" PRIMARY KEY,
        started_at timestamptz NOT NULL DEFAULT now(),
        lease_until timestamptz NOT NULL
      )`,

      // Runs waiting in their lane (FIFO by position; a handed-back run gets a position below all).
      `CREATE SEQUENCE ${q("run_queue_position")}`,
      `CREATE TABLE ${q("run_queue")} (
        run_id text COLLATE "C" PRIMARY KEY,
        lane_key text COLLATE "C" NOT NULL,
        agent_id text COLLATE "C" NOT NULL,
        position bigint NOT NULL,
        attempts integer NOT NULL DEFAULT 0,
        enqueued_at timestamptz NOT NULL DEFAULT now()
      )`,
      `CREATE INDEX run_queue_lane ON ${q("run_queue")} (lane_key, position)`,
      `CREATE INDEX run_queue_agent ON ${q("run_queue")} (agent_id, position)`,
      // The run holding each lane: the UNIQUE lane key is "one active run per lane, cluster-wide".
      `CREATE TABLE ${q("run_claims")} (
        run_id text COLLATE "C" PRIMARY KEY,
        lane_key text COLLATE "C" NOT NULL CONSTRAINT run_claims_lane UNIQUE,
        agent_id text COLLATE "C" NOT NULL,
        instance_id text COLLATE "C" NOT NULL,
        attempts integer NOT NULL,
        claimed_at timestamptz NOT NULL DEFAULT now()
      )`,
      `CREATE INDEX run_claims_instance ON ${q("run_claims")} (instance_id)`,
      // Runs of a lost instance that may not be retried: kept until the gateway has ended them.
      `CREATE TABLE ${q("run_claim_failures")} (
        run_id text COLLATE "C" PRIMARY KEY,
        lane_key text COLLATE "C" NOT NULL,
        agent_id text COLLATE "C" NOT NULL,
        lost_instance text NOT NULL,
        reason text NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
      )`,

      // Current agent-to-agent waits, each owned by an instance (gone with it when it dies).
      `CREATE TABLE ${q("waits")} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        waiter text COLLATE "C" NOT NULL,
        target text COLLATE "C" NOT NULL,
        instance_id text COLLATE "C" NOT NULL
      )`,
      `CREATE INDEX waits_waiter ON ${q("waits")} (waiter)`,
      `CREATE INDEX waits_instance ON ${q("waits")} (instance_id)`,

      // Allowed sends/spawns, one row per call, pruned past the window.
      `CREATE TABLE ${q("call_budget")} (
        session_key text COLLATE "C" NOT NULL,
        kind text NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp()
      )`,
      `CREATE INDEX call_budget_window ON ${q("call_budget")} (session_key, kind, at)`,
      `CREATE INDEX call_budget_at ON ${q("call_budget")} (at)`,

      // Audit: one hash chain per writer (chain id), and anchors recording every chain's head.
      `CREATE TABLE ${q("audit_chains")} (
        chain_id text COLLATE "C" PRIMARY KEY,
        instance_id text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
      )`,
      `CREATE TABLE ${q("audit_chain_records")} (
        chain_id text COLLATE "C" NOT NULL,
        idx bigint NOT NULL,
        at bigint NOT NULL,
        record json NOT NULL,
        PRIMARY KEY (chain_id, idx)
      )`,
      // The newest records across chains (audit.tail), newest first.
      `CREATE INDEX audit_chain_records_recent ON ${q("audit_chain_records")} (at DESC, chain_id DESC, idx DESC)`,
      `CREATE TABLE ${q("audit_anchors")} (idx bigint PRIMARY KEY, record json NOT NULL)`,

      // Named leases (the timer leader): holder, expiry, and a term that grows on every takeover.
      `CREATE TABLE ${q("leases")} (
        name text COLLATE "C" PRIMARY KEY,
        holder text NOT NULL,
        term bigint NOT NULL,
        lease_until timestamptz NOT NULL
      )`,
    ],
    // Above any seq a single-instance gateway handed out (its floor is the clock, too).
    run: (client, q) => client.query("SELECT setval($1::regclass, $2)", [q("event_seq"), Date.now()]),
  },
  {
    version: 2,
    name: "child slots (maxChildren decided atomically)",
    statements: (q) => [
      // A spawn allowed but whose child run is not stored yet: counted with the stored children
      // of its requester until the run is (see child-slots.ts). Owned by an instance, like waits.
      `CREATE TABLE ${q("child_slots")} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        requester_key text COLLATE "C" NOT NULL,
        child_key text COLLATE "C" NOT NULL,
        instance_id text COLLATE "C" NOT NULL,
        taken_at timestamptz NOT NULL DEFAULT now()
      )`,
      `CREATE INDEX child_slots_requester ON ${q("child_slots")} (requester_key)`,
    ],
  },
  {
    version: 3,
    name: "audit records' cluster-wide position (audit.tail after)",
    statements: (q) => [
      // The id of the transaction that wrote the record: its position across every chain (see
      // audit-chains.ts `tail`). Records written before this version share the ALTER's id.
      `ALTER TABLE ${q("audit_chain_records")} ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id()`,
      `CREATE INDEX audit_chain_records_position ON ${q("audit_chain_records")} (xid, chain_id, idx)`,
    ],
  },
  {
    version: 4,
    name: "flow claims (announces exactly once across an instance's death)",
    statements: (q) => [
      // A flow step (an announce) being performed, and by which instance: another takes it over
      // only once that instance is gone (see flow-claims.ts).
      `CREATE TABLE ${q("flow_claims")} (
        key text COLLATE "C" PRIMARY KEY,
        kind text NOT NULL,
        run_id text COLLATE "C" NOT NULL,
        instance_id text COLLATE "C" NOT NULL,
        claimed_at timestamptz NOT NULL DEFAULT now()
      )`,
      `CREATE INDEX flow_claims_kind ON ${q("flow_claims")} (kind, claimed_at)`,
    ],
  },
  {
    version: 5,
    name: "a send's wait check and budget reservation in one round trip each",
    // Each takes its advisory lock and then reads in a statement of its own: a VOLATILE function's
    // statements each get a fresh snapshot, which then includes every earlier lock holder's rows.
    // One statement with the lock in a CTE would not: its snapshot predates the lock. So these were
    // BEGIN, lock, statement, COMMIT from the gateway, with the lock held across three round trips
    // (the wait lock is cluster-wide: every send with a wait queues behind it).
    statements: (q) => [
      `CREATE FUNCTION ${q("try_wait")}(waiter_key text, target_key text, instance text, lock_class integer, lock_key text)
       RETURNS TABLE (cycle_path text[], wait_id bigint) LANGUAGE plpgsql VOLATILE AS $fn$
       BEGIN
         PERFORM pg_advisory_xact_lock(lock_class, hashtext(lock_key));
         RETURN QUERY WITH RECURSIVE walk(node, path) AS (
             SELECT target_key::text COLLATE "C", ARRAY[target_key::text COLLATE "C"]
             UNION ALL
             SELECT w.target, walk.path || w.target FROM walk JOIN ${q("waits")} w ON w.waiter = walk.node
             WHERE walk.node <> waiter_key AND NOT (w.target = ANY(walk.path))
           ),
           cycle AS (SELECT walk.path FROM walk WHERE walk.node = waiter_key LIMIT 1),
           inserted AS (
             INSERT INTO ${q("waits")} (waiter, target, instance_id)
             SELECT waiter_key, target_key, instance WHERE NOT EXISTS (SELECT 1 FROM cycle)
               AND EXISTS (SELECT 1 FROM ${q("cluster_instances")} ci WHERE ci.instance_id = instance)
             RETURNING ${q("waits")}.id
           )
           SELECT (SELECT cycle.path FROM cycle), (SELECT inserted.id FROM inserted);
       END $fn$`,
      `CREATE FUNCTION ${q("reserve_call")}(call_session text, call_kind text, window_ms double precision, lock_class integer, lock_key text)
       RETURNS TABLE (used bigint, reserved_at text) LANGUAGE plpgsql VOLATILE AS $fn$
       BEGIN
         PERFORM pg_advisory_xact_lock(lock_class, hashtext(lock_key));
         RETURN QUERY WITH before AS (
             SELECT count(*) AS n FROM ${q("call_budget")} b
             WHERE b.session_key = call_session AND b.kind = call_kind
               AND b.at > clock_timestamp() - make_interval(secs => window_ms / 1000)
           )
           INSERT INTO ${q("call_budget")} (session_key, kind) VALUES (call_session, call_kind)
           RETURNING (SELECT before.n FROM before), ${q("call_budget")}.at::text;
       END $fn$`,
    ],
  },
  {
    version: 6,
    name: "a wait's check and record commit without waiting for the WAL flush",
    // `try_wait` holds the cluster-wide wait lock until its commit, and a synchronous commit waits
    // for the WAL flush (an fsync) with the lock held: every send with a wait in the cluster queued
    // behind one fsync at a time (1.78 ms a call on average in B9 over two instances, 0.24 after).
    // A released migration is never edited, so the function is restated whole with the one change.
    // A wait row is transient state of a live flow, not data: losing the last ones in a crash of
    // the server can at worst miss a cycle, which the sends' own timeouts then end. Its commit is
    // asynchronous, so the lock is held for the walk and the insert only. Later synchronous commits
    // flush it anyway; it is visible to the next lock holder at once, like any commit.
    statements: (q) => [
      `CREATE OR REPLACE FUNCTION ${q("try_wait")}(waiter_key text, target_key text, instance text, lock_class integer, lock_key text)
       RETURNS TABLE (cycle_path text[], wait_id bigint) LANGUAGE plpgsql VOLATILE AS $fn$
       BEGIN
         PERFORM set_config('synchronous_commit', 'off', true);
         PERFORM pg_advisory_xact_lock(lock_class, hashtext(lock_key));
         RETURN QUERY WITH RECURSIVE walk(node, path) AS (
             SELECT target_key::text COLLATE "C", ARRAY[target_key::text COLLATE "C"]
             UNION ALL
             SELECT w.target, walk.path || w.target FROM walk JOIN ${q("waits")} w ON w.waiter = walk.node
             WHERE walk.node <> waiter_key AND NOT (w.target = ANY(walk.path))
           ),
           cycle AS (SELECT walk.path FROM walk WHERE walk.node = waiter_key LIMIT 1),
           inserted AS (
             INSERT INTO ${q("waits")} (waiter, target, instance_id)
             SELECT waiter_key, target_key, instance WHERE NOT EXISTS (SELECT 1 FROM cycle)
               AND EXISTS (SELECT 1 FROM ${q("cluster_instances")} ci WHERE ci.instance_id = instance)
             RETURNING ${q("waits")}.id
           )
           SELECT (SELECT cycle.path FROM cycle), (SELECT inserted.id FROM inserted);
       END $fn$`,
    ],
  },
  {
    version: 7,
    name: "calls in flight that a cancellation may name (MCP's, from any instance)",
    statements: (q) => [
      // One row per call running on an instance, so that a cancellation received anywhere finds
      // how many calls its key names in the whole cluster and which instance holds the one (see
      // cancellations.ts). `key_hash` is the SHA-256 of the caller's key: its ids are chosen by
      // clients (any length) and its separators are NUL bytes, which text cannot hold. Owned by an
      // instance like waits: freed with it when it is lost, and at its start.
      `CREATE TABLE ${q("cancellable_calls")} (
        instance_id text COLLATE "C" NOT NULL,
        call_id bigint NOT NULL,
        key_hash bytea NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (instance_id, call_id)
      )`,
      `CREATE INDEX cancellable_calls_key ON ${q("cancellable_calls")} (key_hash)`,
    ],
  },
  {
    version: 8,
    name: "run deadlines on the database's clock",
    statements: (q) => [
      // When a queued or claimed run times out, on the database's clock: set at its first insert as
      // `now()` plus the time its instance had left, carried from the queue to the claim and back,
      // and compared with `now()` only. Instances' wall clocks differ (a host ahead timed runs out
      // early, one behind kept them on); only durations cross from an instance to the database.
      // 'infinity': the run has no timeout. NULL: unknown (inserted by an instance of an earlier
      // version, which the timeout sweep then checks as before, from the run's record).
      `ALTER TABLE ${q("run_queue")} ADD COLUMN deadline_at timestamptz`,
      `ALTER TABLE ${q("run_claims")} ADD COLUMN deadline_at timestamptz`,
      `CREATE INDEX run_queue_deadline ON ${q("run_queue")} (deadline_at)`,
    ],
  },
];

export const COORDINATION_VERSION = COORDINATION_MIGRATIONS.at(-1)!.version;

/** Creates or upgrades the coordination tables, one instance at a time (the store's migration lock). */
export async function ensureCoordinationSchema(client: pg.ClientBase, schema: string): Promise<void> {
  await applyMigrations(
    client,
    schema,
    {
      table: "coordination_migrations",
      migrations: COORDINATION_MIGRATIONS,
      supported: COORDINATION_VERSION,
      what: `coordination tables of PostgreSQL schema "${schema}"`,
    },
    async () => undefined,
  );
}
