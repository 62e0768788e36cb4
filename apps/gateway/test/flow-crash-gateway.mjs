// Child process of the flow crash tests (src/reliability/flow-crash.int.test.ts): a real gateway on the
// file store with fsync on, killed with SIGKILL by the parent in the middle of a send's follow-up or a
// spawn's announce, then started again on the same data dir.
// Usage: node flow-crash-gateway.mjs <dataDir> <config as JSON> [hold-reply-posts]. With
// `hold-reply-posts` every post of a run's reply to its channel (an output of reason `reply`) is held
// for ever after printing one JSON line {holding: "reply", text} (src/reliability/reply-post-crash:
// the kill lands between the run's durable end and the post). Prints one JSON line {url, token, pid}
// once it accepts connections. Then reads JSON lines {id, cmd, args} on stdin (the test's view into the
// stored records, and the archiver's sweep) and answers each with one JSON line {id, result | error}:
//   runs                      every stored run record
//   sweep {endedBefore}       flows.archiveSweep(endedBefore), the number of children archived
//   session {key}             the stored session row (or null)
import { createInterface } from "node:readline";
import { parseConfig } from "@switchboard/core";
import { Gateway } from "../dist/index.js";

const [dataDir, configJson = "{}", mode] = process.argv.slice(2);
if (!dataDir) {
  process.stderr.write("usage: node flow-crash-gateway.mjs <dataDir> <config as JSON>\n");
  process.exit(2);
}
const config = parseConfig(JSON.parse(configJson));
const gateway = await Gateway.start({ config, dataDir, port: 0, host: "127.0.0.1", fsync: "always" });
if (mode === "hold-reply-posts") {
  const output = gateway.flows.output;
  const deliver = output.deliver.bind(output);
  output.deliver = (entry, text, options) => {
    if (options?.reason !== "reply") return deliver(entry, text, options);
    process.stdout.write(`${JSON.stringify({ holding: "reply", text })}\n`);
    return new Promise(() => undefined);
  };
}

const commands = {
  runs: () => gateway.store.runs.list({}),
  sweep: (args) => gateway.flows.archiveSweep(args.endedBefore),
  session: async (args) => (await gateway.store.sessions.get(args.key)) ?? null,
};

createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  const { id, cmd, args = {} } = JSON.parse(line);
  void (async () => {
    try {
      const command = commands[cmd];
      if (!command) throw new Error(`unknown command ${cmd}`);
      const result = await command(args);
      process.stdout.write(`${JSON.stringify({ id, result: result ?? null })}\n`);
    } catch (error) {
      process.stdout.write(`${JSON.stringify({ id, error: String(error?.stack ?? error) })}\n`);
    }
  })();
});

process.stdout.write(
  `${JSON.stringify({ url: gateway.url, token: gateway.operatorToken, pid: process.pid })}\n`,
);
