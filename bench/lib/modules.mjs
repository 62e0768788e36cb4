// Where the benchmarks find the workspace packages: their built `dist` (run `turbo run build` first;
// `pnpm bench` does). `bench/` is not a workspace package, so third-party modules (ws) are resolved
// from the gateway's own dependencies.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

export const ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const BENCH_DIR = fileURLToPath(new URL("../", import.meta.url));

const dist = {
  core: `${ROOT}packages/core/dist/index.js`,
  storeFs: `${ROOT}packages/store-fs/dist/index.js`,
  gateway: `${ROOT}apps/gateway/dist/index.js`,
};

function requireBuilt(path, name) {
  if (!existsSync(path)) {
    throw new Error(
      `${name} is not built (${path} is missing): run \`npx -y pnpm@10.34.8 bench\` or \`npx turbo run build\``,
    );
  }
  return import(pathToFileURL(path).href);
}

export const loadCore = () => requireBuilt(dist.core, "@switchboard/core");
export const loadStoreFs = () => requireBuilt(dist.storeFs, "@switchboard/store-fs");

export async function loadGateway() {
  const module = await requireBuilt(dist.gateway, "@switchboard/gateway");
  if (typeof module.Gateway?.start !== "function") {
    throw new Error(
      `${dist.gateway} does not export Gateway: apps/gateway/src/index.ts must export it (then rebuild)`,
    );
  }
  return module;
}

const gatewayRequire = createRequire(`${ROOT}apps/gateway/package.json`);
/** The `ws` package the gateway itself uses. */
export const ws = gatewayRequire("ws");
/** Absolute path of that `ws` package (for `require` in a `node -e` child). */
export const wsPath = gatewayRequire.resolve("ws");

/**
 * A `BENCH_*` setting from the environment. These configure the runner only (turbo never runs it,
 * so they are not build inputs to declare in turbo.json).
 */
export const setting = (name) => process.env[name];
