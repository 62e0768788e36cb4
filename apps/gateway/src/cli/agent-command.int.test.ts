import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FakeGateway } from "@switchboard/client/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../testing/test-gateway";
import { runCli } from "./main";
import type { CliIo } from "./output";

async function run(argv: string[]) {
  let stdout = "";
  let stderr = "";
  const io: CliIo = {
    out: (text) => {
      stdout += `${text}\n`;
    },
    err: (text) => {
      stderr += `${text}\n`;
    },
    interactive: false,
  };
  const code = await runCli(argv, io, {});
  return { code, stdout, stderr };
}

// `switchboard agent` exits by the same table as every other command (and as switchboard-agent):
// 2 when the command line or config is wrong, 3 when the gateway refuses the token.
describe("switchboard agent exit codes", { timeout: 20_000 }, () => {
  let gw: TestGateway;
  let dir: string;

  beforeAll(async () => {
    gw = await startTestGateway();
    dir = await mkdtemp(join(tmpdir(), "switchboard-agent-cli-"));
  });

  afterAll(async () => {
    await gw?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("exits 3 when the gateway refuses the token", async () => {
    const result = await run([
      "agent",
      "--url",
      gw.url,
      "--token",
      "not-the-token-0123456789",
      "--log-level",
      "silent",
    ]);
    expect(result.code).toBe(3);
    expect(result.stderr).toContain(`the gateway at ${gw.url} refused the worker`);
  });

  it("exits 2 for --agents naming an agent the config does not have", async () => {
    const result = await run([
      "agent",
      "--url",
      gw.url,
      "--token",
      gw.token,
      "--agents",
      "ghost",
      "--log-level",
      "silent",
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('agents: "ghost" is not configured (configured: main)');
  });

  it("exits 2 when a scripted rules file of the config is missing, naming the file", async () => {
    const config = join(dir, "missing-rules.json5");
    await writeFile(
      config,
      `{ agents: { list: [{ id: "main", model: { provider: "scripted", rules: "./nope.rules.yaml" } }] } }`,
    );
    const result = await run([
      "agent",
      "--config",
      config,
      "--url",
      gw.url,
      "--token",
      gw.token,
      "--log-level",
      "silent",
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(join(dir, "nope.rules.yaml"));
  });

  it("exits 2 for an invalid config", async () => {
    const config = join(dir, "invalid.json5");
    await writeFile(config, `{ agents: { list: [{ id: "main", modle: {} }] } }`);
    const result = await run(["agent", "--config", config, "--url", gw.url, "--token", gw.token]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('agents.list[0].modle: unknown key (did you mean "model"?)');
  });

  it("exits 3 when the token is refused on a later reconnect", async () => {
    const tokens: Record<string, "agent"> = { "worker-token-0123456789": "agent" };
    const fake = await FakeGateway.start({ tokens });
    try {
      let stderr = "";
      const code = await runCli(
        ["agent", "--url", fake.url, "--token", "worker-token-0123456789", "--log-level", "silent"],
        {
          out: () => undefined,
          err: (text) => {
            stderr += `${text}\n`;
            // Once serving, the token is revoked and the connection dropped: the reconnect is refused.
            if (text.startsWith("serving ")) {
              delete tokens["worker-token-0123456789"];
              fake.dropConnections();
            }
          },
          interactive: false,
        },
        {},
      );
      expect(code).toBe(3);
      expect(stderr).toContain(`the gateway at ${fake.url} refused the worker`);
    } finally {
      await fake.close();
    }
  });
});
