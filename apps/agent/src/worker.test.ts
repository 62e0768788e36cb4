import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FAKE_TOKENS, FakeGateway, type FakeRun } from "@switchboard/client/testing";
import { parseConfig } from "@switchboard/core";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { parseAgentCliArgs, runAgentCli } from "./agent-cli";
import { EXIT } from "./exit-codes";
import { servedAgents, startAgentWorker } from "./worker";

const silent = pino({ level: "silent" });
let fake: FakeGateway;
let dir: string;

beforeEach(async () => {
  fake = await FakeGateway.start();
  dir = await mkdtemp(join(tmpdir(), "switchboard-agent-"));
});
afterEach(async () => {
  await fake.close();
  await rm(dir, { recursive: true, force: true });
});

function ended(run: FakeRun): Promise<FakeRun> {
  return fake.waitFor(() => (run.status === "queued" || run.status === "running" ? undefined : run));
}

function output() {
  const text: string[] = [];
  return { text, write: (chunk: string) => void text.push(chunk), toString: () => text.join("") };
}

describe("servedAgents", () => {
  const config = parseConfig({ agents: { list: [{ id: "main", default: true }, { id: "research" }] } });

  it("serves every configured agent by default and normalises requested ids", () => {
    expect(servedAgents(config)).toEqual(["main", "research"]);
    expect(servedAgents(config, ["Research", "research"])).toEqual(["research"]);
    expect(servedAgents(parseConfig({ agents: { list: [] } }))).toEqual(["main"]);
  });

  it("refuses ids that are not configured or not valid, naming them", () => {
    expect(() => servedAgents(config, ["main", "ghost"])).toThrow(
      'agents: "ghost" is not configured (configured: main, research)',
    );
    expect(() => servedAgents(config, ["no spaces"])).toThrow(/agents: agent id "no spaces" must match/);
    expect(() => servedAgents(config, [])).toThrow("agents: name at least one agent id");
  });
});

describe("startAgentWorker", () => {
  it("runs assigned runs through each agent's own model and reports the reply", async () => {
    const config = parseConfig({
      agents: {
        list: [
          { id: "main", default: true },
          {
            id: "research",
            model: { provider: "scripted", rules: [{ when: "^(.+)$", reply: "researched $1" }] },
          },
        ],
      },
    });
    const worker = await startAgentWorker({
      url: fake.url,
      token: FAKE_TOKENS.agent,
      config,
      logger: silent,
    });
    try {
      expect(fake.connections().find((connection) => connection.role === "agent")?.agents).toEqual([
        "main",
        "research",
      ]);
      const ping = fake.startRun("agent:main:main", "ping");
      const topic = fake.startRun("agent:research:main", "tides");
      expect(await ended(ping)).toMatchObject({ status: "ok", reply: "pong" });
      expect(await ended(topic)).toMatchObject({ status: "ok", reply: "researched tides" });
    } finally {
      await worker.stop();
    }
    expect(worker.client.state).toBe("closed");
    await worker.closed;
  });

  it("runs with the model a run names (run.assigned.model): an object is built once, a name on a scripted agent keeps its own", async () => {
    const config = parseConfig({ agents: { list: [{ id: "main", default: true }] } });
    const worker = await startAgentWorker({
      url: fake.url,
      token: FAKE_TOKENS.agent,
      config,
      logger: silent,
    });
    try {
      const named = { provider: "scripted" as const, rules: [{ when: "^(.+)$", reply: "child says $1" }] };
      const first = fake.startRun("agent:main:subagent:a", "hi", undefined, { model: named });
      const second = fake.startRun("agent:main:subagent:b", "again", undefined, { model: named });
      const own = fake.startRun("agent:main:main", "ping", undefined, { model: "gpt-4o-mini" });
      expect(await ended(first)).toMatchObject({ status: "ok", reply: "child says hi" });
      expect(await ended(second)).toMatchObject({ status: "ok", reply: "child says again" });
      expect(await ended(own)).toMatchObject({ status: "ok", reply: "pong" });
    } finally {
      await worker.stop();
    }
  });

  it("fails a run whose model has no matching rule with the model's error", async () => {
    const config = parseConfig({
      agents: {
        list: [
          { id: "main", model: { provider: "scripted", rules: [{ when: "^only this$", reply: "ok" }] } },
        ],
      },
    });
    const worker = await startAgentWorker({ url: fake.url, token: FAKE_TOKENS.agent, config });
    try {
      expect(await ended(fake.startRun("agent:main:main", "something else"))).toMatchObject({
        status: "error",
        error: "no scripted rule matched",
      });
    } finally {
      await worker.stop();
    }
  });

  it("with waitForGateway, keeps trying until the gateway comes up", async () => {
    const late = await FakeGateway.start();
    const port = Number(new URL(late.url).port);
    await late.close();
    const starting = startAgentWorker({
      url: late.url,
      token: FAKE_TOKENS.agent,
      config: parseConfig({}),
      waitForGateway: true,
      clientOptions: { reconnect: { initialDelayMs: 5, maxDelayMs: 20 } },
    });
    const revived = await FakeGateway.start({ port });
    try {
      const worker = await starting;
      expect(
        await revived.waitFor(() => revived.connections().find((connection) => connection.role === "agent")),
      ).toBeDefined();
      const run = revived.startRun("agent:main:main", "ping");
      expect(await revived.waitFor(() => (run.status === "ok" ? run : undefined))).toMatchObject({
        reply: "pong",
      });
      await worker.stop();
    } finally {
      await revived.close();
    }
  });

  it("rejects when the gateway cannot be reached", async () => {
    const config = parseConfig({});
    await expect(
      startAgentWorker({ url: "ws://127.0.0.1:1", token: FAKE_TOKENS.agent, config }),
    ).rejects.toMatchObject({
      code: "UNAVAILABLE",
    });
  });
});

describe("switchboard-agent CLI", () => {
  it("parses flags and the SWITCHBOARD_TOKEN / SWITCHBOARD_CONFIG environment", () => {
    expect(
      parseAgentCliArgs(["--agents", "main, research", "--concurrency", "2", "--wait"], {
        SWITCHBOARD_TOKEN: "t",
        SWITCHBOARD_CONFIG: "c.json5",
      }),
    ).toEqual({
      token: "t",
      configPath: "c.json5",
      agents: ["main", "research"],
      concurrency: 2,
      wait: true,
    });
    expect(parseAgentCliArgs(["--help"], {})).toBeUndefined();
  });

  it.each([
    [["--url", "ws://x"], "--token is required"],
    [["--token", "t", "--bogus"], "Unknown option '--bogus'"],
    [["--token", "t", "--concurrency", "0"], "--concurrency: must be an integer from 1 to 1024"],
    [["--token", "t", "--url", "http://x"], "--url: must be a ws:// or wss:// URL"],
    [["--token", "t", "--agents", ","], "--agents: name at least one agent id"],
    [["--token", "t", "--log-level", "loud"], "--log-level: must be one of"],
  ])("exits 2 with a usage error for %j", async (argv, message) => {
    const stderr = output();
    expect(await runAgentCli(argv, { env: {}, stderr, logger: silent })).toBe(2);
    expect(stderr.toString()).toContain(message);
    expect(stderr.toString()).toContain("Usage: switchboard-agent");
  });

  it("exits 2 for a config problem and for an agent that is not configured", async () => {
    await writeFile(join(dir, "bad.json5"), "{ agents: { list: [{ id: 'main', timeoutSeconds: -1 }] } }");
    const stderr = output();
    expect(
      await runAgentCli(["--token", "t", "--config", join(dir, "bad.json5")], {
        env: {},
        stderr,
        logger: silent,
      }),
    ).toBe(2);
    expect(stderr.toString()).toContain("agents.list[0].timeoutSeconds");

    const unknown = output();
    const code = await runAgentCli(["--token", "t", "--url", fake.url, "--agents", "ghost"], {
      env: {},
      stderr: unknown,
      logger: silent,
    });
    expect(code).toBe(2);
    expect(unknown.toString()).toContain('agents: "ghost" is not configured');
  });

  it("uses the one exit-code table of every Switchboard binary (the switchboard CLI imports it)", () => {
    expect(EXIT).toEqual({ ok: 0, failure: 1, usage: 2, refused: 3 });
  });

  it("exits 3 when the gateway refuses the token", async () => {
    const stderr = output();
    const code = await runAgentCli(["--token", "wrong", "--url", fake.url], {
      env: {},
      stderr,
      logger: silent,
    });
    expect(code).toBe(3);
    expect(stderr.toString()).toContain("the gateway refused the worker: unknown token");
    // Waiting for the gateway does not wait out a refusal.
    const waiting = output();
    expect(
      await runAgentCli(["--token", "wrong", "--url", fake.url, "--wait"], {
        env: {},
        stderr: waiting,
        logger: silent,
      }),
    ).toBe(3);
  });

  it("exits 3 when the token is refused on a later reconnect", async () => {
    await fake.close();
    const tokens: Record<string, "agent"> = { "worker-token": "agent" };
    fake = await FakeGateway.start({ tokens });
    const stderr = output();
    const code = await runAgentCli(["--token", "worker-token", "--url", fake.url], {
      env: {},
      stderr,
      logger: silent,
      untilStopped: () => {
        delete tokens["worker-token"];
        fake.dropConnections();
        return new Promise(() => {});
      },
    });
    expect(code).toBe(3);
    expect(stderr.toString()).toContain("the gateway refused the worker");
  });

  it("exits 1 when the gateway is unreachable", async () => {
    const stderr = output();
    expect(
      await runAgentCli(["--token", "t", "--url", "ws://127.0.0.1:1"], { env: {}, stderr, logger: silent }),
    ).toBe(1);
    expect(stderr.toString()).toContain("ws://127.0.0.1:1");
  });

  it("serves a YAML config whose rules file is relative to it, and stops cleanly when asked", async () => {
    await writeFile(
      join(dir, "main.rules.yaml"),
      'rules:\n  - when: "^hello (.+)$"\n    reply: "hi $1, from a file"\n',
    );
    await writeFile(
      join(dir, "switchboard.yaml"),
      "agents:\n  list:\n    - id: main\n      model: { provider: scripted, rules: ./main.rules.yaml }\n",
    );
    let run: FakeRun | undefined;
    const code = await runAgentCli(["--config", join(dir, "switchboard.yaml"), "--url", fake.url], {
      env: { SWITCHBOARD_TOKEN: FAKE_TOKENS.agent },
      cwd: "/",
      logger: silent,
      untilStopped: async () => {
        run = await ended(fake.startRun("agent:main:main", "hello there"));
      },
    });
    expect(code).toBe(0);
    expect(run).toMatchObject({ status: "ok", reply: "hi there, from a file" });
    expect(fake.connections().filter((connection) => connection.open)).toHaveLength(0);
  });
});
