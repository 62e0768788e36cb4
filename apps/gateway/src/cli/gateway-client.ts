import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { connect, type SwitchboardClient } from "@switchboard/client";
import { type LoadedConfig, resolveDataDir } from "@switchboard/config-loader";
import type { Config } from "@switchboard/core";
import { VERSION } from "../version";
import { type OptionValues, stringOption } from "./args";
import { loadCliConfig } from "./cli-config";
import { CliError, EXIT, errorCode, errorMessage, UsageError } from "./cli-errors";
import { type CliIo, withProgress } from "./output";

export interface GatewayTarget {
  url: string;
  token: string;
  /** Where the token came from, for error messages (never the token itself). */
  tokenSource: string;
  dataDir: string;
  loaded: LoadedConfig;
}

/** The URL a client uses for a gateway configured with `config` (wildcard hosts mean this machine). */
export function gatewayUrl(config: Config): string {
  const configured = config.gateway.host;
  const host = configured === "0.0.0.0" || configured === "::" ? "127.0.0.1" : configured;
  return `ws://${host.includes(":") ? `[${host}]` : host}:${config.gateway.port}`;
}

/**
 * Finds the gateway and the operator token: `--url` / `$SWITCHBOARD_URL` / the config's host and
 * port; `--token` / `$SWITCHBOARD_TOKEN` / the `operator-token` file the gateway wrote into its
 * data dir (`--data-dir` / `$SWITCHBOARD_HOME` / the config's `gateway.dataDir`).
 */
export async function resolveTarget(
  values: OptionValues,
  env: NodeJS.ProcessEnv = process.env,
): Promise<GatewayTarget> {
  const loaded = await loadCliConfig(stringOption(values, "config"), env);
  const dataDir = resolveDataDir(loaded.config, stringOption(values, "data-dir"), env);
  const url = stringOption(values, "url") ?? nonEmpty(env.SWITCHBOARD_URL) ?? gatewayUrl(loaded.config);
  const explicit = stringOption(values, "token");
  if (explicit !== undefined) return { url, token: explicit, tokenSource: "--token", dataDir, loaded };
  const fromEnv = nonEmpty(env.SWITCHBOARD_TOKEN);
  if (fromEnv !== undefined)
    return { url, token: fromEnv, tokenSource: "$SWITCHBOARD_TOKEN", dataDir, loaded };
  const tokenFile = join(dataDir, "operator-token");
  try {
    const token = (await readFile(tokenFile, "utf8")).trim();
    if (token !== "") return { url, token, tokenSource: tokenFile, dataDir, loaded };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EACCES" || code === "EPERM") {
      // The file is 0600 and owned by whoever started the gateway: another user cannot read it.
      throw new CliError(
        `cannot read the operator token ${tokenFile}: permission denied (${code}); run this as the user that started the gateway, or pass --token / set SWITCHBOARD_TOKEN`,
        EXIT.failure,
      );
    }
    if (code !== "ENOENT") {
      throw new CliError(`cannot read the operator token ${tokenFile}: ${errorMessage(error)}`, EXIT.failure);
    }
  }
  throw new UsageError(
    `no operator token: pass --token, set SWITCHBOARD_TOKEN, or point --data-dir (or SWITCHBOARD_HOME) at the gateway's data dir (looked for ${tokenFile})`,
  );
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}

export interface ConnectOptions {
  /** Keep reconnecting after a drop (long-lived commands such as `tail`). */
  reconnect?: boolean;
}

/** Connects as operator, turning the SDK's failures into messages that say what to do. */
export async function connectOperator(
  io: CliIo,
  target: GatewayTarget,
  options: ConnectOptions = {},
): Promise<SwitchboardClient> {
  try {
    return await withProgress(io, `connecting to ${target.url}`, () =>
      connect({
        url: target.url,
        token: target.token,
        role: "operator",
        clientName: "switchboard-cli",
        clientVersion: VERSION,
        connectTimeoutMs: 5_000,
        reconnect: { enabled: options.reconnect === true },
      }),
    );
  } catch (error) {
    const code = errorCode(error);
    if (code === "UNAUTHORIZED") {
      throw new CliError(
        `the gateway at ${target.url} refused the token from ${target.tokenSource}: ${errorMessage(error)}`,
        EXIT.refused,
        code,
      );
    }
    if (code === "INVALID_REQUEST") throw new UsageError(`--url: ${errorMessage(error)}`);
    throw new CliError(
      `cannot reach the gateway at ${target.url}: ${errorMessage(error)}. Is it running? Start it with "switchboard up".`,
      EXIT.failure,
      code,
    );
  }
}

/** Connects, runs `task`, and always closes the connection. */
export async function withOperator<T>(
  io: CliIo,
  values: OptionValues,
  task: (client: SwitchboardClient, target: GatewayTarget) => Promise<T>,
  options: ConnectOptions = {},
): Promise<T> {
  const target = await resolveTarget(values);
  const client = await connectOperator(io, target, options);
  try {
    return await task(client, target);
  } finally {
    await client.close();
  }
}
