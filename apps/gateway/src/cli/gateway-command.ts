import { CONFIG_OPTIONS, type CommandSpec, JSON_OPTION } from "./args";
import type { Command } from "./command";
import { runServer, SERVER_OPTIONS } from "./serve";

const spec: CommandSpec = {
  name: "gateway",
  brief: "the gateway alone; workers connect separately",
  summary:
    "Starts the gateway alone (no agents in this process): agent workers connect to it with `switchboard agent` or the SDK. Runs until Ctrl-C.",
  positionals: { min: 0, max: 0 },
  options: {
    ...SERVER_OPTIONS,
    ...CONFIG_OPTIONS,
    json: { ...JSON_OPTION.json!, description: "print the connection details as one JSON line" },
  },
  details: `Examples:
  switchboard gateway --config switchboard.config.json5
  switchboard gateway --host 0.0.0.0 --port 18789 --data-dir /var/lib/switchboard`,
};

export const gatewayCommand: Command = {
  spec,
  run: ({ io, args }) => runServer(io, spec, args.values, false),
};
