// Child process of the cluster tests (src/cluster/*.int.test.ts) and benchmarks B9/B10: one gateway
// instance on a postgres store, killed with SIGKILL by the parent when a test needs a dead instance.
// Usage: node cluster-gateway.mjs <postgres url> <schema> [workerToken] [flowWaitSliceMs] [limits].
// `limits`: JSON of `gateway.limits` to set (small ones for the admission tests); an empty
// `flowWaitSliceMs` keeps the default. Prints one JSON line {url, token, pid, instanceId} once it
// accepts connections.
import { parseConfig } from "@switchboard/core";
import { Gateway } from "../dist/index.js";

const [url, schema, workerToken = "cluster-worker-token-0123456789", flowWaitSliceMs, limits] =
  process.argv.slice(2);
if (!url || !schema) {
  process.stderr.write(
    "usage: node cluster-gateway.mjs <postgres url> <schema> [workerToken] [flowWaitSliceMs] [limits]\n",
  );
  process.exit(2);
}
const config = parseConfig({
  ...(limits ? { gateway: { limits: JSON.parse(limits) } } : {}),
  store: { kind: "postgres", url, schema },
  auth: {
    tokens: [
      { name: "worker", token: workerToken, role: "agent", agents: ["main", "helper", "relay"] },
      { name: "client", token: "cluster-client-token-0123456789", role: "client", sessions: ["*"] },
    ],
  },
  agents: {
    list: [{ id: "main", default: true }, { id: "helper" }, { id: "relay" }],
    defaults: { subagents: { maxChildren: 3 }, sandbox: { sessionToolsVisibility: "all" } },
  },
  tools: { agentToAgent: { enabled: true, allow: ["*"] } },
  // Labelled channels for the taint tests (no other test uses them).
  labels: { channels: { vault: "CONFIDENTIAL", intranet: "INTERNAL", discord: "PUBLIC" } },
  // Small enough for the cluster tests to reach across instances.
  session: { agentToAgent: { budgetPerMinute: 4 } },
});
const gateway = await Gateway.start({
  config,
  port: 0,
  host: "127.0.0.1",
  ...(flowWaitSliceMs ? { flowWaitSliceMs: Number(flowWaitSliceMs) } : {}),
});
process.stdout.write(
  `${JSON.stringify({ url: gateway.url, token: gateway.operatorToken, pid: process.pid, instanceId: gateway.instanceId })}\n`,
);
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.once(signal, () => {
    void gateway.close().then(() => process.exit(0));
  });
}
