import { readFile, stat } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { dirname, extname, join, resolve, sep } from "node:path";
import type { HttpRoute } from "../http/http-route";
import type { HttpRouteDeps } from "../http/routes";

/**
 * The UI's scripts and styles come only from its own files; it talks only to its own origin (the
 * WebSocket included: CSP 3 `'self'` covers ws/wss of the same host). No inline script or style
 * attribute can run, so text that slipped into markup would still execute nothing.
 */
export const UI_CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "object-src 'none'",
].join("; ");

const SECURITY_HEADERS: Record<string, string> = {
  "content-security-policy": UI_CONTENT_SECURITY_POLICY,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
};

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".woff2": "font/woff2",
  ".txt": "text/plain; charset=utf-8",
};

/** Where `@switchboard/web` put its build, found through the package (works in the workspace and installed). */
export function defaultUiDir(): string | undefined {
  try {
    const require = createRequire(import.meta.url);
    return join(dirname(require.resolve("@switchboard/web/package.json")), "dist");
  } catch {
    return undefined;
  }
}

export interface UiRouteOptions {
  /** The built UI (index.html and assets/); undefined or missing: `/ui/` answers 503 saying to build. */
  dir: string | undefined;
}

const NOT_BUILT_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Switchboard UI not built</title></head>
<body><h1>The web UI is not built</h1>
<p>The gateway serves the UI from the build of <code>apps/web</code>, which is missing.
Run <code>npx -y pnpm@10.34.8 build</code> (or <code>pnpm start</code>, which builds first) and reload.</p>
</body></html>
`;

function send(
  res: ServerResponse,
  status: number,
  headers: Record<string, string>,
  body: string | Buffer,
  head: boolean,
): void {
  const bytes = typeof body === "string" ? Buffer.from(body) : body;
  res.writeHead(status, { ...SECURITY_HEADERS, ...headers, "content-length": String(bytes.length) });
  res.end(head ? undefined : bytes);
}

function text(
  res: ServerResponse,
  status: number,
  message: string,
  head: boolean,
  extra: Record<string, string> = {},
) {
  send(
    res,
    status,
    { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store", ...extra },
    message,
    head,
  );
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/**
 * The bytes of the build's files, read once each: a reading per request let pipelined requests on
 * one socket hold a copy each of a 370 KB bundle (gigabytes from one client). A file whose size or
 * time changed (a rebuild under a running gateway) is read again.
 */
class BuildFiles {
  private readonly files = new Map<string, { mtimeMs: number; size: number; bytes: Buffer }>();

  /** The file's bytes, or undefined when it is not a file. */
  async read(path: string): Promise<Buffer | undefined> {
    let info: Awaited<ReturnType<typeof stat>>;
    try {
      info = await stat(path);
    } catch {
      return undefined;
    }
    if (!info.isFile()) return undefined;
    const known = this.files.get(path);
    if (known && known.mtimeMs === info.mtimeMs && known.size === info.size) return known.bytes;
    const bytes = await readFile(path);
    this.files.set(path, { mtimeMs: info.mtimeMs, size: info.size, bytes });
    return bytes;
  }
}

/** The web UI at `/ui/` (web-ui.md): static files, the app for every view URL, `/` redirected. */
export function createUiRoutes(options: UiRouteOptions): HttpRoute[] {
  const root = options.dir === undefined ? undefined : resolve(options.dir);
  const build = new BuildFiles();
  return [
    {
      name: "ui",
      matches: (pathname) => pathname === "/" || pathname === "/ui" || pathname.startsWith("/ui/"),
      handle: async (req: IncomingMessage, res: ServerResponse) => {
        const head = req.method === "HEAD";
        if (req.method !== "GET" && !head) {
          text(res, 405, "method not allowed: the UI answers GET and HEAD", false, { allow: "GET, HEAD" });
          return;
        }
        const rawPath = (req.url ?? "/").split("?", 1)[0] ?? "/";
        const query = (req.url ?? "").slice(rawPath.length);
        if (rawPath === "/" || rawPath === "/ui") {
          send(
            res,
            302,
            { location: `/ui/${rawPath === "/ui" ? query : ""}`, "cache-control": "no-store" },
            "",
            head,
          );
          return;
        }
        let relativePath: string;
        try {
          relativePath = decodeURIComponent(rawPath.slice("/ui/".length));
        } catch {
          text(res, 400, "bad request: the path is not valid percent-encoding", head);
          return;
        }
        if (relativePath.includes("\0") || relativePath.includes("\\")) {
          text(res, 400, "bad request: the path holds a forbidden character", head);
          return;
        }
        if (root === undefined || !(await isFile(join(root, "index.html")))) {
          send(
            res,
            503,
            { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" },
            NOT_BUILT_PAGE,
            head,
          );
          return;
        }
        const file = resolve(root, relativePath === "" ? "index.html" : relativePath);
        // `..` segments (also percent-encoded) must never reach outside the build.
        if (file !== root && !file.startsWith(root + sep)) {
          text(res, 404, "not found", head);
          return;
        }
        const bytes = await build.read(file);
        if (bytes) {
          const hashed = relativePath.startsWith("assets/");
          send(
            res,
            200,
            {
              "content-type": CONTENT_TYPES[extname(file).toLowerCase()] ?? "application/octet-stream",
              // Vite names assets by their content hash: they never change under one name.
              "cache-control": hashed ? "public, max-age=31536000, immutable" : "no-cache",
            },
            bytes,
            head,
          );
          return;
        }
        // A missing file (an asset of an older build, a typo, a top-level `name.ext`) is a 404; a
        // view URL gets the app, a session key with a dot in it (`…:dm:alice.smith`) included.
        if (
          relativePath.startsWith("assets/") ||
          (!relativePath.includes("/") && extname(relativePath) !== "")
        ) {
          text(res, 404, "not found", head);
          return;
        }
        const app = await build.read(join(root, "index.html"));
        if (!app) {
          text(res, 404, "not found", head);
          return;
        }
        send(res, 200, { "content-type": CONTENT_TYPES[".html"]!, "cache-control": "no-cache" }, app, head);
      },
    },
  ];
}

/** HTTP endpoints for the web control UI at /ui/ (off with `ui.enabled: false`). */
export function uiRoutes(deps: HttpRouteDeps): HttpRoute[] {
  if (!deps.config.ui.enabled) return [];
  return createUiRoutes({ dir: defaultUiDir() });
}
