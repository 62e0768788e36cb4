import type { HttpRoute } from "../http/http-route";
import type { HttpRouteDeps } from "../http/routes";

/** HTTP endpoints for the web control UI at /ui/, issue 13. Not built yet: answers nothing (404). */
export function uiRoutes(_deps: HttpRouteDeps): HttpRoute[] {
  return [];
}
