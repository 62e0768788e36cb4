import { connect, type SwitchboardClient, serve } from "@switchboard/client";
import { afterEach, describe, expect, it } from "vitest";
import {
  CLIENT_TOKEN,
  OPERATOR_TOKEN,
  sample,
  startTelemetryGateway,
  type TelemetryGateway,
  telemetryConfig,
  WORKER_TOKEN,
} from "./telemetry-test-gateway";

const BLOCK_LIST = {
  policy: {
    rules: [
      {
        id: "no-listing",
        hook: "PRE_TOOL_CALL" as const,
        when: { "tool.name": "sessions_list" },
        action: "deny" as const,
        message: "listing is off",
      },
    ],
  },
};

let gw: TelemetryGateway | undefined;
const clients: SwitchboardClient[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  await gw?.close();
  gw = undefined;
});

function scrape(token?: string, init: RequestInit = {}) {
  return fetch(`${gw!.httpUrl}/metrics`, {
    ...init,
    headers: token ? { authorization: `Bearer ${token}` } : {},
  });
}

describe("GET /metrics", () => {
  it("counts real traffic: requests, tool calls by decision, runs, store writes, connections, sessions", async () => {
    gw = await startTelemetryGateway(telemetryConfig(BLOCK_LIST));
    const worker = await serve(
      { url: gw.url, token: WORKER_TOKEN },
      ["main", "research"],
      async (run, ctx) => {
        if (run.input.message === "work") {
          const status = await ctx.invokeTool("session_status", {});
          const listed = await ctx.invokeTool("sessions_list", {});
          return { reply: `${status.status}/${listed.status}` };
        }
        return { reply: "ok" };
      },
    );
    const op = await connect({ url: gw.url, token: gw.gateway.operatorToken, role: "operator" });
    const client = await connect({ url: gw.url, token: CLIENT_TOKEN, role: "client" });
    clients.push(op, client);

    const { runId } = await client.chat.send({ sessionKey: "main", message: "work" });
    expect(await op.agent.wait({ runId, timeoutMs: 5_000 })).toMatchObject({
      status: "ok",
      reply: "ok/forbidden",
    });
    await expect(op.sessions.status({ sessionKey: "agent:nobody:main" })).rejects.toMatchObject({
      code: expect.any(String),
    });

    const res = await scrape(gw.gateway.operatorToken);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await res.text();

    expect(sample(text, "switchboard_requests_total", { method: "chat.send", outcome: "ok" })).toBe(1);
    expect(sample(text, "switchboard_requests_total", { method: "tools.invoke", outcome: "ok" })).toBe(2);
    expect([
      ...text.matchAll(/^switchboard_requests_total\{method="sessions.status",outcome="([A-Z_]+)"\} 1$/gm),
    ]).toHaveLength(1);
    expect(sample(text, "switchboard_request_duration_seconds_count", { method: "chat.send" })).toBe(1);
    expect(sample(text, "switchboard_tool_calls_total", { tool: "session_status", decision: "allow" })).toBe(
      1,
    );
    expect(sample(text, "switchboard_tool_calls_total", { tool: "sessions_list", decision: "block" })).toBe(
      1,
    );
    expect(sample(text, "switchboard_runs_total", { status: "ok" })).toBe(1);
    expect(sample(text, "switchboard_run_queue_wait_seconds_count", { lane: "main" })).toBe(1);
    expect(sample(text, "switchboard_run_duration_seconds_count", { lane: "main", status: "ok" })).toBe(1);
    expect(sample(text, "switchboard_connections", { role: "agent" })).toBe(1);
    expect(sample(text, "switchboard_connections", { role: "operator" })).toBe(1);
    expect(sample(text, "switchboard_connections", { role: "client" })).toBe(1);
    expect(sample(text, "switchboard_sessions")).toBeGreaterThanOrEqual(1);
    expect(sample(text, "switchboard_events_published_total")).toBeGreaterThan(3);
    expect(
      sample(text, "switchboard_store_writes_total", { op: "transcripts.append", outcome: "ok" }),
    ).toBeGreaterThanOrEqual(3);
    expect(
      sample(text, "switchboard_store_writes_total", { op: "runs.put", outcome: "ok" }),
    ).toBeGreaterThanOrEqual(1);
    expect(
      sample(text, "switchboard_store_write_duration_seconds_count", { op: "audit.append" }),
    ).toBeGreaterThanOrEqual(1);
    // Process figures from the library: event-loop delay, RSS and heap.
    expect(sample(text, "nodejs_eventloop_lag_p99_seconds")).toBeGreaterThanOrEqual(0);
    expect(sample(text, "process_resident_memory_bytes")).toBeGreaterThan(0);
    expect(sample(text, "nodejs_heap_size_used_bytes")).toBeGreaterThan(0);

    // A second run moves the counters; a closed worker leaves the connection gauge.
    const second = await client.chat.send({ sessionKey: "main", message: "again" });
    await op.agent.wait({ runId: second.runId, timeoutMs: 5_000 });
    await worker.stop();
    const after = await (await scrape(OPERATOR_TOKEN)).text();
    expect(sample(after, "switchboard_requests_total", { method: "chat.send", outcome: "ok" })).toBe(2);
    expect(sample(after, "switchboard_runs_total", { status: "ok" })).toBe(2);
    expect(sample(after, "switchboard_connections", { role: "agent" })).toBeUndefined();

    // Retention reports what it pruned: the first run, aged past runsDays, goes.
    const old = (await gw.store.runs.get(runId))!;
    const DAY = 86_400_000;
    await gw.store.runs.put({ ...old, createdAt: Date.now() - 9 * DAY, endedAt: Date.now() - 8 * DAY });
    expect(sample(after, "switchboard_retention_pruned_total", { kind: "runs" })).toBe(0);
    expect((await gw.gateway.retention.runOnce()).runs).toBe(1);
    const pruned = await (await scrape(OPERATOR_TOKEN)).text();
    expect(sample(pruned, "switchboard_retention_pruned_total", { kind: "runs" })).toBe(1);
    expect(sample(pruned, "switchboard_retention_pruned_total", { kind: "archives" })).toBe(0);
  });

  it("needs an operator token unless metrics are public", async () => {
    gw = await startTelemetryGateway(telemetryConfig());
    const missing = await scrape();
    expect(missing.status).toBe(401);
    expect(missing.headers.get("www-authenticate")).toContain("Bearer");
    expect(await missing.text()).toContain("missing bearer token");
    expect((await scrape("not-a-token-at-all-0123456789")).status).toBe(401);
    // A valid token of another role is not enough.
    const client = await scrape(CLIENT_TOKEN);
    expect(client.status).toBe(401);
    expect(await client.text()).toContain("operator token");
    expect((await scrape(OPERATOR_TOKEN)).status).toBe(200);
    expect((await scrape(gw.gateway.operatorToken, { method: "POST" })).status).toBe(405);
    await gw.close();

    gw = await startTelemetryGateway(telemetryConfig({ telemetry: { metrics: { public: true } } }));
    const open = await scrape();
    expect(open.status).toBe(200);
    expect(await open.text()).toContain("# TYPE switchboard_requests_total counter");
  });

  it("is not served, and nothing is counted or wrapped, with metrics disabled", async () => {
    gw = await startTelemetryGateway(telemetryConfig({ telemetry: { metrics: { enabled: false } } }));
    expect((await scrape(gw.gateway.operatorToken)).status).toBe(404);
    expect(gw.gateway.telemetry.metrics).toBeUndefined();
    expect(gw.gateway.telemetry.requests).toBeUndefined();
    expect(gw.gateway.telemetry.runs).toBeUndefined();
    expect(gw.gateway.telemetry.toolCalls).toBeUndefined();
    // The store handed in is used as is: no timing wrapper on the write path.
    expect(gw.gateway.store).toBe(gw.store);
  });

  it("keeps two gateways' figures apart in one process", async () => {
    const first = await startTelemetryGateway(telemetryConfig({ telemetry: { metrics: { public: true } } }));
    gw = await startTelemetryGateway(telemetryConfig({ telemetry: { metrics: { public: true } } }));
    try {
      const op = await connect({ url: first.url, token: first.gateway.operatorToken, role: "operator" });
      clients.push(op);
      await op.sessions.list({});
      const firstText = await (await fetch(`${first.httpUrl}/metrics`)).text();
      const secondText = await (await scrape()).text();
      expect(
        sample(firstText, "switchboard_requests_total", { method: "sessions.list", outcome: "ok" }),
      ).toBe(1);
      expect(
        sample(secondText, "switchboard_requests_total", { method: "sessions.list", outcome: "ok" }),
      ).toBe(undefined);
    } finally {
      await Promise.all(clients.splice(0).map((client) => client.close()));
      await first.close();
    }
  });
});
