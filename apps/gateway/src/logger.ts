import pino, { type DestinationStream, type Logger } from "pino";

export type LogLevel = "trace" | "debug" | "info" | "warn" | "error" | "fatal" | "silent";

export interface AppLoggerOptions {
  level?: LogLevel;
  /** One short human line per entry instead of JSON (pino-pretty is not a dependency). */
  pretty?: boolean;
  /** Where lines go (default: stderr, so stdout stays for the CLI's own output). */
  destination?: { write(line: string): unknown };
  /** Colour in pretty mode (default: when the destination is a TTY stderr). */
  colors?: boolean;
}

const REDACTED = "[redacted]";

/** Secrets, wherever they sit near the top of a log object (pino's own redaction, fast). */
export const REDACT_PATHS = [
  "token",
  "*.token",
  "*.*.token",
  "auth.token",
  "params.auth.token",
  "authorization",
  "*.authorization",
  "apiKey",
  "*.apiKey",
];

/**
 * Conversation text in log objects: never logged, at any depth. Child-logger bindings carry
 * identifiers (component, runId), not text, so only their tokens are redacted.
 */
const TEXT_FIELDS = new Set(["message", "text", "reply", "task", "content"]);
const ERROR_FIELDS = new Set(["err", "error"]);
const MAX_DEPTH = 6;

/**
 * Replaces conversation text fields with a marker. pino's wildcard redaction cannot spare
 * `err.message` (its censor does not see the wildcard's key), and an error log without its
 * message helps nobody, so text fields are redacted here and errors are left alone.
 */
export function redactText<T>(value: T, depth = 0): T {
  if (depth > MAX_DEPTH || value === null || typeof value !== "object" || value instanceof Error)
    return value;
  if (Array.isArray(value)) return value.map((item) => redactText(item, depth + 1)) as T;
  const prototype = Object.getPrototypeOf(value);
  if (prototype !== Object.prototype && prototype !== null) return value;
  const out: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(value as Record<string, unknown>)) {
    if (ERROR_FIELDS.has(key)) out[key] = field;
    else if (TEXT_FIELDS.has(key) && field !== undefined && field !== null) out[key] = REDACTED;
    else out[key] = redactText(field, depth + 1);
  }
  return out as T;
}

/** The application's root logger (gateway, CLI, in-process agent workers). */
export function createAppLogger(options: AppLoggerOptions = {}): Logger {
  const level = options.level ?? "info";
  const base = {
    level,
    base: { pid: process.pid },
    redact: { paths: REDACT_PATHS, censor: REDACTED },
    formatters: {
      log: (object: Record<string, unknown>) => redactText(object),
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  if (options.pretty) {
    const target = options.destination ?? process.stderr;
    const colors = options.colors ?? (options.destination === undefined && process.stderr.isTTY === true);
    const stream: DestinationStream = {
      write: (line: string) => void target.write(formatLine(line, colors)),
    };
    return pino(base, stream);
  }
  if (options.destination) {
    const target = options.destination;
    return pino(base, { write: (line: string) => void target.write(line) });
  }
  return pino(base, pino.destination({ dest: 2, sync: true }));
}

const LEVEL_NAMES: Record<number, string> = {
  10: "TRACE",
  20: "DEBUG",
  30: "INFO",
  40: "WARN",
  50: "ERROR",
  60: "FATAL",
};
const LEVEL_COLORS: Record<number, string> = { 10: "90", 20: "90", 30: "32", 40: "33", 50: "31", 60: "35" };
const OMITTED = new Set(["level", "time", "pid", "hostname", "msg", "component"]);

/** `12:00:01.123 INFO  [runs] run ended runId=… status=ok` from one pino JSON line. */
export function formatLine(line: string, colors = false): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith("\n") ? line : `${line}\n`;
  }
  const levelNumber = Number(entry.level);
  const levelName = (LEVEL_NAMES[levelNumber] ?? String(entry.level)).padEnd(5);
  const time =
    typeof entry.time === "string" ? entry.time.slice(11, 23) : new Date().toISOString().slice(11, 23);
  const component = typeof entry.component === "string" ? `[${entry.component}] ` : "";
  const fields = Object.entries(entry)
    .filter(([key]) => !OMITTED.has(key))
    .map(([key, value]) => `${key}=${formatValue(value)}`)
    .join(" ");
  const coloredLevel = colors
    ? `\u001b[${LEVEL_COLORS[levelNumber] ?? "0"}m${levelName}\u001b[0m`
    : levelName;
  return `${time} ${coloredLevel} ${component}${String(entry.msg ?? "")}${fields ? ` ${fields}` : ""}\n`;
}

function formatValue(value: unknown): string {
  if (typeof value === "string") return /[\s"=]/.test(value) ? JSON.stringify(value) : value;
  if (value && typeof value === "object" && "message" in value && "type" in value) {
    // A serialised error: its message is what a reader needs; the stack is in JSON mode.
    return JSON.stringify(String((value as { message: unknown }).message));
  }
  return JSON.stringify(value);
}
