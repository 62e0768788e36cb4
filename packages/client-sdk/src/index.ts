export {
  type AgentConnectionOptions,
  AgentWorker,
  type AgentWorkerOptions,
  AgentWorkerOptionsSchema,
  type AssignedRun,
  type RunContext,
  type RunHandler,
  type RunProgressData,
  type RunProgressKind,
  type RunReply,
  RunReplySchema,
  runTraceContext,
  serve,
} from "./agent-worker";
export { type BackoffOptions, backoffDelay } from "./backoff";
export {
  type ClientStartOptions,
  type ConnectionState,
  connect,
  createClient,
  type EventsOptions,
  type MissedEvents,
  type MissedEventsListener,
  type StateListener,
  SwitchboardClient,
  type TypedEvent,
  type TypedEventListener,
} from "./client";
export { isAbortError } from "./client-errors";
export {
  type ClientOptions,
  ClientOptionsSchema,
  type ReconnectOptions,
  ReconnectOptionsSchema,
  type ResolvedClientOptions,
  SDK_NAME,
  SDK_VERSION,
} from "./client-options";
export type { Logger } from "./logger";
export {
  type CallArgs,
  type CallOptions,
  METHOD_SHORTCUTS,
  type MethodFunction,
  type MethodNamespace,
  type NamespaceName,
  READ_ONLY_METHODS,
} from "./method-shortcuts";
export type { WebSocketConstructor, WebSocketLike } from "./websocket";
