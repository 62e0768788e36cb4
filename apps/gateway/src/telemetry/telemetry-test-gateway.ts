import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ConfigInput, createMemoryStore, parseConfig, type Store } from "@switchboard/core";
import { Gateway } from "../gateway";
import type { TelemetryOptions } from "./telemetry";

export const WORKER_TOKEN = "telemetry-worker-token-0123456789";
export const CLIENT_TOKEN = "telemetry-client-token-0123456789";
export const OPERATOR_TOKEN = "telemetry-config-operator-token-0123";

/** Two agents that may talk to each other, a worker token for both, a client and an operator token. */
export function telemetryConfig(extra: ConfigInput = {}): ConfigInput {
  return {
    auth: {
      tokens: [
        { name: "worker", token: WORKER_TOKEN, role: "agent", agents: ["main", "research"] },
        { name: "webchat", token: CLIENT_TOKEN, role: "client", sessions: ["*"] },
        { name: "ops", token: OPERATOR_TOKEN, role: "operator" },
      ],
    },
    agents: {
      list: [
        { id: "main", default: true, subagents: { allowAgents: ["research"] } },
        { id: "research", subagents: { allowAgents: ["research"] } },
      ],
    },
    tools: { agentToAgent: { enabled: true, allow: ["*"] } },
    ...extra,
  };
}

export interface TelemetryGateway {
  gateway: Gateway;
  store: Store;
  url: string;
  httpUrl: string;
  close(): Promise<void>;
}

/** A real gateway on port 0 over a memory store, with telemetry options (exporter, environment). */
export async function startTelemetryGateway(
  config: ConfigInput,
  telemetry: TelemetryOptions = { tracing: { env: {} } },
): Promise<TelemetryGateway> {
  const dataDir = await mkdtemp(join(tmpdir(), "switchboard-telemetry-"));
  const store = createMemoryStore();
  const gateway = await Gateway.start({
    config: parseConfig({ ...config, gateway: { port: 0, ...(config.gateway ?? {}) } }),
    dataDir,
    port: 0,
    store,
    telemetry,
  });
  return {
    gateway,
    store,
    url: gateway.url,
    httpUrl: gateway.url.replace(/^ws:/, "http:"),
    async close() {
      await gateway.close();
      await store.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** The value of one sample in a Prometheus text exposition (undefined when absent). */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries(
      [...(match[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((m) => [
        m[1],
        m[2],
      ]),
    );
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) return Number(match[3]);
  }
  return undefined;
}
