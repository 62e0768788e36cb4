// Child process of the gateway crash test (src/reliability/crash.int.test.ts): a real gateway on the
// file store with fsync on, killed with SIGKILL by the parent at random moments.
// Usage: node crash-gateway.mjs <dataDir>. Prints one JSON line {url, token, pid} once it accepts connections.
import { parseConfig } from "@switchboard/core";
import { Gateway } from "../dist/index.js";

const dataDir = process.argv[2];
if (!dataDir) {
  process.stderr.write("usage: node crash-gateway.mjs <dataDir>\n");
  process.exit(2);
}
// No worker serves these runs: they pile up queued across the kills (thousands per session on a fast
// machine). The test is about durable writes, not admission, so the run bounds are lifted.
const config = parseConfig({ gateway: { limits: { maxRunsPerSession: 1_000_000, maxRuns: 1_000_000 } } });
const gateway = await Gateway.start({ config, dataDir, port: 0, fsync: "always" });
process.stdout.write(
  `${JSON.stringify({ url: gateway.url, token: gateway.operatorToken, pid: process.pid })}\n`,
);
