import { CONFIG_OPTIONS, type CommandSpec, JSON_OPTION } from "./args";
import type { Command } from "./command";
import { runServer, SERVER_OPTIONS } from "./serve";

const spec: CommandSpec = {
  name: "up",
  brief: "gateway + reference agents in one process (what `pnpm start` runs)",
  summary:
    "Starts the gateway and the reference agent workers for every configured agent in one process, on the embedded file store (or PostgreSQL: --store postgres://…, or store in the config). Prints the URL, the operator token and a command to try; runs until Ctrl-C.",
  positionals: { min: 0, max: 0 },
  options: {
    ...SERVER_OPTIONS,
    ...CONFIG_OPTIONS,
    json: { ...JSON_OPTION.json!, description: "print the connection details as one JSON line" },
  },
  details: `The operator token is created in the data dir (file operator-token, mode 0600) on first start; the
other commands read it from there, so they need no --token on the same machine.

Examples:
  switchboard up --config examples/switchboard.config.json5
  switchboard up --port 0 --data-dir /tmp/sb --json`,
};

export const upCommand: Command = {
  spec,
  run: ({ io, args }) => runServer(io, spec, args.values, true),
};
