// Child process of the seq restart test (src/reliability/seq-restart.int.test.ts): a real gateway on
// the file store, killed with SIGKILL by the parent under streaming load and restarted on the same port.
// Usage: node seq-gateway.mjs <dataDir> [port]. Prints one JSON line {url, token, pid} once it accepts connections.
import { Gateway } from "../dist/index.js";

const [dataDir, port = "0"] = process.argv.slice(2);
if (!dataDir) {
  process.stderr.write("usage: node seq-gateway.mjs <dataDir> [port]\n");
  process.exit(2);
}
const gateway = await Gateway.start({ dataDir, host: "127.0.0.1", port: Number(port), fsync: "none" });
process.stdout.write(
  `${JSON.stringify({ url: gateway.url, token: gateway.operatorToken, pid: process.pid })}\n`,
);
