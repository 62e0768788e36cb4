import { isAbsolute, relative, resolve, sep } from "node:path";
import type { startAgentWorker } from "@switchboard/agent";
import { type LoadedConfig, resolveDataDir } from "@switchboard/config-loader";
import { type Config, defaultConfig } from "@switchboard/core";
import { redactUrl } from "@switchboard/store-pg/url";
import type { Logger } from "pino";
import { dataDirProblem } from "../data-dir-secrets";
import type { Gateway } from "../gateway";
import { createAppLogger, type LogLevel } from "../logger";
import { VERSION } from "../version";
import {
  type CommandSpec,
  numberOption,
  type OptionSpecs,
  type OptionValues,
  stringOption,
  usageLine,
} from "./args";
import { asConfigError, loadCliConfig } from "./cli-config";
import { CliError, EXIT, errorMessage, UsageError } from "./cli-errors";
import { gatewayUrl } from "./gateway-client";
import type { CliIo } from "./output";

const LOG_LEVELS: readonly LogLevel[] = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];

export const LOG_OPTION: OptionSpecs = {
  "log-level": {
    type: "string",
    value: "LEVEL",
    description: `log level (${LOG_LEVELS.join(", ")}); default logging.level`,
  },
};

export const SERVER_OPTIONS: OptionSpecs = {
  port: {
    type: "string",
    value: "PORT",
    description: "port to listen on (0 = any free port); default gateway.port (18789)",
  },
  host: {
    type: "string",
    value: "HOST",
    description: "address to listen on; default gateway.host (127.0.0.1)",
  },
  store: {
    type: "string",
    value: "STORE",
    description:
      "fs (files in the data dir) or a postgres:// URL (schema and pool from the config); default store of the config",
  },
  ...LOG_OPTION,
};

/** `--store`: `fs`, or a PostgreSQL URL that replaces the config's (its schema and pool are kept). */
function storeFromFlag(spec: CommandSpec, value: string, current: Config["store"]): Config["store"] {
  if (value === "fs") return { kind: "fs" };
  if (/^postgres(ql)?:\/\//.test(value)) {
    return {
      kind: "postgres",
      url: value,
      schema: current.kind === "postgres" ? current.schema : "switchboard",
      pool: current.kind === "postgres" ? current.pool : { max: 10 },
    };
  }
  // The value may be a URL with a password in it: never echo it whole.
  throw new UsageError(
    `--store: must be fs or a postgres:// URL (got ${JSON.stringify(redactUrl(value))})`,
    usageLine(spec),
    spec.name,
  );
}

/** Where the gateway keeps its data, for the start-up summary (never the password). */
function describeStore(config: Config): string {
  const store = config.store;
  if (store.kind === "fs") return "files in the data dir";
  const where = store.url !== undefined ? redactUrl(store.url) : `$${store.urlEnv}`;
  return `PostgreSQL ${where}, schema ${store.schema}`;
}

export function appLogger(spec: CommandSpec, values: OptionValues, config: Config): Logger {
  const level = stringOption(values, "log-level") ?? config.logging.level;
  if (!(LOG_LEVELS as string[]).includes(level)) {
    throw new UsageError(
      `--log-level: must be one of ${LOG_LEVELS.join(", ")} (got "${level}")`,
      usageLine(spec),
      spec.name,
    );
  }
  return createAppLogger({ level: level as LogLevel, pretty: config.logging.pretty });
}

/** How the user runs this CLI, for examples: `node apps/gateway/dist/cli.js` from the repo root. */
export function cliInvocation(): string {
  const script = process.argv[1];
  if (!script) return "switchboard";
  if (!/\.[cm]?js$/.test(script)) return "switchboard";
  const shown = relative(process.cwd(), script);
  return `node ${shown.startsWith(`..${sep}`) || shown === "" ? script : shown}`;
}

/** A path as typed in an example: relative when it is below the working directory. */
function shownPath(path: string): string {
  const shown = relative(process.cwd(), path);
  return shellQuote(shown && !shown.startsWith("..") && !isAbsolute(shown) ? shown : path);
}

function shellQuote(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, "'\\''")}'`;
}

/** Waits for SIGINT/SIGTERM; a second signal during shutdown exits at once. */
export function untilSignal(io: CliIo): Promise<NodeJS.Signals> {
  return new Promise((done) => {
    const onSignal = (signal: NodeJS.Signals) => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      const force = () => {
        io.err("second signal: exiting now");
        process.exit(130);
      };
      process.once("SIGINT", force);
      process.once("SIGTERM", force);
      done(signal);
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}

interface ServerSetup {
  loaded: LoadedConfig;
  config: Config;
  dataDir: string;
  logger: Logger;
}

/** Config with the command line's `--port`, `--host`, `--store` and `--data-dir` applied. */
export async function serverSetup(spec: CommandSpec, values: OptionValues): Promise<ServerSetup> {
  const loaded = await loadCliConfig(stringOption(values, "config"));
  const port = numberOption(spec, values, "port", { min: 0, max: 65535, integer: true });
  const host = stringOption(values, "host");
  const config: Config = structuredClone(loaded.config);
  if (port !== undefined) config.gateway.port = port;
  if (host !== undefined) config.gateway.host = host;
  const store = stringOption(values, "store");
  if (store !== undefined) config.store = storeFromFlag(spec, store, config.store);
  const dataDir = resolveDataDir(config, stringOption(values, "data-dir"));
  config.gateway.dataDir = dataDir;
  return { loaded, config, dataDir, logger: appLogger(spec, values, config) };
}

async function startGatewayOrExplain(setup: ServerSetup): Promise<Gateway> {
  try {
    // The server is loaded by the commands that run one only (see `main.ts`).
    const { Gateway } = await import("../gateway");
    return await Gateway.start({ config: setup.config, dataDir: setup.dataDir, logger: setup.logger });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const where = `${setup.config.gateway.host}:${setup.config.gateway.port}`;
    if (code === "EADDRINUSE") {
      throw new CliError(
        `cannot listen on ${where}: the port is in use (another gateway? pick another with --port)`,
        EXIT.failure,
      );
    }
    const syscall = (error as NodeJS.ErrnoException).syscall;
    if (syscall === "getaddrinfo" || code === "ENOTFOUND" || code === "EAI_AGAIN") {
      throw new CliError(
        `cannot listen on ${where}: the host ${JSON.stringify(setup.config.gateway.host)} cannot be resolved (${code}); set gateway.host in the config (or --host) to an address of this machine, e.g. 127.0.0.1, or 0.0.0.0 for every interface`,
        EXIT.failure,
      );
    }
    if (code === "EADDRNOTAVAIL" || (code === "EACCES" && (syscall === "listen" || syscall === "bind"))) {
      throw new CliError(`cannot listen on ${where}: ${errorMessage(error)}`, EXIT.failure);
    }
    throw dataDirProblem(error, setup.dataDir) ?? error;
  }
}

/**
 * `up` and `gateway`: starts the gateway (and, for `up`, reference agent workers for every
 * configured agent in the same process), prints how to reach it, and runs until a signal.
 */
export async function runServer(
  io: CliIo,
  spec: CommandSpec,
  values: OptionValues,
  withAgents: boolean,
): Promise<number> {
  // Listen first: a signal during start-up then stops the gateway cleanly once it is up.
  const stopSignal = untilSignal(io);
  const setup = await serverSetup(spec, values);
  const gateway = await startGatewayOrExplain(setup);
  const url = gatewayUrl({ ...setup.config, gateway: { ...setup.config.gateway, port: gateway.port } });
  let worker: Awaited<ReturnType<typeof startAgentWorker>> | undefined;
  if (withAgents) {
    try {
      const { startAgentWorker } = await import("@switchboard/agent");
      worker = await startAgentWorker({
        url,
        token: gateway.operatorToken,
        config: setup.config,
        baseDir: setup.loaded.baseDir,
        logger: setup.logger,
      });
    } catch (error) {
      await gateway.close();
      // A missing or broken rules file is a config error (exit 2), found only once the models load.
      const configError = asConfigError(error);
      throw new CliError(
        `cannot start the agents: ${errorMessage(error)}`,
        configError?.exitCode ?? EXIT.failure,
        configError?.code,
        configError?.details,
      );
    }
  }

  const defaults = defaultConfig();
  // Flags that point another command at this gateway (the token comes from the data dir).
  const target: string[] = [];
  if (url !== gatewayUrl(defaults)) target.push("--url", url);
  if (setup.dataDir !== resolve(defaults.gateway.dataDir))
    target.push("--data-dir", shownPath(setup.dataDir));
  const example = [cliInvocation(), "send", "main", '"ping"', "--wait", "10", ...target].join(" ");
  // Without workers in this process the example would only time out: the runs wait for a worker. The
  // worker needs the same config (agent ids, models, rules files) to serve what the gateway routes.
  const workerCommand = worker
    ? undefined
    : [
        cliInvocation(),
        "agent",
        ...(setup.loaded.path ? ["--config", shownPath(setup.loaded.path)] : []),
        ...target,
      ].join(" ");
  // The token rides in the fragment, which browsers never send to the server; the UI moves it to
  // sessionStorage and clears it from the address bar.
  const uiUrl = setup.config.ui.enabled
    ? `${url.replace(/^ws/, "http")}/ui/#token=${encodeURIComponent(gateway.operatorToken)}`
    : undefined;
  const agents = setup.config.agents.list.map((agent) => ({
    id: agent.id,
    provider: agent.model?.provider ?? "scripted",
  }));
  if (values.json) {
    io.out(
      JSON.stringify({
        url,
        ...(uiUrl ? { uiUrl } : {}),
        port: gateway.port,
        operatorToken: gateway.operatorToken,
        dataDir: setup.dataDir,
        store: describeStore(setup.config),
        config: setup.loaded.path ?? null,
        agents: worker ? agents : [],
        ...(workerCommand ? { workerCommand } : {}),
        example,
      }),
    );
  } else {
    const rows: Array<[string, string]> = [
      ["URL", url],
      ...(uiUrl ? ([["Web UI", uiUrl]] as Array<[string, string]>) : []),
      ["Operator token", gateway.operatorToken],
      ["Data dir", setup.dataDir],
      ["Store", describeStore(setup.config)],
      ["Config", setup.loaded.path ?? "(built-in defaults)"],
      [
        "Agents",
        worker
          ? agents.map((agent) => `${agent.id} (${agent.provider})`).join(", ")
          : `none in this process: runs wait queued until a worker for ${agents.map((agent) => agent.id).join(", ") || "the agent"} connects`,
      ],
    ];
    const lines = [`Switchboard ${VERSION} is up${worker ? " with its reference agents" : ""}.`, ""];
    for (const [name, value] of rows) lines.push(`  ${name.padEnd(15)} ${value}`);
    if (workerCommand) {
      lines.push(
        "",
        "Start a worker for the agents in another terminal:",
        `  ${workerCommand}`,
        "",
        "Then try it in a third terminal:",
        `  ${example}`,
      );
    } else {
      lines.push("", "Try it in another terminal:", `  ${example}`);
    }
    lines.push("", "Ctrl-C stops it.");
    io.out(lines.join("\n"));
  }

  const signal = await stopSignal;
  io.err(`${signal}: shutting down…`);
  // Dispatch stops first: a stopping worker must not be handed the runs still queued (they stay
  // queued for the next start); the worker then finishes, or fails, the runs it is running.
  await gateway.beginClose();
  await worker?.stop();
  const { undone } = await gateway.close();
  if (undone.length > 0) {
    // The rest is abandoned (e.g. a database that stopped answering): the CLI exits regardless.
    io.err(`stopped, but the shutdown did not finish: ${undone.join("; ")}`);
    return EXIT.failure;
  }
  io.err("stopped");
  return EXIT.ok;
}
