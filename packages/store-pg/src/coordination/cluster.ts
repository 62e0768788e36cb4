import { type AuditHmac, type StoreDegradation, type StoreHealth, SwitchboardError } from "@switchboard/core";
import { type ClusterAuditLog, openClusterAuditLog } from "./audit-chains";
import { type ClusterCallBudget, openClusterCallBudget } from "./call-budget";
import { type ClusterCancellations, openClusterCancellations } from "./cancellations";
import { type ClusterChildSlots, openClusterChildSlots } from "./child-slots";
import { type Coordination, type CoordinationOptions, openCoordination } from "./context";
import { type ClusterEventLog, type ClusterEventLogOptions, openClusterEventLog } from "./event-log";
import { type ClusterFlowClaims, openClusterFlowClaims } from "./flow-claims";
import { type LeaderLease, openLeaderLease } from "./leader-lease";
import { type ClusterMembership, type LostRun, openMembership } from "./membership";
import { type ClusterRunEnds, openClusterRunEnds } from "./run-ends";
import { type ClusterRunLanes, openClusterRunLanes } from "./run-lanes";
import { type ClusterSecrets, openClusterSecrets } from "./secrets";
import { type ClusterWaitGraph, openClusterWaitGraph } from "./wait-graph";

export interface ClusterOptions extends CoordinationOptions {
  /** Membership lease (ms): a dead instance's runs are freed this long after its last renewal. Default 5000. */
  leaseMs?: number;
  /** Leader lease (ms): timers move to another instance this long after the leader dies. Default 3000. */
  leaderLeaseMs?: number;
  /** How often the leader sweeps lost instances (ms). Default 1000. */
  sweepMs?: number;
  /**
   * Event retention, applied by the leader every `everyMs`: the newest `keep`, and whatever is
   * younger than `minAgeMs`. Default: 100 000 events, one minute, every 10 s.
   */
  eventRetention?: { keep?: number; minAgeMs?: number; everyMs?: number };
  /** The call budget's sliding window (ms). Default 60 000. */
  budgetWindowMs?: number;
  /** How often the leader anchors the audit chains (ms). Default 10 000. */
  anchorMs?: number;
  events?: ClusterEventLogOptions;
  auditHmac?: AuditHmac;
  /**
   * The leader found runs of lost instances: `requeued` are back at the head of their lanes (the
   * gateway resets their records to queued and starts the lanes); `failed` are every run still in
   * the failure outbox (the gateway ends each `error` with its `reason`, then
   * `lanes.acknowledgeFailure`). May be called again for a failure not yet acknowledged: make it
   * idempotent. Not called while a previous call is still running.
   */
  onLostRuns?: (runs: { requeued: LostRun[]; failed: LostRun[] }) => Promise<void> | void;
  /** This instance was declared dead while cut off: the runs it holds are no longer its own. */
  onLost?: () => void;
}

/**
 * Everything one gateway instance needs to act as part of one logical gateway, opened together:
 * the components of this directory on one pool, membership renewals started, and the timers that
 * only the leader runs (lost-instance sweeps, event and budget retention, audit anchors). The
 * gateway builds its ports from the fields (`gateway.ts` only).
 */
export interface Cluster {
  readonly coordination: Coordination;
  readonly instanceId: string;
  readonly membership: ClusterMembership;
  readonly leader: LeaderLease;
  readonly events: ClusterEventLog;
  readonly lanes: ClusterRunLanes;
  /** Run ends written only by the instance holding the run (fencing of a cut-off instance). */
  readonly runEnds: ClusterRunEnds;
  readonly secrets: ClusterSecrets;
  readonly waits: ClusterWaitGraph;
  readonly budget: ClusterCallBudget;
  readonly children: ClusterChildSlots;
  /** Announces performed once cluster-wide, taken over when their instance dies. */
  readonly flows: ClusterFlowClaims;
  readonly audit: ClusterAuditLog;
  /** Cancellations of calls another instance may be running (MCP's, which any instance may receive). */
  readonly cancellations: ClusterCancellations;
  /**
   * Whether this instance is doing its part (for `/healthz`): its lease renewed in time (which
   * also proves the coordination pool answers), and every channel listened to for more than a
   * second (a reconnect's blip is not a fault). One entry per failing part.
   */
  health(): StoreHealth;
  /**
   * Stops timers and the listener and closes the pool. Graceful (default): hands the leader lease
   * over and leaves the membership first. `{ graceful: false }` is what kill -9 leaves (tests).
   */
  close(options?: { graceful?: boolean }): Promise<void>;
}

/** How long the listener may be reconnecting before `/healthz` calls it down. */
const LISTENER_GRACE_MS = 1000;

export async function openCluster(options: ClusterOptions): Promise<Cluster> {
  const {
    leaseMs = 5000,
    leaderLeaseMs = 3000,
    sweepMs = 1000,
    eventRetention = {},
    budgetWindowMs = 60_000,
    anchorMs = 10_000,
    events: eventOptions,
    auditHmac,
    onLostRuns,
    onLost,
    ...coordinationOptions
  } = options;
  const coordination = await openCoordination(coordinationOptions);
  const { logger } = coordination;
  const timers: NodeJS.Timeout[] = [];
  let events: ClusterEventLog | undefined;
  let leader: LeaderLease | undefined;
  let membership: ClusterMembership | undefined;
  try {
    membership = openMembership(coordination, { leaseMs, ...(onLost ? { onLost } : {}) });
    await membership.renew();
    membership.start();
    leader = openLeaderLease(coordination, { leaseMs: leaderLeaseMs });
    events = await openClusterEventLog(coordination, eventOptions);
    const secrets = openClusterSecrets(coordination);
    const audit = await openClusterAuditLog(coordination, await secrets.auditKey(), {
      ...(auditHmac ? { hmac: auditHmac } : {}),
    });
    const lanes = openClusterRunLanes(coordination);
    const budget = openClusterCallBudget(coordination, { windowMs: budgetWindowMs });
    const cluster: Cluster = {
      coordination,
      instanceId: coordination.instanceId,
      membership,
      leader,
      events,
      lanes,
      runEnds: openClusterRunEnds(coordination),
      secrets,
      waits: openClusterWaitGraph(coordination),
      budget,
      children: openClusterChildSlots(coordination),
      flows: openClusterFlowClaims(coordination),
      audit,
      cancellations: openClusterCancellations(coordination),
      health() {
        const degraded: Record<string, StoreDegradation> = {};
        const lease = membership!.health();
        if (!lease.ok) degraded.lease = { cause: lease.cause, since: lease.since };
        const down = coordination.listener.downSince();
        if (down !== undefined && Date.now() - down > LISTENER_GRACE_MS) {
          degraded.listener = {
            cause: `not listening to ${coordination.listener.channels().join(", ")}: other instances' events and run wake-ups reach this one late`,
            since: new Date(down).toISOString(),
          };
        }
        return Object.keys(degraded).length === 0 ? { ok: true } : { ok: false, degraded };
      },
      async close({ graceful = true } = {}) {
        for (const timer of timers) clearInterval(timer);
        leader!.stop();
        membership!.stop();
        if (graceful) {
          await leader!.release().catch(() => undefined);
          await membership!.leave().catch(() => undefined);
        }
        await events!.stop();
        await coordination.close();
      },
    };

    // Each leader task at most once at a time, and only while this instance leads.
    const every = (ms: number, what: string, task: () => Promise<unknown>) => {
      let running = false;
      const timer = setInterval(() => {
        if (running || !leader!.isLeader) return;
        running = true;
        task()
          .catch((error: unknown) =>
            logger.warn({ error: (error as Error).message, task: what }, "cluster timer failed"),
          )
          .finally(() => {
            running = false;
          });
      }, ms);
      timer.unref();
      timers.push(timer);
    };
    leader.start();
    every(sweepMs, "sweep", async () => {
      const swept = await membership!.sweep();
      const failed = await lanes.failures();
      if (onLostRuns && (swept.requeued.length > 0 || failed.length > 0)) {
        await onLostRuns({ requeued: swept.requeued, failed });
      }
    });
    every(eventRetention.everyMs ?? 10_000, "event retention", () =>
      events!.prune({ keep: eventRetention.keep ?? 100_000, minAgeMs: eventRetention.minAgeMs ?? 60_000 }),
    );
    every(Math.min(budgetWindowMs, 60_000), "budget retention", () => budget.prune());
    every(anchorMs, "audit anchor", () => audit.anchor());
    return cluster;
  } catch (error) {
    for (const timer of timers) clearInterval(timer);
    leader?.stop();
    membership?.stop();
    await events?.stop().catch(() => undefined);
    await coordination.close().catch(() => undefined);
    throw error instanceof Error ? error : new SwitchboardError("INTERNAL", String(error));
  }
}
