import { type LoadedConfig, loadConfig } from "@switchboard/config-loader";
import { CliError, EXIT, errorCode, errorMessage, INVALID_CONFIG_CODE } from "./cli-errors";

/**
 * Loads the config for a command. A file that cannot be read, parsed or validated is the user's input
 * being wrong, like a bad flag: exit 2 (the same table `switchboard-agent` uses), not 1.
 */
export async function loadCliConfig(
  path: string | undefined,
  env?: NodeJS.ProcessEnv,
): Promise<LoadedConfig> {
  try {
    return await loadConfig(path, env ? { env } : {});
  } catch (error) {
    throw asConfigError(error) ?? error;
  }
}

/** An INVALID_REQUEST from loading a config (or its rules files) as a usage-class CLI error. */
export function asConfigError(error: unknown): CliError | undefined {
  if (errorCode(error) !== "INVALID_REQUEST") return undefined;
  const issues = (error as { details?: { issues?: unknown } }).details?.issues;
  return new CliError(
    errorMessage(error),
    EXIT.usage,
    INVALID_CONFIG_CODE,
    Array.isArray(issues) ? { issues } : undefined,
    { cause: error },
  );
}
