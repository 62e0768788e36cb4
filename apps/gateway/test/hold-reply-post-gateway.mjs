// Child process of src/reliability/reply-post-crash.int.test.ts: like flow-crash-gateway.mjs (a real
// gateway on the file store with fsync on), but every post of a run's reply to its channel (an
// output of reason `reply`) is held forever after printing one JSON line {holding: "reply", text}.
// The parent then kills it with SIGKILL between the run's durable `ok` end and the post.
// Usage: node hold-reply-post-gateway.mjs <dataDir> <config as JSON>. Prints {url, token, pid} first;
// answers a line {id, cmd: "runs"} on stdin with {id, result: every stored run record}.
import { createInterface } from "node:readline";
import { parseConfig } from "@switchboard/core";
import { Gateway } from "../dist/index.js";

const [dataDir, configJson = "{}"] = process.argv.slice(2);
if (!dataDir) {
  process.stderr.write("usage: node hold-reply-post-gateway.mjs <dataDir> <config as JSON>\n");
  process.exit(2);
}
const config = parseConfig(JSON.parse(configJson));
const gateway = await Gateway.start({ config, dataDir, port: 0, host: "127.0.0.1", fsync: "always" });
const output = gateway.flows.output;
const deliver = output.deliver.bind(output);
output.deliver = (entry, text, options) => {
  if (options?.reason !== "reply") return deliver(entry, text, options);
  process.stdout.write(`${JSON.stringify({ holding: "reply", text })}\n`);
  return new Promise(() => undefined);
};
process.stdout.write(
  `${JSON.stringify({ url: gateway.url, token: gateway.operatorToken, pid: process.pid })}\n`,
);

createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  const { id, cmd } = JSON.parse(line);
  if (cmd !== "runs") return;
  void gateway.store.runs
    .list({})
    .then((result) => process.stdout.write(`${JSON.stringify({ id, result })}\n`));
});
