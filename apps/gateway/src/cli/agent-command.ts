import { startAgentWorker } from "@switchboard/agent";
import { CLIENT_OPTIONS, type CommandSpec, listOption, numberOption } from "./args";
import { CliError, EXIT, errorCode, errorMessage } from "./cli-errors";
import type { Command } from "./command";
import { resolveTarget } from "./gateway-client";
import { withProgress } from "./output";
import { appLogger, LOG_OPTION, untilSignal } from "./serve";

const spec: CommandSpec = {
  name: "agent",
  brief: "a reference agent worker for a running gateway",
  summary:
    "Runs a reference agent worker: connects to a gateway as role agent and serves the configured agents with their models (scripted or OpenAI-compatible). Runs until Ctrl-C, then finishes current runs.",
  positionals: { min: 0, max: 0 },
  options: {
    agents: {
      type: "string",
      value: "LIST",
      description: "agent ids to serve, comma-separated (default: every configured agent)",
    },
    concurrency: { type: "string", value: "N", description: "runs executed at once (default 4)" },
    "wait-for-gateway": { type: "boolean", description: "keep retrying until the gateway is reachable" },
    ...LOG_OPTION,
    ...CLIENT_OPTIONS,
  },
  details: `The token needs role agent (auth.tokens in the config) or operator. Rules files named in the config
are resolved against the config file's directory.

Examples:
  switchboard agent --config switchboard.config.json5 --agents research --token "$RESEARCH_WORKER_TOKEN"`,
};

export const agentCommand: Command = {
  spec,
  async run({ io, args }) {
    const { values } = args;
    const agents = listOption(values, "agents");
    const concurrency = numberOption(spec, values, "concurrency", { min: 1, max: 1024, integer: true });
    const target = await resolveTarget(values);
    const logger = appLogger(spec, values, target.loaded.config);
    let worker: Awaited<ReturnType<typeof startAgentWorker>>;
    try {
      worker = await withProgress(io, `connecting to ${target.url}`, () =>
        startAgentWorker({
          url: target.url,
          token: target.token,
          config: target.loaded.config,
          baseDir: target.loaded.baseDir,
          logger,
          ...(agents ? { agents } : {}),
          ...(concurrency !== undefined ? { concurrency } : {}),
          ...(values["wait-for-gateway"] ? { waitForGateway: true } : {}),
        }),
      );
    } catch (error) {
      const code = errorCode(error);
      if (code === "UNAUTHORIZED" || code === "FORBIDDEN") {
        throw new CliError(
          `the gateway at ${target.url} refused the worker: ${errorMessage(error)}`,
          EXIT.refused,
          code,
        );
      }
      if (code === "UNAVAILABLE") {
        throw new CliError(
          `cannot reach the gateway at ${target.url}: ${errorMessage(error)}`,
          EXIT.failure,
          code,
        );
      }
      throw error;
    }
    io.err(`serving ${worker.agents.join(", ")} for ${target.url}; Ctrl-C stops`);
    const stopped = await Promise.race([untilSignal(io), worker.closed.then(() => "closed" as const)]);
    if (stopped === "closed")
      throw new CliError("the connection to the gateway was closed for good", EXIT.failure);
    io.err(`${stopped}: finishing current runs…`);
    await worker.stop();
    io.err("stopped");
    return EXIT.ok;
  },
};
