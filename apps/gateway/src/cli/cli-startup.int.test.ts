import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BUILT, CLI_PATH, cleanEnv, NOT_BUILT_MESSAGE, REPO_ROOT } from "./cli-process";

/**
 * A command loads what it uses: the gateway server, the stores, the reference agent and the MCP SDK
 * are imported by the commands that run them, so `--help` and the client commands start without
 * them (every CLI call paid ~0.2 s of imports for them). Checked on the built CLI, with a module
 * hook recording every module the process loads.
 */

const RECORDER = fileURLToPath(new URL("../../test/record-imports.mjs", import.meta.url));

/** Packages only the server side needs (the gateway's chunks have hashed names; these do not). */
const SERVER_ONLY = [
  "/packages/store-fs/",
  "/packages/tools/",
  "/packages/store-pg/dist/index.js",
  "/apps/agent/dist/index.js",
  "/@modelcontextprotocol/sdk/",
  "/prom-client/",
  "/node_modules/pg/",
];

let dir: string;
let runs = 0;

/** Runs the CLI; resolves to its exit code and the URLs of the modules it loaded. */
async function loaded(args: string[]): Promise<{ code: number | null; modules: string[] }> {
  const log = join(dir, `imports-${runs++}.log`);
  const code = await new Promise<number | null>((resolve) => {
    execFile(
      process.execPath,
      ["--import", RECORDER, CLI_PATH, ...args],
      { cwd: REPO_ROOT, env: cleanEnv({ SWITCHBOARD_TEST_IMPORTS_LOG: log }), timeout: 30_000 },
      (error) => resolve(error ? (typeof error.code === "number" ? error.code : null) : 0),
    );
  });
  const modules = (await readFile(log, "utf8").catch(() => "")).split("\n").filter(Boolean);
  return { code, modules };
}

const serverModules = (modules: string[]) =>
  modules.filter((url) => SERVER_ONLY.some((part) => url.includes(part)));

if (!CLI_BUILT) console.warn(`skipping the CLI start-up tests: ${NOT_BUILT_MESSAGE}`);

describe.skipIf(!CLI_BUILT)("switchboard CLI start-up", { timeout: 30_000 }, () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "switchboard-cli-startup-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("answers --help and a client command without loading the server, the stores or the agent", async () => {
    for (const args of [
      ["--help"],
      ["sessions", "list", "--help"],
      ["mcp", "--help"],
      // Unreachable: the client runs and fails, and still needs nothing of the server.
      ["sessions", "list", "--url", "ws://127.0.0.1:9", "--token", "t"],
    ]) {
      const { code, modules } = await loaded(args);
      expect({ args, code: code === 0 || code === 1 }).toEqual({ args, code: true });
      // The recorder saw the CLI itself and its client: the list below is not empty by accident.
      expect(modules.some((url) => url.includes("/packages/client-sdk/"))).toBe(true);
      expect({ args, server: serverModules(modules) }).toEqual({ args, server: [] });
    }
  });

  it("loads the store for the command that uses it", async () => {
    const { code, modules } = await loaded(["doctor", "--data-dir", join(dir, "empty"), "--json"]);
    expect(code).not.toBeNull();
    expect(modules.some((url) => url.includes("/packages/store-fs/"))).toBe(true);
  });
});
