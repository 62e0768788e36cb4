import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { HttpRoute } from "../http/http-route";
import type { HttpRouteDeps } from "../http/routes";

function sameSecret(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

function bearer(req: IncomingMessage): string | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
  return match?.[1];
}

function refuse(res: ServerResponse, status: number, message: string, challenge?: string): void {
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "cache-control": "no-store",
    ...(challenge ? { "www-authenticate": challenge } : {}),
  });
  res.end(`${message}\n`);
}

/**
 * `GET /metrics`: Prometheus text format. Needs an operator token as a bearer (the data dir's or a
 * configured role-operator token) unless `telemetry.metrics.public`; absent (404) when metrics are off.
 */
export function metricsRoutes(deps: HttpRouteDeps): HttpRoute[] {
  const metrics = deps.metrics;
  if (!metrics) return [];
  const isOperatorToken = (token: string) =>
    sameSecret(token, deps.operatorToken) ||
    deps.config.auth.tokens.some(
      (candidate) => candidate.role === "operator" && sameSecret(token, candidate.token),
    );
  return [
    {
      name: "metrics",
      matches: (pathname) => pathname === "/metrics",
      async handle(req, res) {
        if (req.method !== "GET" && req.method !== "HEAD") {
          res.setHeader("allow", "GET, HEAD");
          refuse(res, 405, "method not allowed: GET /metrics");
          return;
        }
        if (!deps.config.telemetry.metrics.public) {
          const token = bearer(req);
          if (token === undefined) {
            refuse(res, 401, "missing bearer token (an operator token)", 'Bearer realm="switchboard"');
            return;
          }
          if (!isOperatorToken(token)) {
            refuse(
              res,
              401,
              "invalid token: /metrics takes an operator token",
              'Bearer realm="switchboard", error="invalid_token"',
            );
            return;
          }
        }
        const body = await metrics.scrape();
        res.writeHead(200, { "content-type": metrics.contentType, "cache-control": "no-store" });
        res.end(req.method === "HEAD" ? undefined : body);
      },
    },
  ];
}
