import { performance } from "node:perf_hooks";
import { SwitchboardError } from "@switchboard/core";
import type { Coordination } from "./context";

export interface LeaderLeaseOptions {
  /** What the lease is for; one leader per name. Default `timers`. */
  name?: string;
  /** How long an acquisition or renewal holds (ms). Default 3000. */
  leaseMs?: number;
  /** Renewal period of `start()` (ms). Default a third of the lease. */
  renewMs?: number;
  /** This instance became leader, with a term higher than every earlier leader's. */
  onAcquired?: (term: number) => void;
  /** This instance stopped being leader (lost a renewal race, or could not renew in time). */
  onLost?: () => void;
  onError?: (error: unknown) => void;
}

/**
 * One instance at a time runs the cluster's timers (archiving, pending announces, run-timeout and
 * lost-instance sweeps, retention). Replaces "this process runs them" in the gateway; there is no
 * port for it today: the gateway wraps each timer's body in `if (lease.isLeader)`.
 *
 * A lease row (name, holder, term, lease_until on the database's clock), not a session advisory
 * lock: a lock lives as long as its connection, and a half-open connection (a partition, a frozen
 * host) can hold it for as long as TCP keep-alive takes to notice — minutes — while a lease ends
 * after `leaseMs` whatever happens. Takeover after a leader dies takes at most `leaseMs + renewMs`.
 *
 * `isLeader` is conservative: it turns false once `leaseMs` have passed on this process's
 * monotonic clock since the start of the last successful renewal, so a leader cut off from the
 * database stops before another can take over. `term` grows with every change of holder: a timer
 * that writes can pass it along as a fencing token.
 */
export interface LeaderLease {
  readonly isLeader: boolean;
  /** The term of the current leadership (undefined when not leader). */
  readonly term: number | undefined;
  /** Acquires the lease if free or expired, renews it if held; true when this instance leads. */
  tryAcquire(): Promise<boolean>;
  /** Tries every `renewMs` until `stop`. */
  start(): void;
  /** Stops trying (tests simulate a dead leader with it); keeps the row. */
  stop(): void;
  /** Gives the lease up at once (graceful shutdown): another instance takes over on its next try. */
  release(): Promise<void>;
  /** The current holder as the database sees it. */
  holder(): Promise<{ holder: string; term: number; expired: boolean } | undefined>;
}

export function openLeaderLease(coordination: Coordination, options: LeaderLeaseOptions = {}): LeaderLease {
  const name = options.name ?? "timers";
  const leaseMs = options.leaseMs ?? 3000;
  const renewMs = options.renewMs ?? Math.max(1, Math.floor(leaseMs / 3));
  if (!(renewMs < leaseMs)) {
    throw new SwitchboardError("INVALID_REQUEST", "leader.renewMs: must be shorter than leader.leaseMs", {
      details: { field: "leader.renewMs" },
    });
  }
  const { db, q, instanceId, logger } = coordination;
  const table = q("leases");
  const onError =
    options.onError ??
    ((error: unknown) =>
      logger.warn({ error: (error as Error).message, lease: name }, "leader lease renewal failed"));
  let validUntil = 0;
  let currentTerm: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  let leading = false;

  const isLeader = () => currentTerm !== undefined && performance.now() < validUntil;
  const lose = () => {
    const was = leading;
    leading = false;
    currentTerm = undefined;
    validUntil = 0;
    if (was) {
      logger.info({ lease: name }, "no longer leader");
      options.onLost?.();
    }
  };

  /** The acquisition in flight: `release` waits for it, else its answer could make us leader again. */
  let acquiring: Promise<boolean> | undefined;
  const tryAcquire = (): Promise<boolean> => {
    const attempt = acquire();
    acquiring = attempt;
    const settled = () => {
      if (acquiring === attempt) acquiring = undefined;
    };
    attempt.then(settled, settled);
    return attempt;
  };
  const acquire = async (): Promise<boolean> => {
    const started = performance.now();
    let found: { term: string } | undefined;
    try {
      const result = await db.query<{ term: string }>(
        "acquiring the leader lease",
        `INSERT INTO ${table} (name, holder, term, lease_until)
         VALUES ($1, $2, 1, now() + make_interval(secs => $3::double precision / 1000))
         ON CONFLICT (name) DO UPDATE SET
           holder = EXCLUDED.holder,
           term = CASE WHEN ${table}.holder = EXCLUDED.holder AND ${table}.lease_until >= now()
                       THEN ${table}.term ELSE ${table}.term + 1 END,
           lease_until = EXCLUDED.lease_until
         WHERE ${table}.holder = EXCLUDED.holder OR ${table}.lease_until < now()
         RETURNING term`,
        [name, instanceId, leaseMs],
      );
      found = result.rows[0];
    } catch (error) {
      // Still leader until the last successful renewal runs out; `isLeader` sees to that.
      if (!isLeader()) lose();
      throw error;
    }
    if (!found) {
      lose();
      return false;
    }
    const term = Number(found.term);
    if (leading && term !== currentTerm) lose();
    currentTerm = term;
    validUntil = started + leaseMs;
    if (!leading) {
      leading = true;
      logger.info({ lease: name, term }, "leader");
      options.onAcquired?.(term);
    }
    return true;
  };

  return {
    get isLeader() {
      return isLeader();
    },
    get term() {
      return isLeader() ? currentTerm : undefined;
    },
    tryAcquire,
    start() {
      if (timer) return;
      const tick = () => {
        if (leading && !isLeader()) lose();
        tryAcquire().catch(onError);
      };
      tick();
      timer = setInterval(tick, renewMs);
      timer.unref();
    },
    stop() {
      clearInterval(timer);
      timer = undefined;
    },
    async release() {
      clearInterval(timer);
      timer = undefined;
      await acquiring?.catch(() => undefined);
      lose();
      // Expired, not deleted: the row keeps the term, so the next leader's is higher.
      await db.query(
        "releasing the leader lease",
        `UPDATE ${table} SET lease_until = '-infinity' WHERE name = $1 AND holder = $2`,
        [name, instanceId],
      );
    },
    async holder() {
      const found = await db.read<{ holder: string; term: string; expired: boolean }>(
        "reading the leader lease",
        `SELECT holder, term, lease_until < now() AS expired FROM ${table} WHERE name = $1`,
        [name],
      );
      const row = found.rows[0];
      return row ? { holder: row.holder, term: Number(row.term), expired: row.expired } : undefined;
    },
  };
}
