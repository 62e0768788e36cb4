import { EXIT } from "./cli-errors";

/** Where a command writes: stdout for results, stderr for messages and progress. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /** stderr is a terminal: progress lines and colour are allowed there. */
  readonly interactive: boolean;
}

/** stdout or stderr failed: writing to it stopped (an `error` event, not a crash). */
const failedStreams = new Set<NodeJS.WriteStream>();
let outputError = false;
let guarded = false;

/**
 * Without an `error` listener a write into a closed pipe (`switchboard doctor | head -1`) crashes
 * the process with a stack trace, and a running gateway with it: a reader that went away (EPIPE)
 * only means nobody reads any more, so that stream is left alone and the command goes on. Any
 * other write failure is reported on the other stream and fails the command.
 */
export function guardOutput(): void {
  if (guarded) return;
  guarded = true;
  const watch = (stream: NodeJS.WriteStream, name: string, other: NodeJS.WriteStream) =>
    stream.on("error", (error: NodeJS.ErrnoException) => {
      failedStreams.add(stream);
      if (error.code === "EPIPE") return;
      outputError = true;
      // The error can arrive after the command returned its exit code.
      if (!process.exitCode) process.exitCode = EXIT.failure;
      if (!failedStreams.has(other)) other.write(`switchboard: cannot write to ${name}: ${error.message}\n`);
    });
  watch(process.stdout, "stdout", process.stderr);
  watch(process.stderr, "stderr", process.stdout);
}

function writeTo(stream: NodeJS.WriteStream, text: string): void {
  guardOutput();
  if (failedStreams.has(stream)) return;
  stream.write(text.endsWith("\n") ? text : `${text}\n`);
}

/** A write to stdout or stderr failed other than by the reader going away: the output is incomplete. */
export function outputFailed(): boolean {
  return outputError;
}

export const processIo: CliIo = {
  out: (text) => writeTo(process.stdout, text),
  err: (text) => writeTo(process.stderr, text),
  interactive: process.stderr.isTTY === true,
};

export function printJson(io: CliIo, value: unknown): void {
  io.out(JSON.stringify(value, null, 2));
}

export interface Column<Row> {
  header: string;
  value(row: Row): string;
  /** Longer cells are cut with an ellipsis. */
  max?: number;
}

/** A plain aligned text table (no borders, two spaces between columns). */
export function formatTable<Row>(rows: readonly Row[], columns: readonly Column<Row>[]): string {
  const cells = rows.map((row) =>
    columns.map((column) => truncate(oneLine(column.value(row)), column.max ?? 60)),
  );
  const widths = columns.map((column, index) =>
    Math.max(column.header.length, ...cells.map((row) => row[index]!.length)),
  );
  const line = (values: readonly string[]) =>
    values
      .map((value, index) => (index === values.length - 1 ? value : value.padEnd(widths[index]!)))
      .join("  ")
      .trimEnd();
  return [line(columns.map((column) => column.header)), ...cells.map(line)].join("\n");
}

export function oneLine(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

export function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, Math.max(0, max - 1))}…`;
}

/** `just now`, `42s ago`, `5m ago`, `3h ago`, `2d ago`. */
export function ago(timestamp: number, now = Date.now()): string {
  const seconds = Math.round((now - timestamp) / 1000);
  if (seconds < 2) return "just now";
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86_400)}d ago`;
}

/** `HH:MM:SS` in local time. */
export function clock(timestamp: number): string {
  const date = new Date(timestamp);
  return [date.getHours(), date.getMinutes(), date.getSeconds()]
    .map((part) => String(part).padStart(2, "0"))
    .join(":");
}

const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

export interface Progress {
  update(text: string): void;
  stop(): void;
}

/**
 * A spinner on stderr while something waits. Only on a terminal: piped output and CI logs stay
 * free of control characters.
 */
export function startProgress(io: CliIo, text: string): Progress {
  if (!io.interactive) return { update() {}, stop() {} };
  let label = text;
  let frame = 0;
  const started = Date.now();
  const draw = () => {
    const seconds = Math.floor((Date.now() - started) / 1000);
    process.stderr.write(
      `\r\u001b[2K${FRAMES[frame++ % FRAMES.length]} ${label}${seconds > 0 ? ` (${seconds}s)` : ""}`,
    );
  };
  draw();
  const timer = setInterval(draw, 100);
  timer.unref();
  return {
    update(next) {
      label = next;
    },
    stop() {
      clearInterval(timer);
      process.stderr.write("\r\u001b[2K");
    },
  };
}

/** Runs `task` with a spinner, always clearing it. */
export async function withProgress<T>(io: CliIo, text: string, task: () => Promise<T>): Promise<T> {
  const progress = startProgress(io, text);
  try {
    return await task();
  } finally {
    progress.stop();
  }
}
