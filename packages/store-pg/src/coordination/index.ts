export {
  type ClusterAuditLog,
  type ClusterAuditRecord,
  type ClusterAuditVerifyResult,
  nodeAuditHmac,
  openClusterAuditLog,
} from "./audit-chains";
export { type ClusterBudgetKind, type ClusterCallBudget, openClusterCallBudget } from "./call-budget";
export {
  type CancellationOutcome,
  type ClusterCancellations,
  cancellationChannel,
  openClusterCancellations,
} from "./cancellations";
export { type ClusterChildSlots, openClusterChildSlots } from "./child-slots";
export { type Cluster, type ClusterOptions, openCluster } from "./cluster";
export { clusterValue } from "./cluster-meta";
export {
  type Coordination,
  type CoordinationOptions,
  CoordinationOptionsSchema,
  listenerApplicationName,
  openCoordination,
} from "./context";
export {
  type ClusterEvent,
  type ClusterEventLog,
  type ClusterEventLogOptions,
  type ClusterEventScope,
  type ClusterEventSubscriber,
  eventChannel,
  openClusterEventLog,
} from "./event-log";
export { type ClusterFlowClaims, openClusterFlowClaims } from "./flow-claims";
export { type LeaderLease, type LeaderLeaseOptions, openLeaderLease } from "./leader-lease";
export { type ChannelHandlers, type ChannelListener, openChannelListener } from "./listener";
export {
  type ClusterMembership,
  type LostRun,
  type MembershipOptions,
  openMembership,
  type SweepResult,
} from "./membership";
export { type ClusterRunEnds, openClusterRunEnds } from "./run-ends";
export {
  type ClusterRunLanes,
  createRunOnce,
  openClusterRunLanes,
  type RunClaim,
  type RunDeadline,
} from "./run-lanes";
export { COORDINATION_MIGRATIONS, COORDINATION_VERSION } from "./schema";
export { type ClusterSecrets, openClusterSecrets } from "./secrets";
export { type ClusterWaitGraph, openClusterWaitGraph } from "./wait-graph";
