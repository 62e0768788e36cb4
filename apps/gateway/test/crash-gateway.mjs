// Child process of the gateway crash test (src/reliability/crash.int.test.ts): a real gateway on the
// file store with fsync on, killed with SIGKILL by the parent at random moments.
// Usage: node crash-gateway.mjs <dataDir>. Prints one JSON line {url, token, pid} once it accepts connections.
import { Gateway } from "../dist/index.js";

const dataDir = process.argv[2];
if (!dataDir) {
  process.stderr.write("usage: node crash-gateway.mjs <dataDir>\n");
  process.exit(2);
}
const gateway = await Gateway.start({ dataDir, port: 0, fsync: "always" });
process.stdout.write(
  `${JSON.stringify({ url: gateway.url, token: gateway.operatorToken, pid: process.pid })}\n`,
);
