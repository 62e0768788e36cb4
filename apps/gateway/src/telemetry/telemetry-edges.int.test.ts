/**
 * The telemetry and HTTP surface under hostile use: /metrics, traces, the HTTP routes and retention
 * (a review in session 16; the tests marked `Was:` failed before their fix, docs/decisions.md).
 */
import { type Socket, connect as tcpConnect } from "node:net";
import { InMemorySpanExporter, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { connect, type SwitchboardClient, serve } from "@switchboard/client";
import { afterEach, describe, expect, it } from "vitest";
import { TestPeer } from "../testing/test-peer";
import {
  CLIENT_TOKEN,
  OPERATOR_TOKEN,
  sample,
  startTelemetryGateway,
  type TelemetryGateway,
  telemetryConfig,
  WORKER_TOKEN,
} from "./telemetry-test-gateway";

let gw: TelemetryGateway | undefined;
const clients: SwitchboardClient[] = [];
const workers: Array<{ stop(): Promise<void> }> = [];
const peers: TestPeer[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  for (const peer of peers.splice(0)) peer.socket.terminate();
  await Promise.all(workers.splice(0).map((worker) => worker.stop()));
  await Promise.all(clients.splice(0).map((client) => client.close()));
  await gw?.close();
  gw = undefined;
});

async function scrapeText(token = OPERATOR_TOKEN): Promise<string> {
  const res = await fetch(`${gw!.httpUrl}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  return res.text();
}

async function healthy(): Promise<void> {
  const res = await fetch(`${gw!.httpUrl}/healthz`);
  expect(res.status).toBe(200);
}

/** Raw HTTP over TCP: what was answered (or "" when the socket closed without an answer). */
function rawHttp(
  request: string | Buffer,
  options: { waitMs?: number } = {},
): Promise<{ text: string; closed: boolean }> {
  const { port } = new URL(gw!.httpUrl);
  return new Promise((resolve) => {
    const socket = tcpConnect(Number(port), "127.0.0.1");
    sockets.push(socket);
    let text = "";
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve({ text, closed });
    };
    const timer = setTimeout(() => finish(false), options.waitMs ?? 3000);
    socket.on("data", (chunk) => {
      text += chunk.toString("latin1");
    });
    socket.on("close", () => finish(true));
    socket.on("error", () => finish(true));
    socket.on("connect", () => socket.write(request));
  });
}

async function rawWorker(agents = ["main", "research"]): Promise<TestPeer> {
  const peer = await TestPeer.connect(gw!.url, { token: WORKER_TOKEN, role: "agent", agents });
  await peer.call("events.subscribe", {});
  peers.push(peer);
  return peer;
}

async function operator(): Promise<SwitchboardClient> {
  const op = await connect({ url: gw!.url, token: gw!.gateway.operatorToken, role: "operator" });
  clients.push(op);
  return op;
}

/** A raw worker that holds one run of `main` (its runId). */
async function heldRun(peer: TestPeer, op: SwitchboardClient, message = "hold"): Promise<string> {
  const from = peer.events.length;
  const { runId } = await op.chat.send({ sessionKey: "main", message });
  await peer.waitForEvent((e) => e.event === "run.assigned" && e.payload.runId === runId, 5000, from);
  return runId;
}

const spanText = (span: ReadableSpan) =>
  JSON.stringify({
    name: span.name,
    attributes: span.attributes,
    status: span.status,
    events: span.events.map((e) => ({ name: e.name, attributes: e.attributes })),
  });

describe("/metrics: label cardinality and size", () => {
  it("creates no series for thousands of unknown method names", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const peer = await TestPeer.connect(gw.url, { token: OPERATOR_TOKEN, role: "operator" });
    peers.push(peer);
    const before = (await scrapeText()).length;
    const answers = [];
    for (let i = 0; i < 3000; i++) answers.push(peer.request(`no.such.method.${i}.${"x".repeat(40)}`, {}));
    const responses = await Promise.all(answers);
    expect(responses.every((r) => r.ok === false && r.error?.code === "INVALID_REQUEST")).toBe(true);
    const after = await scrapeText();
    expect(after).not.toContain("no.such.method");
    expect(after.length - before).toBeLessThan(20_000);
  });

  it("keeps bad params and refused roles to the known method labels", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const client = await TestPeer.connect(gw.url, { token: CLIENT_TOKEN, role: "client" });
    peers.push(client);
    for (let i = 0; i < 200; i++) {
      await client.request("sessions.status", { sessionKey: `agent:main:webchat:dm:user-${i}` });
      await client.request("sessions.list", {});
      await client.request("chat.send", { sessionKey: 42 + i, message: "" });
    }
    const text = await scrapeText();
    // No session key leaks into any label, and outcome stays an error code.
    expect(text).not.toContain("user-1");
    for (const [, outcome] of text.matchAll(/switchboard_requests_total\{[^}]*outcome="([^"]*)"/g))
      expect(outcome).toMatch(/^(ok|[A-Z_]+)$/);
  });

  // Was: a worker filled the 200 `tool` label slots with names of tools that do not exist, after which
  // the gateway's own tools were all counted as `other`: one misbehaving worker blinded the tool metrics.
  it("keeps the gateway's own tool names after a worker tried 250 unknown tool names", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const peer = await rawWorker();
    const op = await operator();
    const runId = await heldRun(peer, op);
    for (let i = 0; i < 250; i++) {
      const res = await peer.request("tools.invoke", { tool: `bogus_tool_${i}`, args: {}, runId });
      // Answered `{status: "error", error: "unknown tool: ..."}` (yet counted as decision "allow").
      expect(res.ok).toBe(true);
    }
    const real = await peer.call<{ status: string }>("tools.invoke", {
      tool: "session_status",
      args: {},
      runId,
    });
    expect(real.status).toBe("ok");
    const text = await scrapeText();
    expect(sample(text, "switchboard_tool_calls_total", { tool: "session_status", decision: "allow" })).toBe(
      1,
    );
  });

  // Was: a call of a tool that does not exist (answered `unknown tool`) was counted as decision `allow`:
  // the gate passed any name and the policy allowed it before the executor found no such tool.
  it("does not count a call of a non-existent tool as allowed", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const peer = await rawWorker();
    const op = await operator();
    const runId = await heldRun(peer, op);
    const res = await peer.call<{ status: string }>("tools.invoke", {
      tool: "no_such_tool",
      args: {},
      runId,
    });
    expect(res.status).toBe("error");
    const text = await scrapeText();
    expect(
      sample(text, "switchboard_tool_calls_total", { tool: "no_such_tool", decision: "allow" }),
    ).toBeUndefined();
  });

  // Was: `run.progress.name` had no length limit, and the name becomes a `tool` label kept for the life
  // of the process and rendered into every scrape (200 slots x 1 MB). Now 128, as for tools.invoke.
  it("bounds the length of a worker-named tool label", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const peer = await rawWorker();
    const op = await operator();
    const runId = await heldRun(peer, op);
    const before = (await scrapeText()).length;
    const name = `t${"n".repeat(200_000)}`;
    await peer.request("run.progress", { runId, kind: "tool-call", name, toolCallId: "c1", args: {} });
    await peer.request("run.progress", { runId, kind: "tool-result", name, toolCallId: "c1", result: 1 });
    const after = await scrapeText();
    const longest = Math.max(...[...after.matchAll(/tool="([^"]*)"/g)].map((m) => m[1]!.length));
    expect(longest).toBeLessThanOrEqual(128);
    expect(after.length - before).toBeLessThan(10_000);
  });

  it("escapes a worker-named tool label: no forged samples in the exposition", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const peer = await rawWorker();
    const op = await operator();
    const runId = await heldRun(peer, op);
    const name = 'x"} 1\nswitchboard_runs_total{status="forged"} 999\n# \\';
    await peer.request("run.progress", { runId, kind: "tool-result", name, toolCallId: "c1", result: 1 });
    const scrapes = await Promise.all(Array.from({ length: 20 }, () => scrapeText()));
    for (const text of scrapes) {
      expect(sample(text, "switchboard_runs_total", { status: "forged" })).toBeUndefined();
      expect(
        text.split("\n").filter((line) => line.startsWith('switchboard_runs_total{status="forged')),
      ).toHaveLength(0);
    }
  });

  it("never shows message text, session keys, tokens or the data dir in /metrics", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    workers.push(
      await serve({ url: gw.url, token: WORKER_TOKEN }, ["main", "research"], async (run) => ({
        reply: `echo ${run.input.message}`,
      })),
    );
    const op = await operator();
    await op.sessions.create({ key: "agent:main:webchat:dm:canary-person" });
    const { runId } = await op.chat.send({
      sessionKey: "agent:main:webchat:dm:canary-person",
      message: "CANARY-MESSAGE-TEXT",
    });
    await op.agent.wait({ runId, timeoutMs: 5000 });
    const text = await scrapeText();
    for (const secret of [
      "CANARY-MESSAGE-TEXT",
      "canary-person",
      WORKER_TOKEN,
      OPERATOR_TOKEN,
      CLIENT_TOKEN,
      gw.gateway.operatorToken,
      gw.gateway.dataDir,
    ])
      expect(text).not.toContain(secret);
  });
});

describe("/metrics: access over HTTP", () => {
  it("refuses every other method, bad bearer forms and trick paths; HEAD has no body", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const url = `${gw.httpUrl}/metrics`;
    for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
      const res = await fetch(url, { method, headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } });
      expect(res.status, method).toBe(405);
      expect(res.headers.get("allow")).toBe("GET, HEAD");
    }
    const head = await fetch(url, { method: "HEAD", headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
    for (const authorization of [
      "Bearer",
      "Bearer ",
      `Basic ${Buffer.from(`x:${OPERATOR_TOKEN}`).toString("base64")}`,
      `Bearer ${OPERATOR_TOKEN} extra`,
      `Bearer ${OPERATOR_TOKEN.slice(0, -1)}`,
      `Bearer ${OPERATOR_TOKEN}x`,
      `Bearer ${WORKER_TOKEN}`,
      `Bearer ${"a".repeat(8000)}`,
      `Bearer ${OPERATOR_TOKEN.toUpperCase()}`,
    ]) {
      const res = await fetch(url, { headers: { authorization } });
      expect(res.status, authorization.slice(0, 40)).toBe(401);
      expect(await res.text()).not.toContain("switchboard_");
    }
    // Query strings, absolute-form and odd spellings of the path never skip the token check.
    const plain = await rawHttp("GET /metrics?format=x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    expect(plain.text).toMatch(/^HTTP\/1\.1 401/);
    for (const target of ["http://127.0.0.1/metrics", "//metrics", "/metrics/", "/%6detrics", "/./metrics"]) {
      const res = await rawHttp(`GET ${target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`);
      expect(res.text, target).not.toMatch(/^HTTP\/1\.1 200/);
      expect(res.text, target).not.toContain("switchboard_requests_total");
    }
    await healthy();
  });

  it("answers a 4xx to huge headers, a huge body, garbage and bad request lines, and stays up", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const bigHeader = await rawHttp(
      `GET /metrics HTTP/1.1\r\nHost: a\r\nX-Big: ${"a".repeat(200_000)}\r\nConnection: close\r\n\r\n`,
    );
    expect(bigHeader.text).toMatch(/^HTTP\/1\.1 431/);
    const manyHeaders = await rawHttp(
      `GET /metrics HTTP/1.1\r\nHost: a\r\n${Array.from({ length: 3000 }, (_, i) => `X-H${i}: v`).join("\r\n")}\r\n\r\n`,
    );
    expect(manyHeaders.text).toMatch(/^HTTP\/1\.1 4\d\d/);
    for (const garbage of [
      "\x00\x01\x02\r\n\r\n",
      "GET\r\n\r\n",
      "GET /metrics HTTP/9.9\r\n\r\n",
      "GET /metr\x7fics HTTP/1.1\r\nHost: a\r\n\r\n",
      "BREW /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nHost: a\r\n\r\n0\r\n\r\n",
    ]) {
      const res = await rawHttp(garbage);
      expect(res.text.startsWith("HTTP/1.1 2"), JSON.stringify(garbage)).toBe(false);
    }
    // A 20 MB body on /metrics: refused (405) without buffering it all.
    const body = Buffer.alloc(20 * 1024 * 1024, 97);
    const posted = await fetch(`${gw.httpUrl}/metrics`, {
      method: "POST",
      body,
      headers: { authorization: `Bearer ${OPERATOR_TOKEN}` },
    }).catch((error: unknown) => error as Error);
    if (!(posted instanceof Error)) expect(posted.status).toBe(405);
    const unknown = await fetch(`${gw.httpUrl}/no/such/path`);
    expect(unknown.status).toBe(404);
    await healthy();
    expect(
      (await fetch(`${gw.httpUrl}/metrics`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } }))
        .status,
    ).toBe(200);
  });

  it("closes a slowloris socket (headers dribbled) within the handshake window, also after a first request", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const { port } = new URL(gw.httpUrl);
    const dribble = (prefix: string) =>
      new Promise<{ closedAfterMs: number | undefined; text: string }>((resolve) => {
        const socket = tcpConnect(Number(port), "127.0.0.1");
        sockets.push(socket);
        const started = Date.now();
        let text = "";
        let interval: NodeJS.Timeout | undefined;
        const stop = setTimeout(() => {
          clearInterval(interval);
          resolve({ closedAfterMs: undefined, text });
        }, 12_000);
        socket.on("data", (chunk) => {
          text += chunk.toString("latin1");
        });
        socket.on("close", () => {
          clearInterval(interval);
          clearTimeout(stop);
          resolve({ closedAfterMs: Date.now() - started, text });
        });
        socket.on("error", () => undefined);
        socket.on("connect", () => {
          socket.write(`${prefix}GET /metrics HTTP/1.1\r\nHost: a\r\n`);
          let n = 0;
          interval = setInterval(() => {
            if (!socket.destroyed) socket.write(`X-${n++}: y\r\n`);
          }, 300);
        });
      });
    const [fresh, afterFirst] = await Promise.all([
      dribble(""),
      dribble(`GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n`),
    ]);
    expect(fresh.closedAfterMs).toBeDefined();
    expect(fresh.closedAfterMs!).toBeLessThan(9_000);
    // The first request was answered; the dribbled second one must not hold the socket for ever.
    expect(afterFirst.text).toMatch(/^HTTP\/1\.1 200/);
    expect(afterFirst.closedAfterMs).toBeDefined();
    expect(afterFirst.closedAfterMs!).toBeLessThan(11_000);
    await healthy();
  }, 20_000);

  it("never serves a file outside the UI build through /ui/ path tricks", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    for (const target of [
      "/ui/../package.json",
      "/ui/..%2f..%2f..%2fpackage.json",
      "/ui/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
      "/ui/..%5c..%5cpackage.json",
      "/ui/%00index.html",
      "/ui/%E0%A4%A",
      "/ui/assets/..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
      "/ui/....//....//etc/passwd",
      `/ui/${"a/".repeat(3000)}`,
    ]) {
      const res = await rawHttp(`GET ${target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`);
      expect(res.text, target).not.toContain("root:x:0:0");
      expect(res.text, target).not.toContain('"name": "@switchboard');
      expect(res.text, target).toMatch(/^HTTP\/1\.1 (200|302|400|404|503)/);
      if (/^HTTP\/1\.1 200/.test(res.text)) expect(res.text, target).toContain("<!doctype html>".slice(0, 5));
    }
    await healthy();
  });

  it("tells an unauthenticated /healthz caller nothing about the data dir or the tokens", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const text = await (await fetch(`${gw.httpUrl}/healthz`)).text();
    expect(text).not.toContain(gw.gateway.dataDir);
    expect(text).not.toContain(gw.gateway.operatorToken);
  });
});

describe("traces", () => {
  async function traced(extra = {}) {
    const spans = new InMemorySpanExporter();
    gw = await startTelemetryGateway(telemetryConfig(extra), { tracing: { env: {}, exporter: spans } });
    return spans;
  }

  it("puts no message text or reply text into any span", async () => {
    const spans = await traced();
    workers.push(
      await serve({ url: gw!.url, token: WORKER_TOKEN }, ["main", "research"], async (run, ctx) => {
        if (run.input.message.includes("fail")) throw new Error(`SECRET-FAILURE ${run.input.message}`);
        await ctx.invokeTool("sessions_send", {
          sessionKey: "agent:research:main",
          message: "SECRET-TOOL-ARG",
          timeoutSeconds: 0,
        });
        return { reply: "SECRET-REPLY-TEXT" };
      }),
    );
    const op = await operator();
    const first = await op.chat.send({ sessionKey: "main", message: "SECRET-MESSAGE-TEXT" });
    await op.agent.wait({ runId: first.runId, timeoutMs: 5000 });
    await gw!.gateway.flows.idle();
    const all = spans.getFinishedSpans();
    expect(all.length).toBeGreaterThan(2);
    for (const span of all) {
      const text = spanText(span);
      for (const secret of ["SECRET-MESSAGE-TEXT", "SECRET-REPLY-TEXT", "SECRET-TOOL-ARG"])
        expect(text, span.name).not.toContain(secret);
    }
  });

  // Was: a request's `runId` param went into the span attribute `switchboard.run_id` whole (no
  // protocol bound, and the SDK's attribute limit is unbounded by default): one worker frame put
  // ~1 MB into every span it sent and into the exporter's batch queue (2048 spans: ~2 GB).
  it("bounds client-controlled strings copied into span attributes", async () => {
    const spans = await traced();
    const peer = await rawWorker();
    const huge = `r${"x".repeat(300_000)}`;
    for (const method of ["tools.list", "tools.invoke", "run.progress", "run.fail"]) {
      const params: Record<string, unknown> =
        method === "tools.invoke"
          ? { tool: "session_status", args: {}, runId: huge }
          : method === "run.progress"
            ? { runId: huge, kind: "text-delta", text: "x" }
            : method === "run.fail"
              ? { runId: huge, error: "e" }
              : { runId: huge };
      const res = await peer.request(method, params);
      expect(res.ok, method).toBe(false);
    }
    // Refused before any span starts (the protocol bounds run ids); and no span anywhere carries a
    // value longer than the tracer's own bound.
    for (const span of spans.getFinishedSpans()) {
      for (const [name, value] of Object.entries(span.attributes))
        expect(String(value).length, `${span.name} ${name}`).toBeLessThanOrEqual(256);
    }
  });

  it("ends every run span and keeps none in memory: timeout, worker gone, session deleted or reset, run.fail", async () => {
    const spans = await traced();
    const op = await operator();
    const tracing = gw!.gateway.telemetry.tracing as unknown as { runs: Map<string, unknown> };
    // 1. A worker that never answers: the run times out.
    const silent = await rawWorker(["main"]);
    const timedOut = await op.chat.send({ sessionKey: "main", message: "slow" });
    await silent.waitForEvent((e) => e.event === "run.assigned" && e.payload.runId === timedOut.runId);
    expect(await op.agent.wait({ runId: timedOut.runId, timeoutMs: 5000 })).toMatchObject({
      status: "timeout",
    });
    // 2. A worker that leaves while holding a run.
    const leaving = await op.chat.send({ sessionKey: "agent:main:webchat:dm:a", message: "x" });
    await silent.waitForEvent((e) => e.event === "run.assigned" && e.payload.runId === leaving.runId);
    silent.socket.terminate();
    expect(await op.agent.wait({ runId: leaving.runId, timeoutMs: 5000 })).toMatchObject({ status: "error" });
    // 3. Queued runs of an agent with no worker, in a session then deleted (and one reset).
    await op.sessions.create({ key: "agent:research:webchat:dm:q" });
    await op.sessions.create({ key: "agent:research:webchat:dm:r" });
    const queued = await op.chat.send({ sessionKey: "agent:research:webchat:dm:q", message: "q" });
    const queued2 = await op.chat.send({ sessionKey: "agent:research:webchat:dm:r", message: "r" });
    await op.sessions.delete({ key: "agent:research:webchat:dm:q" });
    await op.sessions.reset({ key: "agent:research:webchat:dm:r" });
    // Then a worker for research comes: the queued runs end (their sessions are gone) or run.
    workers.push(
      await serve({ url: gw!.url, token: WORKER_TOKEN }, ["research"], async () => ({ reply: "late" })),
    );
    for (const runId of [queued.runId, queued2.runId])
      expect(await op.agent.wait({ runId, timeoutMs: 5000 })).toMatchObject({ status: expect.any(String) });
    // 4. Ten runs failing at once by run.fail from a raw worker.
    const failing = await rawWorker(["main"]);
    for (let i = 0; i < 10; i++) {
      const from = failing.events.length;
      const { runId } = await op.chat.send({ sessionKey: `agent:main:webchat:dm:f${i}`, message: "f" });
      await failing.waitForEvent((e) => e.event === "run.assigned" && e.payload.runId === runId, 5000, from);
      await failing.call("run.fail", { runId, error: "nope" });
    }
    await gw!.gateway.flows.idle();
    expect(tracing.runs.size).toBe(0);
    const runSpans = spans.getFinishedSpans().filter((s) => s.name.startsWith("run "));
    expect(runSpans.length).toBeGreaterThanOrEqual(14);
  }, 30_000);

  // Was: any request whose params name a `runId` became a child of that run's span, whoever sent it:
  // a client with no access to the run's session (refused FORBIDDEN) still got its span into that
  // run's trace. Only a worker's requests join it now.
  it("a client without access to a run does not get its request parented into that run's trace", async () => {
    const NARROW = "telemetry-narrow-client-token-0123456789";
    const base = telemetryConfig();
    const spans = new InMemorySpanExporter();
    gw = await startTelemetryGateway(
      {
        ...base,
        auth: {
          tokens: [
            ...(base.auth as { tokens: object[] }).tokens,
            { name: "narrow", token: NARROW, role: "client", sessions: ["agent:main:webchat:dm:narrow"] },
          ],
        } as never,
      },
      { tracing: { env: {}, exporter: spans } },
    );
    const peer = await rawWorker(["main"]);
    const op = await operator();
    const runId = await heldRun(peer, op);
    const client = await TestPeer.connect(gw.url, { token: NARROW, role: "client" });
    peers.push(client);
    const refused = await client.request("agent.wait", { runId, timeoutMs: 0 });
    expect(refused.ok).toBe(false);
    await peer.call("run.complete", { runId, reply: "done" });
    await gw.gateway.flows.idle();
    const all = spans.getFinishedSpans();
    const run = all.find((s) => s.name.startsWith("run ") && s.attributes["switchboard.run_id"] === runId)!;
    const wait = all.find((s) => s.name === "agent.wait")!;
    expect(run).toBeDefined();
    expect(wait).toBeDefined();
    expect(wait.parentSpanContext?.spanId).not.toBe(run.spanContext().spanId);
    expect(wait.spanContext().traceId).not.toBe(run.spanContext().traceId);
  });
});

describe("retention", () => {
  it("never prunes a run still going or queued, nor one whose announce is pending", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const peer = await rawWorker(["main"]);
    const op = await operator();
    const running = await heldRun(peer, op);
    const DAY = 86_400_000;
    const stored = (await gw.store.runs.get(running))!;
    // Even with a bogus old endedAt on a running record, it stays.
    await gw.store.runs.put({ ...stored, createdAt: Date.now() - 30 * DAY, endedAt: Date.now() - 20 * DAY });
    await gw.store.runs.put({
      ...stored,
      runId: "pending-announce",
      status: "ok",
      idempotencyKey: undefined,
      createdAt: Date.now() - 30 * DAY,
      endedAt: Date.now() - 20 * DAY,
      spawn: {
        requesterKey: "agent:main:main",
        childKey: "agent:research:subagent:x",
        childSessionId: "00000000-0000-4000-8000-000000000001",
        task: "t",
        cleanup: "keep",
        announce: { status: "pending", attempts: 0, idempotencyKey: "announce-x" },
      },
    } as never);
    await gw.gateway.retention.runOnce();
    expect(await gw.store.runs.get(running)).toBeDefined();
    expect(await gw.store.runs.get("pending-announce")).toBeDefined();
    await peer.call("run.complete", { runId: running, reply: "done" });
    expect(await op.agent.wait({ runId: running, timeoutMs: 2000 })).toMatchObject({ status: "ok" });
  });

  it("a prune of 20 000 ended runs keeps the event loop responsive and the counter right", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const DAY = 86_400_000;
    const base = {
      sessionKey: "agent:main:main",
      sessionId: "00000000-0000-4000-8000-000000000000",
      agentId: "main",
      lane: "main" as const,
      status: "ok" as const,
      origin: "chat" as const,
      message: "m",
      provenance: { kind: "user" as const, channel: "webchat" },
      attempts: 1,
      label: "PUBLIC" as const,
    };
    const N = 20_000;
    for (let i = 0; i < N; i += 1000) {
      await Promise.all(
        Array.from({ length: 1000 }, (_, j) =>
          gw!.store.runs.put({
            ...base,
            runId: `old-${i + j}`,
            createdAt: Date.now() - 20 * DAY,
            endedAt: Date.now() - 10 * DAY - (i + j),
          } as never),
        ),
      );
    }
    let worst = 0;
    let last = performance.now();
    const probe = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last - 5);
      last = now;
    }, 5);
    const pruned = await gw.gateway.retention.runOnce();
    clearInterval(probe);
    expect(pruned.runs).toBe(N);
    const text = await scrapeText();
    expect(sample(text, "switchboard_retention_pruned_total", { kind: "runs" })).toBe(N);
    // The memory store is the test double, but the bar (B7, max <= 100 ms) holds for any store.
    expect(worst).toBeLessThan(100);
  }, 30_000);
});
