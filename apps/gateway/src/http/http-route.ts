import type { IncomingMessage, ServerResponse } from "node:http";

/**
 * One HTTP endpoint on the gateway's port besides the WebSocket protocol and `/healthz` (the UI,
 * `/mcp`, `/metrics`). Routes are tried in order; the first whose `matches` is true answers.
 */
export interface HttpRoute {
  /** Name for logs. */
  readonly name: string;
  /** `pathname` is the request path without the query string. */
  matches(pathname: string, req: IncomingMessage): boolean;
  /** May throw: the transport answers 500 (when nothing was sent yet) and logs the error. */
  handle(req: IncomingMessage, res: ServerResponse): void | Promise<void>;
}

/** `/mcp` matches `/mcp`, `/mcp/…` and not `/mcpx`. */
export function underPath(prefix: string): (pathname: string) => boolean {
  return (pathname) => pathname === prefix || pathname.startsWith(`${prefix}/`);
}
