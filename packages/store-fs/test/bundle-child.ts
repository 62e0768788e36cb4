import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/**
 * Bundles `test/<name>.ts` (a crash-test child) with the store's and core's sources into one ESM
 * file in `outDir`, so a child process runs plain JS and can be killed at any moment.
 */
export async function bundleChild(name: string, outDir: string): Promise<string> {
  const outfile = path.join(outDir, `${name}.mjs`);
  await build({
    entryPoints: [path.join(packageRoot, "test", `${name}.ts`)],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outfile,
    alias: { "@switchboard/core": path.resolve(packageRoot, "..", "core", "src", "index.ts") },
    logLevel: "error",
  });
  return outfile;
}

/**
 * Runs a bundled child with `args`, killing it with SIGKILL after `killAfterMs` unless it ended
 * first (it may also kill itself at a chosen point); resolves with its output and the signal.
 */
export function runChildUntilKilled(
  script: string,
  args: string[],
  killAfterMs: number,
): Promise<{ stdout: string; stderr: string; signal: NodeJS.Signals | null }> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
    child.on("close", (_code, signal) => {
      clearTimeout(timer);
      resolve({ stdout, stderr, signal });
    });
  });
}
