import { readFile } from "node:fs/promises";
import { dirname, extname, resolve } from "node:path";
import { type Config, parseConfig, SwitchboardError } from "@switchboard/core";
import JSON5 from "json5";
import { parse as parseYaml } from "yaml";

export interface LoadedConfig {
  config: Config;
  /** Absolute path of the file read. */
  path: string;
  /** The file's directory: relative paths inside the config (rules files) are resolved against it. */
  baseDir: string;
}

/**
 * Reads and validates a config file: `.yaml`/`.yml` as YAML, anything else as JSON5 (which
 * accepts plain JSON). Every problem is a `SwitchboardError("INVALID_REQUEST")` naming the file.
 */
export async function loadConfigFile(path: string, cwd = process.cwd()): Promise<LoadedConfig> {
  const fullPath = resolve(cwd, path);
  let text: string;
  try {
    text = await readFile(fullPath, "utf8");
  } catch (error) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `cannot read config file ${fullPath}: ${(error as Error).message}`,
      { cause: error },
    );
  }
  const yaml = [".yaml", ".yml"].includes(extname(fullPath).toLowerCase());
  let raw: unknown;
  try {
    raw = yaml ? parseYaml(text) : JSON5.parse(text);
  } catch (error) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `config file ${fullPath} is not valid ${yaml ? "YAML" : "JSON5"}: ${(error as Error).message}`,
      { cause: error },
    );
  }
  try {
    // An empty YAML file decodes to null: the defaults apply, as with no file at all.
    return { config: parseConfig(raw ?? {}), path: fullPath, baseDir: dirname(fullPath) };
  } catch (error) {
    if (error instanceof SwitchboardError) {
      throw new SwitchboardError("INVALID_REQUEST", `${fullPath}: ${error.message}`, {
        details: error.details,
        cause: error,
      });
    }
    throw error;
  }
}
