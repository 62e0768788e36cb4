import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BUILT, CLI_PATH, CliProcess, cleanEnv, NOT_BUILT_MESSAGE, runCliProcess } from "./cli-process";

/**
 * Hostile input for the `switchboard` CLI and config loading: broken config files, odd flags and
 * data dirs in odd states. The "defects fixed" tests guard behaviour that was once wrong; the
 * others guard behaviour that held up.
 */

if (!CLI_BUILT) console.warn(`skipping the hostile CLI tests: ${NOT_BUILT_MESSAGE}`);

let dir: string;
let counter = 0;

/** A fresh directory under the test's temp dir. */
async function fresh(name: string): Promise<string> {
  const path = join(dir, `${name}-${counter++}`);
  await mkdir(path, { recursive: true });
  return path;
}

async function configFile(name: string, text: string): Promise<string> {
  const path = join(await fresh("cfg"), name);
  await writeFile(path, text);
  return path;
}

/** A data dir as a first start leaves it (VERSION, secrets, store dirs), gateway stopped. */
async function initialisedDataDir(): Promise<string> {
  const dataDir = join(await fresh("data"), "d");
  const first = await startGateway(["--data-dir", dataDir]);
  expect(first.started).toBe(true);
  return dataDir;
}

const STACK = /\n\s+at .+\(?.*:\d+:\d+\)?/;

interface Settled {
  /** The gateway printed its connection details (it is up). */
  started: boolean;
  /** Exit code when it exited by itself; undefined when it was up and had to be stopped. */
  code: number | null | undefined;
  stdout: string;
  stderr: string;
}

/**
 * Runs `switchboard gateway --port 0 --json …` until it either exits or prints its connection
 * details; a gateway that came up is stopped (SIGTERM) so nothing outlives the test.
 */
async function startGateway(args: string[], cwd?: string, withLogs = false): Promise<Settled> {
  const child = CliProcess.start(
    ["gateway", "--port", "0", "--json", "--log-level", withLogs ? "warn" : "silent", ...args],
    { cwd: cwd ?? dir, env: cleanEnv() },
  );
  let exitCode: number | null | undefined;
  let exited = false;
  void child.exited.then((code) => {
    exited = true;
    exitCode = code;
  });
  const deadline = Date.now() + 8_000;
  while (!exited && !child.stdout.includes('"operatorToken"') && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  if (exited) return { started: false, code: exitCode, stdout: child.stdout, stderr: child.stderr };
  const started = child.stdout.includes('"operatorToken"');
  await child.stop("SIGTERM", 5_000);
  return { started, code: undefined, stdout: child.stdout, stderr: child.stderr };
}

/** `switchboard gateway --config FILE` on a config that must be refused: never left running. */
function gatewayWithConfig(config: string, extra: string[] = []) {
  return runCliProcess(
    ["gateway", "--config", config, "--port", "0", "--data-dir", join(dir, "never-used"), ...extra],
    { cwd: dir, timeoutMs: 8_000 },
  );
}

function doctor(dataDir: string, extra: string[] = []) {
  return runCliProcess(["doctor", "--data-dir", dataDir, ...extra], { cwd: dir, timeoutMs: 10_000 });
}

describe.skipIf(!CLI_BUILT)("hostile input to the switchboard CLI", { timeout: 20_000 }, () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "switchboard-cli-hostile-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  describe.concurrent("config files that held up", () => {
    it("an unknown key, a wrong type, a wrong enum and out-of-range numbers: exit 2, every issue named", async () => {
      const config = await configFile(
        "bad.json5",
        `{ gateway: { prot: 1, port: -1, limits: { heartbeatMs: 1e12 } },
           logging: { level: "INFO", pretty: "yes" },
           agents: { list: [{ id: "main", subagents: { maxSpawnDepth: 99 } }] } }`,
      );
      const result = await gatewayWithConfig(config, ["--json"]);
      expect(result.code).toBe(2);
      expect(result.stderr).not.toMatch(STACK);
      const body = JSON.parse(result.stdout) as {
        ok: boolean;
        error: { code: string; issues: { path: string; message: string }[] };
      };
      expect(body.ok).toBe(false);
      expect(body.error.code).toBe("INVALID_CONFIG");
      const paths = body.error.issues.map((issue) => issue.path).sort();
      expect(paths).toEqual(
        [
          "agents.list[0].subagents.maxSpawnDepth",
          "gateway.limits.heartbeatMs",
          "gateway.port",
          "gateway.prot",
          "logging.level",
          "logging.pretty",
        ].sort(),
      );
      expect(result.stderr).toContain('unknown key (did you mean "port"?)');
      expect(result.stderr).toContain(config);
    });

    it("non-finite and non-integer numbers, a string port, a top-level list: refused", async () => {
      for (const text of [
        "{ gateway: { port: Infinity } }",
        "{ gateway: { port: NaN } }",
        "{ gateway: { port: 1e400 } }",
        '{ gateway: { port: "80" } }',
        "{ gateway: { port: 80.5 } }",
        "[]",
      ]) {
        const result = await gatewayWithConfig(await configFile("c.json5", text));
        expect({ text, code: result.code }).toEqual({ text, code: 2 });
        expect(result.stderr).not.toMatch(STACK);
      }
    });

    it("__proto__ and constructor keys are unknown keys, not silently merged", async () => {
      for (const text of [
        '{ "__proto__": { "logging": { "level": "debug" } } }',
        "{ gateway: { __proto__: { bogus: 1 } } }",
        "{ constructor: 1 }",
      ]) {
        const result = await gatewayWithConfig(await configFile("p.json5", text));
        expect({ text, code: result.code }).toEqual({ text, code: 2 });
        expect(result.stderr).toContain("unknown key");
      }
    });

    it("JSON5 and YAML syntax errors name the file, line and column; a YAML alias bomb is refused", async () => {
      const json5 = await configFile("broken.json5", "{\n  gateway: { port: 1,, }\n}");
      const r1 = await gatewayWithConfig(json5);
      expect(r1.code).toBe(2);
      expect(r1.stderr).toContain(`config file ${json5} is not valid JSON5 at line 2`);

      const yaml = await configFile("broken.yaml", "gateway:\n\tport: 1\n");
      const r2 = await gatewayWithConfig(yaml);
      expect(r2.code).toBe(2);
      expect(r2.stderr).toContain(`config file ${yaml} is not valid YAML at line 2, column 1`);

      const lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]'];
      for (let i = 1; i < 9; i++) {
        const name = String.fromCharCode(97 + i);
        const prev = String.fromCharCode(96 + i);
        lines.push(`${name}: &${name} [${Array(9).fill(`*${prev}`).join(",")}]`);
      }
      const r3 = await gatewayWithConfig(await configFile("bomb.yaml", `${lines.join("\n")}\n`));
      expect(r3.code).toBe(2);
      expect(r3.stderr).toContain("not valid YAML");

      const r4 = await gatewayWithConfig(await configFile("dup.yaml", "gateway:\n  port: 1\n  port: 2\n"));
      expect(r4.code).toBe(2);
      expect(r4.stderr).toContain("Map keys must be unique");

      // JSON5 would keep the second `gateway` without a word; it is refused like YAML's.
      const dup = await configFile("dup.json5", "{\n  gateway: { port: 1 },\n  gateway: { port: 2 },\n}\n");
      const r5 = await gatewayWithConfig(dup);
      expect(r5.code).toBe(2);
      expect(r5.stderr).toContain(
        `config file ${dup} is not valid JSON5 at line 3, column 3: duplicate key "gateway"`,
      );
    });

    it("a config path that is a directory, missing, or has an unknown extension: exit 2 naming it", async () => {
      const asDir = join(await fresh("cfgdir"), "switchboard.config.json5");
      await mkdir(asDir);
      const r1 = await gatewayWithConfig(asDir);
      expect(r1.code).toBe(2);
      expect(r1.stderr).toContain(`cannot read config file ${asDir}: it is a directory`);

      const missing = join(dir, "nope.json5");
      const r2 = await runCliProcess(["gateway", "--port", "0"], {
        cwd: dir,
        env: cleanEnv({ SWITCHBOARD_CONFIG: missing }),
        timeoutMs: 8_000,
      });
      expect(r2.code).toBe(2);
      expect(r2.stderr).toContain(`${missing}: no such file`);

      const conf = await configFile("switchboard.conf", "{}");
      const r3 = await gatewayWithConfig(conf);
      expect(r3.code).toBe(2);
      expect(r3.stderr).toContain('unsupported extension ".conf"');
    });

    it("a scripted rules file that is missing or a directory: `up` exits 2 and releases the data dir", async () => {
      const base = await fresh("rules");
      await mkdir(join(base, "rules.yaml"));
      const config = join(base, "c.json5");
      await writeFile(
        config,
        '{ agents: { list: [{ id: "main", model: { provider: "scripted", rules: "./rules.yaml" } }] } }',
      );
      const dataDir = join(base, "data");
      const result = await runCliProcess(
        ["up", "--config", config, "--port", "0", "--data-dir", dataDir, "--log-level", "silent"],
        { cwd: base, timeoutMs: 10_000 },
      );
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(join(base, "rules.yaml"));
      expect(existsSync(join(dataDir, "LOCK"))).toBe(false);
    });
  });

  describe.concurrent("flags that held up", () => {
    it("out-of-range, fractional and blank numbers, and unknown options, are usage errors (exit 2)", async () => {
      for (const args of [
        ["gateway", "--port", "65536"],
        ["gateway", "--port", "1.5"],
        ["gateway", "--port", " "],
        ["gateway", "--port=-1"],
        ["gateway", "--log-level", "loud", "--port", "0"],
        ["gateway", "--store", "mysql://u:secret@h/db"],
        ["sessions", "list", "--limit", "0", "--url", "ws://127.0.0.1:9", "--token", "x".repeat(20)],
        ["send", "main", "hi", "--wait=-1", "--url", "ws://127.0.0.1:9", "--token", "x".repeat(20)],
        ["sessions", "list", "--limt", "3"],
        ["frobnicate"],
        ["sessions"],
      ]) {
        const result = await runCliProcess(args, { cwd: dir, timeoutMs: 8_000 });
        expect({ args, code: result.code }).toEqual({ args, code: 2 });
        expect(result.stderr).not.toMatch(STACK);
        // The password of a refused --store URL is never echoed.
        expect(result.stderr).not.toContain("secret");
      }
      // Eleven CLI processes one after another: ~2 s each on a slow, loaded machine.
    }, 90_000);
  });

  describe.concurrent("data dirs that held up", () => {
    it("a file where the data dir should be: exit 1 naming the file and the fix", async () => {
      const file = join(await fresh("blocker"), "afile");
      await writeFile(file, "x");
      for (const dataDir of [file, join(file, "sub")]) {
        const result = await startGateway(["--data-dir", dataDir]);
        expect(result.started).toBe(false);
        expect(result.code).toBe(1);
        expect(result.stderr).toContain(`${file} is a file, not a directory`);
      }
    });

    it("a store directory replaced by a file: start refuses naming it", async () => {
      const dataDir = await initialisedDataDir();
      await rm(join(dataDir, "transcripts"), { recursive: true });
      await writeFile(join(dataDir, "transcripts"), "x");
      const result = await startGateway(["--data-dir", dataDir]);
      expect(result.started).toBe(false);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`${join(dataDir, "transcripts")} is a file, not a directory`);
    });

    it("a data dir held by a live gateway: the second exits 1 with `data dir in use by pid N`", async () => {
      const dataDir = join(await fresh("locked"), "d");
      const first = CliProcess.start(
        ["gateway", "--port", "0", "--json", "--log-level", "silent", "--data-dir", dataDir],
        { cwd: dir },
      );
      try {
        await first.waitForOutput('"operatorToken"', 8_000);
        const second = await startGateway(["--data-dir", dataDir]);
        expect(second.started).toBe(false);
        expect(second.code).toBe(1);
        expect(second.stderr).toMatch(/data dir in use by pid \d+/);
        const checked = await doctor(dataDir);
        expect(checked.code).toBe(0);
        expect(checked.stdout).toContain("live-lock");
      } finally {
        await first.stop();
      }
    });

    it("a store format newer than this build: start exits 1 and doctor reports it", async () => {
      const dataDir = await initialisedDataDir();
      await writeFile(
        join(dataDir, "VERSION"),
        `${JSON.stringify({ format: "switchboard-file-store", version: 99 })}\n`,
      );
      const result = await startGateway(["--data-dir", dataDir]);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain("newer than this Switchboard supports");
      const checked = await doctor(dataDir);
      expect(checked.code).toBe(1);
      expect(checked.stdout).toContain("unsupported-version");
    });
  });

  describe.concurrent("defects fixed", () => {
    it("output into a closed pipe (`switchboard doctor | head -1`) ends quietly, without an EPIPE stack trace", async () => {
      const dataDir = await fresh("epipe");
      const child = spawn(process.execPath, [CLI_PATH, "doctor", "--data-dir", dataDir], {
        cwd: dir,
        env: cleanEnv(),
        stdio: ["ignore", "pipe", "pipe"],
      });
      // The reader goes away before the CLI writes, as `head` does after its first lines.
      child.stdout!.destroy();
      let stderr = "";
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
        stderr += chunk;
      });
      await new Promise((resolve) => child.once("close", resolve));
      expect(stderr).not.toContain("Unhandled 'error' event");
      expect(stderr).not.toMatch(STACK);
    });

    it('`--data-dir ""` is a usage error (exit 2) and creates nothing in the working directory', async () => {
      const cwd = await fresh("cwd-datadir");
      const result = await startGateway(["--data-dir", ""], cwd);
      const created = await readdir(cwd);
      expect({ started: result.started, code: result.code, created }).toEqual({
        started: false,
        code: 2,
        created: [],
      });
    });

    it('`--host ""` is a usage error (exit 2), as the config refuses an empty host', async () => {
      const result = await startGateway(["--host", "", "--data-dir", join(await fresh("host"), "d")]);
      expect(result.stdout).not.toContain('"url":"ws://:');
      expect({ started: result.started, code: result.code }).toEqual({ started: false, code: 2 });
    });

    it("an unresolvable gateway host: exit 1 naming the host it cannot listen on and the setting to fix", async () => {
      const config = await configFile("host.json5", '{ gateway: { host: "256.1.1.1" } }');
      const result = await startGateway(["--config", config, "--data-dir", join(await fresh("h"), "d")]);
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/cannot listen on 256\.1\.1\.1:0/);
    });

    it("an empty operator-token file: the gateway refuses to start (exit 1) naming the file", async () => {
      const dataDir = await initialisedDataDir();
      await writeFile(join(dataDir, "operator-token"), "", { mode: 0o600 });
      const result = await startGateway(["--data-dir", dataDir]);
      expect(result.stdout).not.toContain('"operatorToken":""');
      expect(result.started).toBe(false);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(join(dataDir, "operator-token"));
    });

    it("a truncated audit.key: start fails with exit 1 (damaged data dir) naming the file", async () => {
      const dataDir = await initialisedDataDir();
      await writeFile(join(dataDir, "audit.key"), "short", { mode: 0o600 });
      const result = await startGateway(["--data-dir", dataDir]);
      expect(result.started).toBe(false);
      // README: a damaged data dir is exit 1; 2 is for usage and config errors.
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(join(dataDir, "audit.key"));
    });

    it("a directory where LOCK, VERSION or a secret file belongs: start fails naming the file", async () => {
      const dataDir = await initialisedDataDir();
      const outcomes: Record<string, string> = {};
      for (const name of ["LOCK", "VERSION", "operator-token", "audit.key"]) {
        const copy = join(await fresh(`eisdir-${name}`), "d");
        await cp(dataDir, copy, { recursive: true });
        await rm(join(copy, name), { force: true });
        await mkdir(join(copy, name));
        const result = await startGateway(["--data-dir", copy]);
        outcomes[name] = result.stderr.includes(join(copy, name)) ? "named" : result.stderr.trim();
      }
      expect(outcomes).toEqual({
        LOCK: "named",
        VERSION: "named",
        "operator-token": "named",
        "audit.key": "named",
      });
    });

    it("doctor reports damaged secrets (empty operator-token, truncated audit.key) and exits 1", async () => {
      const dataDir = await initialisedDataDir();
      await writeFile(join(dataDir, "operator-token"), "", { mode: 0o600 });
      await writeFile(join(dataDir, "audit.key"), "short", { mode: 0o600 });
      const result = await doctor(dataDir);
      expect(result.stdout).not.toMatch(/\nok\n?$/);
      expect(result.code).toBe(1);
    });

    it("doctor reports `tmp` being a file and LOCK being a directory, agreeing with the refusing gateway", async () => {
      const verdicts: Record<string, { doctor: number | null; gatewayStarted: boolean }> = {};
      for (const damage of ["tmp-is-a-file", "LOCK-is-a-directory"]) {
        const dataDir = await initialisedDataDir();
        if (damage === "tmp-is-a-file") {
          await rm(join(dataDir, "tmp"), { recursive: true });
          await writeFile(join(dataDir, "tmp"), "x");
        } else {
          await mkdir(join(dataDir, "LOCK"));
        }
        const checked = await doctor(dataDir);
        const started = await startGateway(["--data-dir", dataDir]);
        verdicts[damage] = { doctor: checked.code, gatewayStarted: started.started };
      }
      // Whatever doctor says must agree with what start does: a refusing gateway is not "ok".
      expect(verdicts).toEqual({
        "tmp-is-a-file": { doctor: 1, gatewayStarted: false },
        "LOCK-is-a-directory": { doctor: 1, gatewayStarted: false },
      });
    });

    it("doctor reports `archive` (or `transcripts`, `sessions`, `audit`) being a file as an issue with its path", async () => {
      const dataDir = await initialisedDataDir();
      await rm(join(dataDir, "archive"), { recursive: true });
      await writeFile(join(dataDir, "archive"), "x");
      const result = await doctor(dataDir, ["--json"]);
      expect(result.code).toBe(1);
      const report = JSON.parse(result.stdout) as {
        ok?: boolean;
        issues?: { path?: string; fix?: string }[];
        error?: unknown;
      };
      // A doctor report (ok: false, an issue with the path and a fix), not `{ok:false, error:{code:"ENOTDIR"}}`.
      expect(report.error).toBeUndefined();
      expect(report.issues?.some((issue) => issue.path === join(dataDir, "archive"))).toBe(true);
    });

    it("a store VERSION of -1 is refused: doctor exits 1 and the gateway does not start", async () => {
      const dataDir = await initialisedDataDir();
      await writeFile(
        join(dataDir, "VERSION"),
        `${JSON.stringify({ format: "switchboard-file-store", version: -1 })}\n`,
      );
      const checked = await doctor(dataDir);
      expect(checked.code).toBe(1);
      const started = await startGateway(["--data-dir", dataDir]);
      expect({ started: started.started, code: started.code }).toEqual({ started: false, code: 1 });
    });

    it("numeric flags take decimal spellings only: `--limit 0x10` is a usage error (exit 2)", async () => {
      const result = await runCliProcess(
        ["sessions", "list", "--limit", "0x10", "--url", "ws://127.0.0.1:9", "--token", "x".repeat(20)],
        { cwd: dir, timeoutMs: 8_000 },
      );
      // It used to be taken as 16, and the command went on to fail connecting (exit 1).
      expect(result.code).toBe(2);
      expect(result.stderr).toContain("--limit");
      const port = await runCliProcess(["gateway", "--port", "1e3"], { cwd: dir, timeoutMs: 8_000 });
      expect(port.code).toBe(2);
      expect(port.stderr).toContain("--port");
    });
  });
});
