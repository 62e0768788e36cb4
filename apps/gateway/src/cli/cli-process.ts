import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The built CLI the tests run, as a user would: `node apps/gateway/dist/cli.js …`. */
export const CLI_PATH = fileURLToPath(new URL("../../dist/cli.js", import.meta.url));
export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

export const CLI_BUILT = existsSync(CLI_PATH);
export const NOT_BUILT_MESSAGE = `${CLI_PATH} is missing: the CLI tests run the built binary. Run \`npx -y pnpm@10.34.8 build\` first (\`pnpm test\` does).`;

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment without the caller's SWITCHBOARD_* settings, so a developer's shell cannot leak in. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env))
    if (!name.startsWith("SWITCHBOARD_")) env[name] = value;
  return { ...env, ...extra };
}

export function runCliProcess(
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, ...args],
      { cwd: options.cwd ?? REPO_ROOT, env: options.env ?? cleanEnv(), timeout: options.timeoutMs ?? 30_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** A long-running CLI process (`up`, `gateway`) with its output collected as it comes. */
export class CliProcess {
  stdout = "";
  stderr = "";
  readonly exited: Promise<number | null>;

  private constructor(readonly child: ChildProcess) {
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      this.stdout += chunk;
    });
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      this.stderr += chunk;
    });
    this.exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
  }

  static start(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): CliProcess {
    const child = spawn(process.execPath, [CLI_PATH, ...args], {
      cwd: options.cwd ?? REPO_ROOT,
      env: options.env ?? cleanEnv(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    return new CliProcess(child);
  }

  /** Resolves once stdout (or stderr) contains `text`; rejects if the process exits first or after `timeoutMs`. */
  async waitForOutput(
    text: string,
    timeoutMs = 20_000,
    stream: "stdout" | "stderr" = "stdout",
  ): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let exited = false;
    void this.exited.then(() => {
      exited = true;
    });
    while (!this[stream].includes(text)) {
      if (exited)
        throw new Error(`the CLI exited before printing "${text}":\n${this.stdout}\n${this.stderr}`);
      if (Date.now() > deadline)
        throw new Error(`no "${text}" within ${timeoutMs} ms:\n${this.stdout}\n${this.stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  /** Sends `signal` and waits for the exit code; kills hard if it does not exit in time. */
  async stop(signal: NodeJS.Signals = "SIGTERM", timeoutMs = 10_000): Promise<number | null> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.child.exitCode;
    this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}
