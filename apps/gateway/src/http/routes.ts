import type { Logger } from "pino";
import type { McpCancellationRelay } from "../mcp/mcp-cancellations";
import { mcpRoutes } from "../mcp/mcp-routes";
import type { Dispatch, HandlerMap, MethodDeps } from "../methods";
import type { GatewayMetrics } from "../telemetry/metrics";
import { metricsRoutes } from "../telemetry/metrics-routes";
import { uiRoutes } from "../ui/ui-routes";
import type { HttpRoute } from "./http-route";

/** What the HTTP endpoints are built from: the same parts as the protocol handlers, plus the handlers. */
export interface HttpRouteDeps extends MethodDeps {
  log: Logger;
  instanceId: string;
  operatorToken: string;
  handlers: HandlerMap;
  dispatch: Dispatch;
  /** Undefined when `telemetry.metrics.enabled` is false (`/metrics` is then not served). */
  metrics?: GatewayMetrics | undefined;
  /** Several instances: MCP cancellations of calls this instance does not hold go to the others. */
  cancellationRelay?: McpCancellationRelay | undefined;
  /** Aborted when a graceful stop tells waiting calls to answer (`Transport.stopWaiting`). */
  stopWaitingSignal?: AbortSignal | undefined;
}

/** Every HTTP endpoint besides `/healthz`, in the order they are tried. */
export function httpRoutes(deps: HttpRouteDeps): HttpRoute[] {
  return [...mcpRoutes(deps), ...metricsRoutes(deps), ...uiRoutes(deps)];
}
