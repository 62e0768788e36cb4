import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ConfigInput, createMemoryStore, parseConfig, type Store } from "@switchboard/core";
import { dropTestSchema, testPgUrl, testSchemaName } from "@switchboard/store-pg/testing";
import { Gateway } from "../gateway";
import { type EventFrame, TestPeer } from "./test-peer";

export interface RunContext {
  run: Record<string, unknown> & {
    runId: string;
    sessionKey: string;
    input: { message: string; context: string; provenance: Record<string, unknown> };
  };
  invokeTool(tool: string, args: Record<string, unknown>): Promise<Record<string, unknown>>;
}

export type WorkerHandler = (
  context: RunContext,
) => Promise<string | { fail: string } | { ignore: true }> | string | { fail: string } | { ignore: true };

/** A test agent worker: answers every `run.assigned` with the handler's reply. */
export class TestWorker {
  readonly runs: RunContext["run"][] = [];
  private constructor(readonly peer: TestPeer) {}

  static async start(
    url: string,
    token: string,
    agents: string[],
    handler: WorkerHandler,
    options: { concurrency?: number } = {},
  ): Promise<TestWorker> {
    // Listen before the handshake: a queued run is assigned right after the connect response.
    const peer = await TestPeer.open(url);
    const worker = new TestWorker(peer);
    peer.socket.on("message", (data) => {
      const frame = JSON.parse(String(data)) as EventFrame;
      if (frame.type !== "event" || frame.event !== "run.assigned") return;
      const run = frame.payload as RunContext["run"];
      worker.runs.push(run);
      void (async () => {
        const context: RunContext = {
          run,
          invokeTool: (tool, args) => peer.call("tools.invoke", { tool, args, runId: run.runId }),
        };
        try {
          const outcome = await handler(context);
          if (typeof outcome === "string")
            await peer.request("run.complete", { runId: run.runId, reply: outcome });
          else if ("fail" in outcome)
            await peer.request("run.fail", { runId: run.runId, error: outcome.fail });
        } catch (error) {
          await peer.request("run.fail", { runId: run.runId, error: (error as Error).message });
        }
      })();
    });
    await peer.handshake({ token, role: "agent", agents, ...options });
    return worker;
  }

  close(): void {
    this.peer.close();
  }
}

export interface TestGateway {
  gateway: Gateway;
  url: string;
  token: string;
  dataDir: string;
  operator(): Promise<TestPeer>;
  /** Stops the gateway and starts a new one on the same data dir (and port 0); `between` runs while it is down. */
  restart(between?: () => Promise<void>): Promise<void>;
  close(): Promise<void>;
}

/** Tokens of `twoAgentConfig`: a worker serving both agents, and a webchat client. */
export const WORKER_TOKEN = "worker-token-0123456789";
export const CLIENT_TOKEN = "client-token-0123456789";

/**
 * Agent-to-agent flows: agents `main` (default, may spawn `research`) and `research`, sends allowed
 * between them, one worker token that may serve any agent id. `overrides` replace whole sections.
 */
export function a2aConfig(overrides: Partial<ConfigInput> = {}): ConfigInput {
  return {
    auth: { tokens: [{ name: "worker", token: WORKER_TOKEN, role: "agent" }] },
    agents: {
      list: [{ id: "main", default: true, subagents: { allowAgents: ["research"] } }, { id: "research" }],
    },
    tools: { agentToAgent: { enabled: true, allow: ["*"] } },
    ...overrides,
  };
}

/**
 * `a2aConfig` overrides for sub-agents that spawn sub-agents of their own: both agents may spawn
 * `research` two levels deep, and a sub-agent's tools include `sessions_spawn`.
 */
export const nestedSpawns = {
  agents: {
    list: [
      { id: "main", default: true, subagents: { allowAgents: ["research"], maxSpawnDepth: 2 } },
      { id: "research", subagents: { allowAgents: ["research"], maxSpawnDepth: 2 } },
    ],
  },
  // Sub-agents get no session tools unless allowed: these may spawn.
  tools: {
    agentToAgent: { enabled: true, allow: ["*"] },
    subagents: { tools: { allow: ["sessions_spawn"] } },
  },
} satisfies Partial<ConfigInput>;

/** The usual test setup: agents `main` (default) and `research`, a worker and a webchat client token. */
export const twoAgentConfig = {
  auth: {
    tokens: [
      { name: "worker", token: WORKER_TOKEN, role: "agent" as const, agents: ["main", "research"] },
      {
        name: "webchat",
        token: CLIENT_TOKEN,
        role: "client" as const,
        sessions: ["agent:main:webchat:dm:*"],
      },
    ],
  },
  agents: { list: [{ id: "main", default: true }, { id: "research" }] },
};

export type TestStoreKind = "memory" | "file" | "postgres";

/**
 * The store the protocol suite runs on: SWITCHBOARD_TEST_STORE (memory, file or postgres), else
 * the file store. Suites that test one store's own behaviour pass `store` explicitly.
 */
export function testStoreKind(env = process.env): TestStoreKind {
  const kind = env.SWITCHBOARD_TEST_STORE || "file";
  if (kind !== "memory" && kind !== "file" && kind !== "postgres")
    throw new Error(`SWITCHBOARD_TEST_STORE: ${kind} is not one of memory, file, postgres`);
  return kind;
}

export async function startTestGateway(
  config: ConfigInput = {},
  options: { handshakeTimeoutMs?: number; store?: TestStoreKind } = {},
): Promise<TestGateway> {
  const storeKind = options.store ?? testStoreKind();
  const dataDir = await mkdtemp(join(tmpdir(), "switchboard-gw-"));
  // postgres: a schema of its own on the test server (SWITCHBOARD_TEST_PG_URL), dropped at close.
  const schema = storeKind === "postgres" ? testSchemaName("sbgw") : undefined;
  const parsed = parseConfig({
    ...config,
    gateway: { port: 0, ...(config.gateway ?? {}) },
    ...(schema ? { store: { kind: "postgres", url: testPgUrl(), schema, pool: { max: 4 } } } : {}),
  });
  const peers: TestPeer[] = [];
  // The memory store survives a `restart()` because the same instance is handed to the new gateway.
  const memory: Store | undefined = storeKind === "memory" ? createMemoryStore() : undefined;
  const start = () =>
    Gateway.start({
      config: parsed,
      dataDir,
      port: 0,
      fsync: "none",
      ...(memory ? { store: memory } : {}),
      ...(options.handshakeTimeoutMs ? { handshakeTimeoutMs: options.handshakeTimeoutMs } : {}),
    });
  const harness: TestGateway = {
    gateway: await start(),
    get url() {
      return harness.gateway.url;
    },
    get token() {
      return harness.gateway.operatorToken;
    },
    dataDir,
    async operator() {
      const peer = await TestPeer.connect(harness.url, { token: harness.token, role: "operator" });
      peers.push(peer);
      return peer;
    },
    async restart(between) {
      await harness.gateway.close();
      await between?.();
      harness.gateway = await start();
    },
    async close() {
      for (const peer of peers) peer.close();
      await harness.gateway.close();
      await rm(dataDir, { recursive: true, force: true });
      if (schema) await dropTestSchema(schema);
    },
  };
  return harness;
}
