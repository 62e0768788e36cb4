import { type ChildProcess, execFile, spawn, spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BUILT, CliProcess, cleanEnv, NOT_BUILT_MESSAGE, REPO_ROOT, runCliProcess } from "./cli-process";

if (!CLI_BUILT) console.warn(`skipping the CLI tests: ${NOT_BUILT_MESSAGE}`);

/** A command line run through `sh -c` as pasted, kept running (a worker). */
class ShellProcess {
  private readonly child: ChildProcess;
  private stderr = "";
  private readonly exited: Promise<void>;

  constructor(command: string, cwd: string) {
    this.child = spawn("sh", ["-c", `exec ${command}`], {
      cwd,
      env: cleanEnv(),
      stdio: ["ignore", "ignore", "pipe"],
    });
    this.child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      this.stderr += chunk;
    });
    this.exited = new Promise((resolve) => this.child.once("exit", () => resolve()));
  }

  async waitFor(text: string): Promise<void> {
    let exited = false;
    void this.exited.then(() => {
      exited = true;
    });
    const deadline = Date.now() + 20_000;
    while (!this.stderr.includes(text)) {
      if (exited || Date.now() > deadline) throw new Error(`no "${text}" from the worker:\n${this.stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
    await this.exited;
  }
}

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe.skipIf(!CLI_BUILT)("switchboard CLI against `switchboard up`", { timeout: 30_000 }, () => {
  let dir: string;
  let dataDir: string;
  let up: CliProcess;
  let url: string;
  let token: string;
  let example: string;
  /** Flags that point a client command at the test gateway (the token comes from the data dir). */
  let target: string[];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "switchboard-cli-"));
    dataDir = join(dir, "data");
    up = CliProcess.start(
      [
        "up",
        "--config",
        join(REPO_ROOT, "examples/switchboard.config.json5"),
        "--port",
        "0",
        "--data-dir",
        dataDir,
        "--log-level",
        "warn",
      ],
      { cwd: dir },
    );
    await up.waitForOutput("Ctrl-C stops it.");
    url = /URL\s+(ws:\/\/\S+)/.exec(up.stdout)![1]!;
    token = /Operator token\s+(\S+)/.exec(up.stdout)![1]!;
    example = /Try it in another terminal:\n\s+(.+)/.exec(up.stdout)![1]!;
    target = ["--url", url, "--data-dir", dataDir];
  }, 30_000);

  afterAll(async () => {
    await up?.stop("SIGKILL");
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("up prints the URL, the operator token, the agents and an example that works as printed", async () => {
    expect(url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    expect(token).toMatch(/^sb_op_/);
    expect((await readFile(join(dataDir, "operator-token"), "utf8")).trim()).toBe(token);
    expect(up.stdout).toMatch(/Agents\s+main \(scripted\), research \(scripted\)/);
    // One click opens the web UI signed in: the token rides in the fragment, never sent to the server.
    const port = new URL(url).port;
    expect(up.stdout).toContain(
      `Web UI          http://127.0.0.1:${port}/ui/#token=${encodeURIComponent(token)}`,
    );
    expect(example).toContain('send main "ping" --wait 10');
    expect(example).toContain(`--url ${url}`);
    // Run the example exactly as a user would paste it, from the directory `up` was started in.
    const pasted = spawnSync("sh", ["-c", example], {
      cwd: dir,
      env: cleanEnv(),
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(pasted.stderr).toBe("");
    expect(pasted.stdout).toBe("pong\n");
    expect(pasted.status).toBe(0);
  });

  it("send --wait prints the reply; --json gives the run's result", async () => {
    const json = await runCliProcess(["send", "main", "ping", "--wait", "10", "--json", ...target]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({
      sessionKey: "main",
      status: "ok",
      reply: "pong",
      runId: expect.any(String),
    });

    const noWait = await runCliProcess(["send", "main", "hello there", ...target]);
    expect(noWait.code).toBe(0);
    expect(noWait.stdout).toMatch(/^accepted: run [0-9a-f-]{36} on main\n$/);
  });

  it("sessions list prints a table, and JSON with --json; history shows the transcript", async () => {
    const table = await runCliProcess(["sessions", "list", ...target]);
    expect(table.code).toBe(0);
    const [header, ...rows] = table.stdout.trimEnd().split("\n");
    expect(header).toMatch(/^KEY\s+KIND\s+CHANNEL\s+TAINT\s+CLEARANCE\s+UPDATED\s+LABEL$/);
    expect(rows.some((row) => /^agent:main:main\s+main\s+/.test(row))).toBe(true);
    expect(table.stderr).toMatch(/\d+ sessions?/);

    const json = await runCliProcess(["sessions", "list", "--json", ...target]);
    const parsed = JSON.parse(json.stdout) as {
      status: string;
      sessions: Array<{ key: string; taint: string }>;
    };
    expect(parsed.status).toBe("ok");
    expect(parsed.sessions.map((row) => row.key)).toContain("agent:main:main");

    const history = await runCliProcess(["sessions", "history", "main", ...target]);
    expect(history.code).toBe(0);
    expect(history.stdout).toMatch(/user\s+PUBLIC\s+.*ping/);
    expect(history.stdout).toMatch(/assistant\s+PUBLIC\s+.*pong/);
  });

  it("spawn starts a sub-agent whose findings come back", async () => {
    const spawned = await runCliProcess([
      "spawn",
      "look up the weather",
      "--agent",
      "research",
      "--wait",
      "10",
      ...target,
    ]);
    expect(spawned.stderr).toMatch(/spawned agent:research:subagent:[0-9a-f-]{36}/);
    expect(spawned.stdout).toContain("Findings: sunny");
    expect(spawned.code).toBe(0);
  });

  it("exits 2 with the usage line on usage errors", async () => {
    const unknownCommand = await runCliProcess(["bogus"]);
    expect(unknownCommand.code).toBe(2);
    expect(unknownCommand.stderr).toContain('unknown command "bogus"');
    expect(unknownCommand.stderr).toContain("usage: switchboard <command>");

    const missing = await runCliProcess(["send", "main", ...target]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("missing <message>");
    expect(missing.stderr).toContain("usage: switchboard send <key> <message> [options]");

    const unknownFlag = await runCliProcess(["send", "main", "hi", "--wiat", "3", ...target]);
    expect(unknownFlag.code).toBe(2);
    expect(unknownFlag.stderr).toContain("unknown option --wiat");

    const badNumber = await runCliProcess(["send", "main", "hi", "--wait", "soon", ...target]);
    expect(badNumber.code).toBe(2);
    expect(badNumber.stderr).toContain('--wait: must be a number of seconds from 0 to 3600 (got "soon")');

    const badJson = await runCliProcess([
      "policy",
      "simulate",
      "--as",
      "main",
      "sessions_send",
      "{not json",
      ...target,
    ]);
    expect(badJson.code).toBe(2);
    expect(badJson.stderr).toContain("<json-args>: not valid JSON");

    const help = await runCliProcess(["send", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("usage: switchboard send <key> <message> [options]");
    expect(help.stdout).toContain("--wait N");
  });

  it("exits 3 when the gateway refuses: a wrong token, a forbidden delete, a spawn the policy forbids", async () => {
    const wrongToken = await runCliProcess([
      "sessions",
      "list",
      "--url",
      url,
      "--token",
      "not-the-operator-token",
    ]);
    expect(wrongToken.code).toBe(3);
    expect(wrongToken.stderr).toContain(`the gateway at ${url} refused the token from --token`);

    const deleteMain = await runCliProcess(["sessions", "delete", "main", ...target]);
    expect(deleteMain.code).toBe(3);
    expect(deleteMain.stderr).toContain("the main session cannot be deleted");

    // research may spawn only research (no allowAgents), so spawning main as research is refused.
    expect(
      (await runCliProcess(["send", "agent:research:main", "ping", "--wait", "10", ...target])).stdout,
    ).toBe("pong\n");
    const spawn = await runCliProcess([
      "spawn",
      "x",
      "--as",
      "agent:research:main",
      "--agent",
      "main",
      "--json",
      ...target,
    ]);
    expect(spawn.code).toBe(3);
    expect(JSON.parse(spawn.stdout)).toMatchObject({ status: "forbidden" });
    expect(spawn.stderr).toContain("spawn refused:");
  });

  it("exits 1 when the gateway cannot be reached", async () => {
    const port = await closedPort();
    const result = await runCliProcess([
      "sessions",
      "list",
      "--url",
      `ws://127.0.0.1:${port}`,
      "--token",
      "x",
      "--json",
    ]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`cannot reach the gateway at ws://127.0.0.1:${port}`);
    expect(JSON.parse(result.stdout)).toMatchObject({ ok: false, error: { code: "UNAVAILABLE" } });
  });

  it("audit verify reports an intact chain; policy simulate explains a decision", async () => {
    const verify = await runCliProcess(["audit", "verify", ...target]);
    expect(verify.code).toBe(0);
    expect(verify.stdout).toMatch(/^audit log intact: \d+ entr(y|ies) verified\n$/);
    const json = await runCliProcess(["audit", "verify", "--json", ...target]);
    expect(JSON.parse(json.stdout)).toMatchObject({ ok: true, entries: expect.any(Number) });

    const simulated = await runCliProcess([
      "policy",
      "simulate",
      "--as",
      "main",
      "sessions_history",
      '{"sessionKey":"agent:research:main"}',
      ...target,
    ]);
    expect(simulated.code).toBe(0);
    expect(simulated.stdout).toMatch(/^decision: ALLOW/);
    expect(simulated.stdout).toMatch(/taint:\s+PUBLIC → PUBLIC/);
    // A simulation that cannot be made fails with --json too (it exited 0 before session 23).
    const failed = await runCliProcess([
      "policy",
      "simulate",
      "--as",
      "main",
      "sessions_history",
      "{}",
      "--json",
      ...target,
    ]);
    expect(failed.code).toBe(1);
    expect(JSON.parse(failed.stdout)).toMatchObject({
      status: "error",
      error: expect.stringContaining("sessionKey"),
    });
  });

  it("doctor checks the data dir read-only, and fails on a missing one", async () => {
    const healthy = await runCliProcess(["doctor", "--data-dir", dataDir]);
    expect(healthy.code).toBe(0);
    expect(healthy.stdout).toContain(`data dir:  ${dataDir}`);
    expect(healthy.stdout).toMatch(/live-lock: data dir in use by pid \d+/);
    expect(healthy.stdout.trimEnd().split("\n").at(-1)).toBe("ok");

    const missing = await runCliProcess(["doctor", "--data-dir", join(dir, "nowhere"), "--json"]);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stdout)).toMatchObject({ ok: false, issues: [{ code: "missing-data-dir" }] });
  });

  it("tail prints live events, filtered, as JSON lines", async () => {
    const tail = CliProcess.start([
      "tail",
      "--session",
      "main",
      "--events",
      "run.ended",
      "--max",
      "1",
      "--json",
      ...target,
    ]);
    try {
      await tail.waitForOutput("listening on main", 20_000, "stderr");
      expect((await runCliProcess(["send", "main", "ping", ...target])).code).toBe(0);
      expect(await tail.exited).toBe(0);
      const lines = tail.stdout.trimEnd().split("\n");
      expect(lines).toHaveLength(1);
      expect(JSON.parse(lines[0]!)).toMatchObject({
        event: "run.ended",
        seq: expect.any(Number),
        payload: { sessionKey: "agent:main:main", status: "ok", reply: "pong" },
      });
    } finally {
      await tail.stop("SIGKILL");
    }
  });

  it("stops gracefully on SIGTERM", async () => {
    const code = await up.stop("SIGTERM");
    expect(code).toBe(0);
    expect(up.stderr).toContain("SIGTERM: shutting down…");
    expect(up.stderr).toContain("stopped");
  });
});

describe.skipIf(!CLI_BUILT)(
  "`switchboard gateway` with a separate `switchboard agent`",
  { timeout: 30_000 },
  () => {
    let dir: string;
    const processes: CliProcess[] = [];

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), "switchboard-cli-"));
    });

    afterAll(async () => {
      for (const child of processes) await child.stop("SIGKILL");
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("serves runs once a worker connects, and both stop on SIGINT", async () => {
      const dataDir = join(dir, "data");
      const gateway = CliProcess.start(
        ["gateway", "--port", "0", "--data-dir", dataDir, "--json", "--log-level", "silent"],
        { cwd: dir },
      );
      processes.push(gateway);
      await gateway.waitForOutput("\n");
      const details = JSON.parse(gateway.stdout) as {
        url: string;
        operatorToken: string;
        agents: unknown[];
        workerCommand: string;
      };
      expect(details.agents).toEqual([]);
      expect(details.workerCommand).toMatch(/ agent --url ws:\/\/127\.0\.0\.1:\d+ --data-dir data$/);
      const target = ["--url", details.url, "--data-dir", dataDir];

      // No worker yet: the run waits queued, so the send times out (exit 1) and says why.
      const queued = await runCliProcess(["send", "main", "ping", "--wait", "0.5", ...target]);
      expect(queued.code).toBe(1);
      expect(queued.stderr).toContain("no reply within 0.5s: run ");
      expect(queued.stderr).toContain(
        "is queued, no worker for agent main is connected, so its runs wait queued (start one: switchboard agent --agents main)",
      );
      const status = await runCliProcess(["sessions", "status", "main", ...target]);
      expect(status.code).toBe(0);
      expect(status.stdout).toMatch(/active run:\s+none: no worker for agent main is connected/);
      expect(status.stdout).toMatch(/queued runs:\s+1/);
      // An agent the config does not name says so too (until session 23 it read as a slow run).
      const ghost = await runCliProcess(["send", "agent:ghost:main", "ping", "--wait", "0.5", ...target]);
      expect(ghost.code).toBe(1);
      expect(ghost.stderr).toContain("no worker for agent ghost is connected");

      const agent = CliProcess.start(["agent", "--agents", "main", "--log-level", "silent", ...target], {
        cwd: dir,
      });
      processes.push(agent);
      await agent.waitForOutput("serving main", 20_000, "stderr");
      const answered = await runCliProcess(["send", "main", "ping", "--wait", "10", ...target]);
      expect(answered.stdout).toBe("pong\n");
      const served = await runCliProcess(["sessions", "status", "main", ...target]);
      expect(served.stdout).toMatch(/active run:\s+none\n/);

      agent.child.kill("SIGINT");
      gateway.child.kill("SIGINT");
      expect(await agent.exited).toBe(0);
      expect(await gateway.exited).toBe(0);
      expect(gateway.stderr).toContain("stopped");
    });

    it("prints a worker command before the try-it, and both work as printed", async () => {
      const gateway = CliProcess.start(
        [
          "gateway",
          "--config",
          join(REPO_ROOT, "examples/switchboard.config.json5"),
          "--port",
          "0",
          "--data-dir",
          join(dir, "banner-data"),
          "--log-level",
          "silent",
        ],
        { cwd: dir },
      );
      processes.push(gateway);
      await gateway.waitForOutput("Ctrl-C stops it.");
      expect(gateway.stdout).toMatch(
        /Agents\s+none in this process: runs wait queued until a worker for main, research connects/,
      );
      const workerLine = /Start a worker for the agents in another terminal:\n\s+(.+)/.exec(
        gateway.stdout,
      )![1]!;
      const example = /Then try it in a third terminal:\n\s+(.+)/.exec(gateway.stdout)![1]!;
      expect(workerLine).toContain(" agent --config ");
      expect(example).toContain('send main "ping" --wait 10');
      expect(gateway.stdout.indexOf(workerLine)).toBeLessThan(gateway.stdout.indexOf(example));

      // Paste both as a user would, from the directory the gateway was started in.
      const worker = new ShellProcess(workerLine, dir);
      try {
        await worker.waitFor("serving main, research");
        const pasted = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
          (resolve) => {
            execFile(
              "sh",
              ["-c", example],
              { cwd: dir, env: cleanEnv(), timeout: 20_000 },
              (error, stdout, stderr) =>
                resolve({
                  code: error ? (typeof error.code === "number" ? error.code : null) : 0,
                  stdout,
                  stderr,
                }),
            );
          },
        );
        expect(pasted.stderr).toBe("");
        expect(pasted.stdout).toBe("pong\n");
        expect(pasted.code).toBe(0);
      } finally {
        await worker.stop();
      }
    });
  },
);
