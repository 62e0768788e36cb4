import { readFile } from "node:fs/promises";
import { dirname, extname, resolve } from "node:path";
import { type Config, defaultConfig, parseConfig, SwitchboardError } from "@switchboard/core";
import JSON5 from "json5";
import { parse as parseYaml, YAMLParseError } from "yaml";
import { findDuplicateKey } from "./json5-duplicates";

export interface LoadedConfig {
  config: Config;
  /** Absolute path of the file read; absent when the built-in defaults are used. */
  path?: string;
  /** Relative paths inside the config (scripted rules files) are resolved against this directory. */
  baseDir: string;
}

export interface LoadConfigOptions {
  /** Environment to read `SWITCHBOARD_CONFIG` and `SWITCHBOARD_HOME` from (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Directory a relative config path is resolved against (default `process.cwd()`). */
  cwd?: string;
}

const YAML_EXTENSIONS = [".yaml", ".yml"];
const JSON_EXTENSIONS = [".json", ".json5"];

/**
 * Loads the configuration from `path`, else `SWITCHBOARD_CONFIG`, else the built-in defaults (one
 * `main` agent on the scripted model). `.json`/`.json5` files are read as JSON5 (a superset of JSON),
 * `.yaml`/`.yml` as YAML. `SWITCHBOARD_HOME` replaces `gateway.dataDir`.
 *
 * Every failure is a `SwitchboardError("INVALID_REQUEST")` whose message names the file: a syntax
 * error gives the line and column, a schema error one `path: reason` line per problem.
 */
export async function loadConfig(path?: string, options: LoadConfigOptions = {}): Promise<LoadedConfig> {
  const env = options.env ?? process.env;
  const cwd = options.cwd ?? process.cwd();
  const chosen = path ?? nonEmpty(env.SWITCHBOARD_CONFIG);
  let loaded: LoadedConfig;
  if (chosen === undefined) {
    loaded = { config: defaultConfig(), baseDir: cwd };
  } else {
    const fullPath = resolve(cwd, chosen);
    const raw = decode(fullPath, await readConfigText(fullPath));
    loaded = { config: validate(fullPath, raw), path: fullPath, baseDir: dirname(fullPath) };
  }
  const home = nonEmpty(env.SWITCHBOARD_HOME);
  if (home !== undefined) loaded.config.gateway.dataDir = home;
  return loaded;
}

/**
 * The data dir in effect: an explicit override (`--data-dir`), else `SWITCHBOARD_HOME`, else the
 * config's `gateway.dataDir`, resolved against the working directory as the gateway does.
 */
export function resolveDataDir(
  config: Config,
  override?: string,
  env: NodeJS.ProcessEnv = process.env,
): string {
  return resolve(override ?? nonEmpty(env.SWITCHBOARD_HOME) ?? config.gateway.dataDir);
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}

async function readConfigText(fullPath: string): Promise<string> {
  try {
    return await readFile(fullPath, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const reason =
      code === "ENOENT" ? "no such file" : code === "EISDIR" ? "it is a directory" : (error as Error).message;
    throw new SwitchboardError("INVALID_REQUEST", `cannot read config file ${fullPath}: ${reason}`, {
      cause: error,
    });
  }
}

function decode(fullPath: string, text: string): unknown {
  const extension = extname(fullPath).toLowerCase();
  if (YAML_EXTENSIONS.includes(extension)) {
    try {
      return parseYaml(text);
    } catch (error) {
      const where =
        error instanceof YAMLParseError && error.linePos
          ? ` at line ${error.linePos[0].line}, column ${error.linePos[0].col}`
          : "";
      // yaml appends the position and a code excerpt to the first line; keep only the reason.
      const reason = ((error as Error).message.split("\n")[0] ?? "").replace(
        / at line \d+, column \d+:?$/,
        "",
      );
      throw syntaxError(fullPath, "YAML", where, reason, error);
    }
  }
  if (JSON_EXTENSIONS.includes(extension)) {
    const format = extension === ".json" ? "JSON" : "JSON5";
    let decoded: unknown;
    try {
      decoded = JSON5.parse(text);
    } catch (error) {
      const { lineNumber, columnNumber } = error as { lineNumber?: number; columnNumber?: number };
      const where = lineNumber !== undefined ? ` at line ${lineNumber}, column ${columnNumber ?? 1}` : "";
      // JSON5 repeats the position in its message; keep only the reason.
      const reason = (error as Error).message.replace(/^JSON5: /, "").replace(/ at \d+:\d+$/, "");
      throw syntaxError(fullPath, format, where, reason, error);
    }
    // The parser keeps the last of a repeated key without a word (YAML refuses one).
    const duplicate = findDuplicateKey(text);
    if (duplicate) {
      const { key, at, first } = duplicate;
      throw syntaxError(
        fullPath,
        format,
        ` at line ${at.line}, column ${at.column}`,
        `duplicate key ${JSON.stringify(key)} (first at line ${first.line}, column ${first.column}): a key may appear once in an object`,
        undefined,
      );
    }
    return decoded;
  }
  throw new SwitchboardError(
    "INVALID_REQUEST",
    `config file ${fullPath}: unsupported extension "${extension || "(none)"}" (use .json5, .json, .yaml or .yml)`,
  );
}

function syntaxError(
  fullPath: string,
  format: string,
  where: string,
  reason: string,
  cause: unknown,
): SwitchboardError {
  return new SwitchboardError(
    "INVALID_REQUEST",
    `config file ${fullPath} is not valid ${format}${where}: ${reason}`,
    { cause },
  );
}

function validate(fullPath: string, raw: unknown): Config {
  try {
    // An empty file decodes to null/undefined: the defaults apply, as with no file at all.
    return parseConfig(raw ?? {});
  } catch (error) {
    if (!(error instanceof SwitchboardError)) throw error;
    const lines = error.message.replace(/^invalid configuration:\n?/, "").trim();
    throw new SwitchboardError("INVALID_REQUEST", `invalid configuration in ${fullPath}:\n  ${lines}`, {
      details: error.details,
      cause: error,
    });
  }
}

/** Reads and validates one config file (no environment lookups): what `switchboard-agent --config` uses. */
export async function loadConfigFile(
  path: string,
  cwd = process.cwd(),
): Promise<LoadedConfig & { path: string }> {
  const loaded = await loadConfig(path, { cwd, env: {} });
  return { ...loaded, path: loaded.path ?? resolve(cwd, path) };
}
