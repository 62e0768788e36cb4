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
