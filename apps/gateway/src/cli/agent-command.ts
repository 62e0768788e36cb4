import type { startAgentWorker } from "@switchboard/agent";
import { CLIENT_OPTIONS, type CommandSpec, listOption, numberOption } from "./args";
import { asConfigError } from "./cli-config";
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

Exit codes (as switchboard-agent): 0 stopped cleanly, 1 failure (gateway unreachable, connection lost),
2 usage or config error (bad flag, invalid config, missing rules file, --agents naming an agent the
config does not have), 3 the gateway refused the token.

Examples:
  switchboard agent --config switchboard.config.json5 --agents research --token "$RESEARCH_WORKER_TOKEN"`,
};

export const agentCommand: Command = {
  spec,
  async run({ io, args }) {
    const { values } = args;
    const agents = listOption(spec, values, "agents");
    const concurrency = numberOption(spec, values, "concurrency", { min: 1, max: 1024, integer: true });
    const target = await resolveTarget(values);
    const logger = appLogger(spec, values, target.loaded.config);
    let worker: Awaited<ReturnType<typeof startAgentWorker>>;
    try {
      // Loaded by the commands that run a worker only (see `main.ts`).
      const { startAgentWorker } = await import("@switchboard/agent");
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
      // Bad --agents or a broken rules file: the command line or config is wrong, as in switchboard-agent.
      const configError = asConfigError(error);
      if (configError) throw configError;
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
    if (stopped === "closed") {
      // A closed client's ready() rejects with why it closed: a token revoked while the worker was
      // reconnecting is a refusal (exit 3), as at start-up, not a plain failure.
      const reason = await worker.client.ready().then(
        () => undefined,
        (error: unknown) => error,
      );
      const code = errorCode(reason);
      const why = reason instanceof Error ? `: ${reason.message}` : "";
      if (code === "UNAUTHORIZED" || code === "FORBIDDEN")
        throw new CliError(`the gateway at ${target.url} refused the worker${why}`, EXIT.refused, code);
      throw new CliError(`the connection to the gateway was closed for good${why}`, EXIT.failure, code);
    }
    io.err(`${stopped}: finishing current runs…`);
    await worker.stop();
    io.err("stopped");
    return EXIT.ok;
  },
};
