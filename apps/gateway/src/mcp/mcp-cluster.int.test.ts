import { spawn } from "node:child_process";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { parseConfig } from "@switchboard/core";
import {
  dropTestSchema,
  pgUnavailableReason,
  testPgUrl,
  testSchemaName,
} from "@switchboard/store-pg/testing";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway } from "../gateway";
import { behaviour } from "../testing/behaviour";
import { TestWorker } from "../testing/test-gateway";
import { TestPeer } from "../testing/test-peer";
import { until } from "../testing/until";

/**
 * `/mcp` is stateless so that a load balancer may send any request to any instance: a client's
 * `notifications/cancelled` then often reaches another instance than the call it cancels. Two
 * in-process gateways on one PostgreSQL schema; the client's fetch sends its cancellations to the
 * other instance, as a round-robin balancer would.
 */

const unavailable = await pgUnavailableReason();
const requirePg = process.env.SWITCHBOARD_REQUIRE_PG === "1";
if (unavailable !== undefined && requirePg)
  throw new Error(`SWITCHBOARD_REQUIRE_PG=1 but no PostgreSQL: ${unavailable}`);

const WORKER_TOKEN = "mcp-cluster-worker-0123456789";
const MCP_TOKEN = "mcp-cluster-laptop-0123456789";
const LAPTOP_KEY = "agent:main:mcp:laptop";
const BOB = "agent:main:webchat:dm:bob";
const CAROL = "agent:main:webchat:dm:carol";

const running: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const stop of running.splice(0).reverse()) await stop();
});

async function startPair(): Promise<[Gateway, Gateway]> {
  return (await startInstances(2)) as [Gateway, Gateway];
}

async function startInstances(count: number): Promise<Gateway[]> {
  const schema = testSchemaName("sbmcpclu");
  running.push(() => dropTestSchema(schema));
  const config = parseConfig({
    store: { kind: "postgres", url: testPgUrl(), schema },
    auth: {
      tokens: [
        { name: "worker", token: WORKER_TOKEN, role: "agent", agents: ["main"] },
        { name: "laptop", token: MCP_TOKEN, role: "mcp", session: LAPTOP_KEY },
      ],
    },
    agents: { list: [{ id: "main", default: true }] },
  });
  const instances: Gateway[] = [];
  for (let i = 0; i < count; i++) {
    const gateway = await Gateway.start({ config, port: 0, host: "127.0.0.1" });
    running.push(async () => {
      await gateway.close();
    });
    instances.push(gateway);
  }
  return instances;
}

const httpUrl = (gateway: Gateway) => `${gateway.url.replace(/^ws/, "http")}/mcp`;

const mcpHeaders = {
  authorization: `Bearer ${MCP_TOKEN}`,
  "content-type": "application/json",
  accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2025-06-18",
};

const cancellation = (requestId: string | number) => ({
  jsonrpc: "2.0",
  method: "notifications/cancelled",
  params: { requestId, reason: "test" },
});

/** A raw `tools/call` (no SDK client: the test picks its id); resolves to its result's structured content. */
async function rawCall(gateway: Gateway, id: number, name: string, args: Record<string, unknown>) {
  const response = await fetch(httpUrl(gateway), {
    method: "POST",
    headers: mcpHeaders,
    body: JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } }),
  });
  const body = await response.text();
  const frame = /^data: (.*)$/m.exec(body);
  if (response.status !== 200 || !frame) throw new Error(`tools/call answered ${response.status}: ${body}`);
  return (JSON.parse(frame[1]!) as { result: { structuredContent: Record<string, unknown> } }).result
    .structuredContent;
}

/** An SDK client whose requests go to `calls` and whose cancellations go to `cancels`. */
async function balancedClient(calls: Gateway, cancels: Gateway): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(httpUrl(calls)), {
    requestInit: { headers: { authorization: `Bearer ${MCP_TOKEN}` } },
    fetch: (input, init) => {
      const cancellation = typeof init?.body === "string" && init.body.includes('"notifications/cancelled"');
      return fetch(cancellation ? httpUrl(cancels) : input, init);
    },
  });
  const client = new Client({ name: "mcp-cluster-test", version: "0" });
  await client.connect(transport);
  running.push(() => client.close());
  return client;
}

describe.skipIf(unavailable !== undefined && !requirePg)("MCP on several instances", () => {
  it("stops a call whose cancellation reached another instance", async () => {
    const [a, b] = await startPair();
    const op = await TestPeer.connect(a.url, { token: a.operatorToken, role: "operator" });
    running.push(async () => op.close());
    await op.call("sessions.create", { key: BOB });
    const worker = await TestWorker.start(a.url, WORKER_TOKEN, ["main"], behaviour());
    running.push(async () => worker.close());
    const client = await balancedClient(a, b);

    const controller = new AbortController();
    const started = Date.now();
    const call = client
      .callTool(
        { name: "sessions_send", arguments: { sessionKey: BOB, message: "sleep 4000", timeoutSeconds: 20 } },
        undefined,
        { signal: controller.signal },
      )
      .catch((error: Error) => error);
    await new Promise((resolve) => setTimeout(resolve, 400));
    controller.abort();
    expect(await call).toBeInstanceOf(Error);
    // The call on A ended when B passed the cancellation on: its audit record says `timeout`,
    // long before the reply (4 s) or the call's own timeout (20 s).
    let record: { data: Record<string, unknown> } | undefined;
    while (!record && Date.now() - started < 3_000) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      const { entries } = await op.call<{ entries: Array<{ kind: string; data: Record<string, unknown> }> }>(
        "audit.tail",
        { limit: 200 },
      );
      record = entries.find((entry) => entry.kind === "mcp.call");
    }
    expect(record, "the call cancelled through the other instance went on waiting").toBeDefined();
    expect(record!.data).toMatchObject({ tool: "sessions_send", status: "timeout" });
  });

  it("cancels neither call when two clients of a token run the same id on two instances", async () => {
    // SDK clients count ids from 0, so two clients sharing a token use the same ids: X's call 7 runs
    // on A, Y's on B, and X's cancellation reaches C. One id naming two calls is ambiguous in the
    // cluster as it is on one instance: cancelling both would end Y's call, which nobody cancelled.
    const [a, b, c] = (await startInstances(3)) as [Gateway, Gateway, Gateway];
    const op = await TestPeer.connect(a.url, { token: a.operatorToken, role: "operator" });
    running.push(async () => op.close());
    for (const key of [BOB, CAROL]) await op.call("sessions.create", { key });
    const worker = await TestWorker.start(a.url, WORKER_TOKEN, ["main"], behaviour(), { concurrency: 2 });
    running.push(async () => worker.close());

    const send = (gateway: Gateway, sessionKey: string) =>
      rawCall(gateway, 7, "sessions_send", { sessionKey, message: "sleep 1500", timeoutSeconds: 20 });
    const onA = send(a, BOB);
    const onB = send(b, CAROL);
    await until(() => worker.runs.length === 2, "both calls' runs to start");
    const posted = await fetch(httpUrl(c), {
      method: "POST",
      headers: mcpHeaders,
      body: JSON.stringify(cancellation(7)),
    });
    expect(posted.status).toBe(202);
    expect(await onA).toMatchObject({ status: "ok", reply: "slept 1500" });
    expect(await onB).toMatchObject({ status: "ok", reply: "slept 1500" });
  });

  it("stays healthy and answers calls through a flood of cancellations naming no call", async () => {
    // Every cancellation naming no call here used to cost a NOTIFY on the coordination pool, with
    // no bound: a token posting batches of them starved the lease renewals on that pool (/healthz
    // 503, then the lease lost and the instance's runs taken away).
    const [a] = await startPair();
    // The reviewer's flood, from a process of its own (as a client would be): six loops posting
    // batches of 60 cancellations of made-up ids. It prints a dot per batch accepted.
    const flood = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `let n = 0;
         const headers = ${JSON.stringify(mcpHeaders)};
         const cancel = (requestId) => ({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId } });
         const loop = async () => {
           for (;;) {
             const body = JSON.stringify(Array.from({ length: 60 }, () => cancel("nope-" + n++)));
             const response = await fetch(${JSON.stringify(httpUrl(a))}, { method: "POST", headers, body }).catch(() => undefined);
             await response?.arrayBuffer();
             if (response?.status === 202) process.stdout.write(".");
           }
         };
         for (let i = 0; i < 6; i++) void loop();`,
      ],
      { stdio: ["ignore", "pipe", "ignore"] },
    );
    running.push(async () => {
      flood.kill("SIGKILL");
    });
    let accepted = 0;
    flood.stdout!.on("data", (chunk: Buffer) => {
      accepted += chunk.length;
    });
    const unhealthy: string[] = [];
    const floodUntil = Date.now() + 5_000;
    while (Date.now() < floodUntil) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      const health = await fetch(`${a.url.replace(/^ws/, "http")}/healthz`);
      const body = await health.text();
      if (health.status !== 200) unhealthy.push(`${health.status} ${body}`);
    }
    // Still flooded: a call is answered, and the lease was never late enough for /healthz to say so.
    expect(await rawCall(a, 1, "agents_list", {})).toMatchObject({ status: "ok" });
    flood.kill("SIGKILL");
    expect(unhealthy).toEqual([]);
    expect(accepted, "the flood reached the instance").toBeGreaterThan(50);
  }, 30_000);
});
