import type { HttpRoute } from "../http/http-route";
import type { HttpRouteDeps } from "../http/routes";

/** HTTP endpoints for /mcp (Streamable HTTP), issue 14. Not built yet: answers nothing (404). */
export function mcpRoutes(_deps: HttpRouteDeps): HttpRoute[] {
  return [];
}
