import type { HttpRoute } from "../http/http-route";
import type { HttpRouteDeps } from "../http/routes";

/** HTTP endpoints for /metrics, issue 15. Not built yet: answers nothing (404). */
export function metricsRoutes(_deps: HttpRouteDeps): HttpRoute[] {
  return [];
}
