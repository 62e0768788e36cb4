/**
 * The logging surface the SDK writes to. pino and most structured loggers fit it as they are;
 * the SDK is silent unless one is passed.
 */
export interface Logger {
  debug(fields: Record<string, unknown>, message: string): void;
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

const ignore = (): void => {};

export const silentLogger: Logger = { debug: ignore, info: ignore, warn: ignore, error: ignore };
