export { clusterValue } from "./cluster-meta";
export {
  type Coordination,
  type CoordinationOptions,
  CoordinationOptionsSchema,
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
export { COORDINATION_MIGRATIONS, COORDINATION_VERSION } from "./schema";
