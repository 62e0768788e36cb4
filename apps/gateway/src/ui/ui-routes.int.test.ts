import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@switchboard/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HttpRouteDeps } from "../http/routes";
import { createUiRoutes, UI_CONTENT_SECURITY_POLICY, uiRoutes } from "./ui-routes";

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A raw request: `fetch` would normalise `..` segments away before they reach the server. */
function get(port: number, path: string, method = "GET"): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, method }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks).toString("utf8"),
        }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

async function serve(dir: string | undefined): Promise<{ server: Server; port: number }> {
  const [route] = createUiRoutes({ dir });
  const server = createServer((req, res) => {
    const pathname = (req.url ?? "/").split("?", 1)[0]!;
    if (route!.matches(pathname, req)) void route!.handle(req, res);
    else {
      res.writeHead(404);
      res.end("other route");
    }
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return { server, port: (server.address() as AddressInfo).port };
}

describe("the UI routes", () => {
  let root: string;
  let port: number;
  let server: Server;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "sb-ui-"));
    const dist = join(root, "dist");
    await mkdir(join(dist, "assets"), { recursive: true });
    await writeFile(join(dist, "index.html"), "<!doctype html><title>app</title>");
    await writeFile(join(dist, "assets", "index-abc123.js"), "console.log(1)");
    await writeFile(join(dist, "assets", "index-abc123.css"), "body{}");
    // A file next to the build that traversal must not reach.
    await writeFile(join(root, "secret.txt"), "operator-token");
    ({ server, port } = await serve(dist));
  });

  afterAll(async () => {
    server.close();
    await rm(root, { recursive: true, force: true });
  });

  it("redirects / and /ui to /ui/", async () => {
    expect(await get(port, "/")).toMatchObject({ status: 302, headers: { location: "/ui/" } });
    expect(await get(port, "/ui")).toMatchObject({ status: 302, headers: { location: "/ui/" } });
  });

  it("serves the app with the CSP, no-cache, and hashed assets as immutable with their types", async () => {
    const index = await get(port, "/ui/");
    expect(index.status).toBe(200);
    expect(index.body).toContain("<title>app</title>");
    expect(index.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(index.headers["cache-control"]).toBe("no-cache");
    expect(index.headers["content-security-policy"]).toBe(UI_CONTENT_SECURITY_POLICY);
    expect(UI_CONTENT_SECURITY_POLICY).toContain("script-src 'self'");
    expect(UI_CONTENT_SECURITY_POLICY).not.toContain("unsafe-inline");
    expect(index.headers["x-content-type-options"]).toBe("nosniff");

    const script = await get(port, "/ui/assets/index-abc123.js");
    expect(script.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect(script.headers["cache-control"]).toBe("public, max-age=31536000, immutable");
    expect((await get(port, "/ui/assets/index-abc123.css")).headers["content-type"]).toBe(
      "text/css; charset=utf-8",
    );
  });

  it("answers every view URL with the app, and a missing asset with 404", async () => {
    for (const view of [
      "/ui/sessions",
      "/ui/sessions/agent%3Amain%3Amain?tools=hide",
      "/ui/audit",
      "/ui/runs/r1",
      // A key with a dot in it is a view, not a file (404 before session 23: links could not be shared).
      `/ui/sessions/${encodeURIComponent("agent:main:telegram:dm:alice.smith")}`,
      "/ui/sessions/agent:main:webchat:dm:bob@example.com",
    ]) {
      const answer = await get(port, view);
      expect(answer.status, view).toBe(200);
      expect(answer.body).toContain("<title>app</title>");
    }
    expect((await get(port, "/ui/assets/gone-123.js")).status).toBe(404);
    expect((await get(port, "/ui/favicon.ico")).status).toBe(404);
  });

  it("serves a rebuilt file's new bytes (files are read once, then again when they change)", async () => {
    const file = join(root, "dist", "assets", "index-abc123.js");
    expect((await get(port, "/ui/assets/index-abc123.js")).body).toBe("console.log(1)");
    await writeFile(file, "console.log(22)");
    expect((await get(port, "/ui/assets/index-abc123.js")).body).toBe("console.log(22)");
    await writeFile(file, "console.log(1)");
  });

  it("never serves a file outside the build, however the path is spelled", async () => {
    for (const path of [
      "/ui/../secret.txt",
      "/ui/%2e%2e/secret.txt",
      "/ui/assets/%2e%2e/%2e%2e/secret.txt",
      "/ui/..%2fsecret.txt",
      "/ui/%2e%2e%2f%2e%2e%2fsecret.txt",
      "/ui/..%5csecret.txt",
      "/ui/%00",
    ]) {
      const answer = await get(port, path);
      expect(answer.body, path).not.toContain("operator-token");
      expect([400, 404], path).toContain(answer.status);
    }
  });

  it("answers HEAD without a body and refuses other methods", async () => {
    const head = await get(port, "/ui/", "HEAD");
    expect(head.status).toBe(200);
    expect(head.body).toBe("");
    const post = await get(port, "/ui/", "POST");
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe("GET, HEAD");
  });

  it("says to build when the UI build is missing", async () => {
    const missing = await serve(join(root, "nothing-here"));
    try {
      const answer = await get(missing.port, "/ui/");
      expect(answer.status).toBe(503);
      expect(answer.body).toContain("The web UI is not built");
      expect(answer.headers["content-security-policy"]).toBe(UI_CONTENT_SECURITY_POLICY);
    } finally {
      missing.server.close();
    }
  });

  it("serves nothing with ui.enabled false, and the workspace build by default", () => {
    const deps = (enabled: boolean) =>
      ({ config: parseConfig({ ui: { enabled } }) }) as unknown as HttpRouteDeps;
    expect(uiRoutes(deps(false))).toEqual([]);
    expect(uiRoutes(deps(true)).map((route) => route.name)).toEqual(["ui"]);
  });
});
