import { parseArgs } from "node:util";
import { loadConfigFile } from "@switchboard/config-loader";
import { type Config, defaultConfig } from "@switchboard/core";
import pino, { type Logger } from "pino";
import { EXIT, EXIT_INTERRUPTED, exitCodeFor } from "./exit-codes";
import { type RunningAgentWorker, startAgentWorker } from "./worker";

export const AGENT_CLI_USAGE = `Usage: switchboard-agent [options]

Connects to a Switchboard gateway as an agent worker and runs the configured agents' models.

Options:
  --url <ws-url>[,...]  gateway URL, or several instances of one cluster separated by commas (tried in
                        turn; default: ws://<gateway.host>:<gateway.port> from the config)
  --token <token>       a token for role agent (or an operator token); default: $SWITCHBOARD_TOKEN
  --config <file>       config file, JSON, JSON5 or YAML (default: $SWITCHBOARD_CONFIG, else built-in defaults)
  --agents <a,b>        agent ids to serve (default: every configured agent)
  --concurrency <n>     runs executed at once (default 4)
  --wait                keep retrying until the gateway is reachable
  --log-level <level>   trace, debug, info, warn, error or silent (default: logging.level from the config)
  -h, --help            show this help

Stops on SIGINT/SIGTERM after finishing (or failing) its current runs; a second signal exits at once.
Exit codes (the same for every Switchboard binary): 0 stopped cleanly, 1 failure (gateway unreachable,
connection lost for good), 2 usage or config error, 3 refused by the gateway (wrong token, FORBIDDEN).`;

const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;

export interface AgentCliIO {
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** Where usage and errors go (default: process.stderr). */
  stderr?: { write(text: string): unknown };
  /** Where help goes (default: process.stdout). */
  stdout?: { write(text: string): unknown };
  /** Where logs go (default: stdout). Tests pass a logger of their own. */
  logger?: Logger;
  /**
   * Called with the running worker once connected; returns a promise that resolves when the
   * worker should stop. Default: the first SIGINT or SIGTERM (a second one exits at once).
   */
  untilStopped?: (worker: RunningAgentWorker) => Promise<unknown>;
}

export interface AgentCliArgs {
  url?: string[];
  token: string;
  configPath?: string;
  agents?: string[];
  concurrency?: number;
  wait: boolean;
  logLevel?: (typeof LOG_LEVELS)[number];
}

class UsageError extends Error {}

/** Parses the command line; throws a usage error naming the bad flag. `undefined` means `--help`. */
export function parseAgentCliArgs(
  argv: string[],
  env: Record<string, string | undefined>,
): AgentCliArgs | undefined {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        url: { type: "string" },
        token: { type: "string" },
        config: { type: "string" },
        agents: { type: "string" },
        concurrency: { type: "string" },
        wait: { type: "boolean" },
        "log-level": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) return undefined;
  const token = (values.token as string | undefined) ?? env.SWITCHBOARD_TOKEN;
  if (!token) throw new UsageError("--token is required (or set SWITCHBOARD_TOKEN)");
  const url = (values.url as string | undefined)?.split(",").map((part) => part.trim());
  for (const one of url ?? []) {
    if (!/^wss?:\/\/\S+$/i.test(one))
      throw new UsageError(
        `--url: must be a ws:// or wss:// URL (or several, comma-separated), got ${JSON.stringify(one)}`,
      );
  }
  const args: AgentCliArgs = { token, wait: values.wait === true };
  if (url !== undefined) args.url = url;
  const configPath = (values.config as string | undefined) ?? (env.SWITCHBOARD_CONFIG || undefined);
  if (configPath !== undefined) args.configPath = configPath;
  if (values.agents !== undefined) {
    const agents = (values.agents as string)
      .split(",")
      .map((id) => id.trim())
      .filter((id) => id !== "");
    if (agents.length === 0)
      throw new UsageError("--agents: name at least one agent id, e.g. --agents main,research");
    args.agents = agents;
  }
  if (values.concurrency !== undefined) {
    const concurrency = Number(values.concurrency);
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1024) {
      throw new UsageError(
        `--concurrency: must be an integer from 1 to 1024, got ${JSON.stringify(values.concurrency)}`,
      );
    }
    args.concurrency = concurrency;
  }
  const level = values["log-level"] as string | undefined;
  if (level !== undefined) {
    if (!(LOG_LEVELS as readonly string[]).includes(level)) {
      throw new UsageError(
        `--log-level: must be one of ${LOG_LEVELS.join(", ")}, got ${JSON.stringify(level)}`,
      );
    }
    args.logLevel = level as AgentCliArgs["logLevel"];
  }
  return args;
}

/** `switchboard-agent`: returns the process exit code (see `EXIT`). */
export async function runAgentCli(argv: string[], io: AgentCliIO = {}): Promise<number> {
  const env = io.env ?? process.env;
  const stderr = io.stderr ?? process.stderr;
  const stdout = io.stdout ?? process.stdout;
  let args: AgentCliArgs | undefined;
  try {
    args = parseAgentCliArgs(argv, env);
  } catch (error) {
    stderr.write(`switchboard-agent: ${(error as Error).message}\n\n${AGENT_CLI_USAGE}\n`);
    return EXIT.usage;
  }
  if (!args) {
    stdout.write(`${AGENT_CLI_USAGE}\n`);
    return EXIT.ok;
  }

  let config: Config;
  let baseDir = io.cwd ?? process.cwd();
  try {
    if (args.configPath !== undefined) {
      const loaded = await loadConfigFile(args.configPath, baseDir);
      config = loaded.config;
      baseDir = loaded.baseDir;
    } else {
      config = defaultConfig();
    }
  } catch (error) {
    stderr.write(`switchboard-agent: ${(error as Error).message}\n`);
    return EXIT.usage;
  }

  const logger =
    io.logger ?? pino({ name: "switchboard-agent", level: args.logLevel ?? config.logging.level });
  const urls = args.url ?? [defaultUrl(config)];
  const url = urls.length === 1 ? urls[0]! : urls;
  let worker: RunningAgentWorker;
  try {
    worker = await startAgentWorker({
      url,
      token: args.token,
      config,
      baseDir,
      logger,
      waitForGateway: args.wait,
      ...(args.agents ? { agents: args.agents } : {}),
      ...(args.concurrency !== undefined ? { concurrency: args.concurrency } : {}),
    });
  } catch (error) {
    const exitCode = exitCodeFor(error);
    const message = (error as Error).message;
    const where =
      exitCode === EXIT.usage || urls.some((one) => message.includes(one))
        ? ""
        : ` (gateway ${urls.join(", ")})`;
    const refused = exitCode === EXIT.refused ? "the gateway refused the worker: " : "";
    stderr.write(`switchboard-agent: ${refused}${message}${where}\n`);
    return exitCode;
  }

  const stopRequested = (io.untilStopped ?? untilSignal)(worker);
  const outcome = await Promise.race([
    stopRequested.then(() => "stop" as const),
    worker.closed.then(() => "closed" as const),
  ]);
  if (outcome === "closed") {
    // A closed client's ready() rejects with the reason it closed (e.g. a token revoked meanwhile).
    const reason = await worker.client.ready().then(
      () => undefined,
      (error: unknown) => error,
    );
    const exitCode = exitCodeFor(reason);
    const why = reason instanceof Error ? `: ${reason.message}` : "";
    stderr.write(
      exitCode === EXIT.refused
        ? `switchboard-agent: the gateway refused the worker${why}\n`
        : `switchboard-agent: the connection to the gateway closed for good${why}\n`,
    );
    return exitCode === EXIT.usage ? EXIT.failure : exitCode;
  }
  logger.info({ activeRuns: worker.activeRuns }, "stopping: finishing current runs");
  await worker.stop();
  logger.info("stopped");
  return EXIT.ok;
}

function defaultUrl(config: Config): string {
  const host = config.gateway.host.includes(":") ? `[${config.gateway.host}]` : config.gateway.host;
  return `ws://${host}:${config.gateway.port}`;
}

/** Resolves on the first SIGINT/SIGTERM; a second one means "now", so it exits at once. */
function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      const again = () => process.exit(EXIT_INTERRUPTED);
      process.once("SIGINT", again);
      process.once("SIGTERM", again);
      resolve(signal);
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}
