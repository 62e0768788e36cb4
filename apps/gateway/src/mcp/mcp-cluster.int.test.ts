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

const running: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const stop of running.splice(0).reverse()) await stop();
});

async function startPair(): Promise<[Gateway, Gateway]> {
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
  const pair: Gateway[] = [];
  for (let i = 0; i < 2; i++) {
    const gateway = await Gateway.start({ config, port: 0, host: "127.0.0.1" });
    running.push(() => gateway.close());
    pair.push(gateway);
  }
  return pair as [Gateway, Gateway];
}

const httpUrl = (gateway: Gateway) => `${gateway.url.replace(/^ws/, "http")}/mcp`;

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
});
