/**
 * The one logging surface of every package. Fields come first and the message is optional, which
 * is pino's own signature: a pino logger (or a child of one) can be passed anywhere as it is, and
 * its fields are kept. (A message-first shape looks the same to the compiler but makes pino read
 * the fields object as a format argument and drop it.) Libraries stay silent unless given one.
 */
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(fields: LogFields, message?: string): void;
  info(fields: LogFields, message?: string): void;
  warn(fields: LogFields, message?: string): void;
  error(fields: LogFields, message?: string): void;
  /** A logger that adds `bindings` to every entry (e.g. `{ component: "store" }`). */
  child(bindings: LogFields): Logger;
}

/**
 * A warning logged at most once per `intervalMs`, with how many were held back since: an attack of
 * thousands of refused sockets (or cancellations, or failed writes) must not turn into thousands of
 * log lines (disk and CPU it would cost).
 */
export function warnThrottle(
  log: Pick<Logger, "warn">,
  intervalMs = 10_000,
  now: () => number = Date.now,
): (fields: LogFields, message: string) => void {
  let last = Number.NEGATIVE_INFINITY;
  let suppressed = 0;
  return (fields, message) => {
    const time = now();
    if (time - last < intervalMs) {
      suppressed++;
      return;
    }
    last = time;
    log.warn(suppressed > 0 ? { ...fields, suppressed } : fields, message);
    suppressed = 0;
  };
}

const ignore = (): void => {};

export const silentLogger: Logger = {
  debug: ignore,
  info: ignore,
  warn: ignore,
  error: ignore,
  child: () => silentLogger,
};

export type LogLevelName = "debug" | "info" | "warn" | "error";

export interface RecordedLogEntry {
  level: LogLevelName;
  /** The child bindings and the call's fields, merged as pino merges them. */
  fields: LogFields;
  message: string | undefined;
}

/** A logger that keeps what it is given, for tests and for tools that print a summary later. */
export function recordingLogger(): { logger: Logger; entries: RecordedLogEntry[] } {
  const entries: RecordedLogEntry[] = [];
  const make = (bindings: LogFields): Logger => {
    const at =
      (level: LogLevelName) =>
      (fields: LogFields, message?: string): void => {
        entries.push({ level, fields: { ...bindings, ...fields }, message });
      };
    return {
      debug: at("debug"),
      info: at("info"),
      warn: at("warn"),
      error: at("error"),
      child: (more) => make({ ...bindings, ...more }),
    };
  };
  return { logger: make({}), entries };
}
