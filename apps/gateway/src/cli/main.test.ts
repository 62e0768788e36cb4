import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "./main";
import type { CliIo } from "./output";

async function run(argv: string[]) {
  let stdout = "";
  let stderr = "";
  const io: CliIo = {
    out: (text) => {
      stdout += text.endsWith("\n") ? text : `${text}\n`;
    },
    err: (text) => {
      stderr += text.endsWith("\n") ? text : `${text}\n`;
    },
    interactive: false,
  };
  const code = await runCli(argv, io, {});
  return { code, stdout, stderr };
}

let dir: string;
let ghostConfig: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "switchboard-cli-main-"));
  ghostConfig = join(dir, "ghost.config.json5");
  await writeFile(
    ghostConfig,
    `{ agents: { list: [{ id: "main", default: true }, { id: "research" }] },
       tools: { agentToAgent: { enabled: true, allow: ["main", "ghost"] } } }`,
  );
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("usage errors with --json", () => {
  it("print a JSON error object on stdout and exit 2", async () => {
    const missing = await run(["send", "main", "--json"]);
    expect(missing.code).toBe(2);
    expect(JSON.parse(missing.stdout)).toEqual({
      ok: false,
      error: {
        code: "USAGE",
        message: "missing <message>",
        usage: "usage: switchboard send <key> <message> [options]",
      },
    });
    expect(missing.stderr).toContain("switchboard: missing <message>");

    const unknownFlag = await run(["sessions", "list", "--json", "--limt", "3"]);
    expect(unknownFlag.code).toBe(2);
    expect(JSON.parse(unknownFlag.stdout)).toMatchObject({
      ok: false,
      error: { code: "USAGE", message: "unknown option --limt" },
    });

    const unknownCommand = await run(["sesions", "--json"]);
    expect(unknownCommand.code).toBe(2);
    expect(JSON.parse(unknownCommand.stdout)).toMatchObject({
      ok: false,
      error: { code: "USAGE", message: 'unknown command "sesions"' },
    });
  });

  it("name a kind that does not exist instead of listing every session", async () => {
    const bogus = await run(["sessions", "list", "--json", "--kinds", "subagent,bogus", "--token", "x"]);
    expect(bogus.code).toBe(2);
    expect(JSON.parse(bogus.stdout)).toMatchObject({
      ok: false,
      error: {
        code: "USAGE",
        message:
          "--kinds: must be a comma-separated list of main, group, cron, hook, node, subagent, other (unknown: bogus)",
      },
    });
    const empty = await run(["sessions", "list", "--kinds", ",", "--token", "x"]);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain("--kinds: must be a comma-separated list of main");
  });

  it("keep stdout empty without --json", async () => {
    const missing = await run(["send", "main"]);
    expect(missing.code).toBe(2);
    expect(missing.stdout).toBe("");
  });
});

describe("an invalid config", () => {
  it("exits 2 for every command that loads it, naming the path and the rule", async () => {
    for (const argv of [
      ["sessions", "list", "--config", ghostConfig, "--token", "x"],
      ["agent", "--config", ghostConfig, "--token", "x"],
      ["gateway", "--config", ghostConfig, "--port", "0"],
      ["up", "--config", ghostConfig, "--port", "0"],
    ]) {
      const result = await run(argv);
      expect(result.code, argv.join(" ")).toBe(2);
      expect(result.stderr).toContain(
        'tools.agentToAgent.allow[1]: unknown agent "ghost" (configured agents: main, research)',
      );
    }
  });

  it("is a JSON error with its issues under --json", async () => {
    const result = await run(["sessions", "list", "--config", ghostConfig, "--token", "x", "--json"]);
    expect(result.code).toBe(2);
    expect(JSON.parse(result.stdout)).toMatchObject({
      ok: false,
      error: {
        code: "INVALID_CONFIG",
        issues: [
          {
            path: "tools.agentToAgent.allow[1]",
            message: 'unknown agent "ghost" (configured agents: main, research)',
          },
        ],
      },
    });
  });

  it("a config file that does not exist exits 2 too", async () => {
    const result = await run(["agent", "--config", join(dir, "nope.json5"), "--token", "x"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`cannot read config file ${join(dir, "nope.json5")}: no such file`);
  });
});

describe("a data dir that cannot be created", () => {
  it("names the file in the way and the fix instead of raw errno text", async () => {
    const file = join(dir, "not-a-dir");
    await writeFile(file, "x");
    const onFile = await run(["gateway", "--data-dir", file, "--port", "0", "--log-level", "silent"]);
    expect(onFile.code).toBe(1);
    expect(onFile.stderr).toContain(
      `switchboard: cannot create ${file}: a file is in the way (EEXIST); ${file} is a file, not a directory: move it away or choose another data dir (--data-dir, SWITCHBOARD_HOME or gateway.dataDir)`,
    );

    const below = await run(["up", "--data-dir", join(file, "data"), "--port", "0", "--log-level", "silent"]);
    expect(below.code).toBe(1);
    expect(below.stderr).toContain(`(ENOTDIR); ${file} is a file, not a directory: move it away`);
  });
});

// Root reads any file, so the refusal can only be seen as another user.
describe.skipIf(process.getuid?.() === 0)("an operator token another user owns", () => {
  it("says whose file it is and how to pass a token instead of raw errno text", async () => {
    const dataDir = join(dir, "foreign");
    await mkdir(dataDir);
    await writeFile(join(dataDir, "operator-token"), "sb_op_secret\n", { mode: 0o000 });
    const result = await run(["sessions", "list", "--data-dir", dataDir, "--url", "ws://127.0.0.1:9"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `cannot read the operator token ${join(dataDir, "operator-token")}: permission denied (EACCES); run this as the user that started the gateway, or pass --token / set SWITCHBOARD_TOKEN`,
    );
  });
});
