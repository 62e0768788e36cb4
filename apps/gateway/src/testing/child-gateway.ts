import { type ChildProcess, spawn } from "node:child_process";

/** A gateway in a child process, started by a test script that prints `{url, token}` on its first line. */
export interface ChildGateway {
  process: ChildProcess;
  url: string;
  token: string;
  exited: Promise<void>;
}

/**
 * Starts `script` with `args` in a child Node process (so a test can kill -9 it) and resolves once
 * the script printed where it listens. Every child started here is in `children` until it exits,
 * so `afterAll` can kill what is left.
 */
export function startChildGateway(
  script: string,
  args: string[],
  children: Set<ChildProcess>,
): Promise<ChildGateway> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  void exited.then(() => children.delete(child));
  let stdout = "";
  let stderr = "";
  child.stderr!.on("data", (chunk) => {
    stderr += String(chunk);
  });
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`child gateway did not start within 15 s; stderr: ${stderr}`)),
      15_000,
    );
    child.stdout!.on("data", (chunk) => {
      stdout += String(chunk);
      const newline = stdout.indexOf("\n");
      if (newline < 0) return;
      clearTimeout(timer);
      const { url, token } = JSON.parse(stdout.slice(0, newline)) as { url: string; token: string };
      resolvePromise({ process: child, url, token, exited });
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(`child gateway exited before starting (code ${code}, signal ${signal}); stderr: ${stderr}`),
      );
    });
  });
}
