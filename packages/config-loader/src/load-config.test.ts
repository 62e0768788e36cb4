import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig, loadConfigFile, resolveDataDir } from "./load-config";

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "switchboard-config-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, text);
  return path;
}

async function failure(promise: Promise<unknown>): Promise<SwitchboardError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(SwitchboardError);
  return error as SwitchboardError;
}

describe("loadConfig", () => {
  it("uses the built-in defaults when no file is named", async () => {
    const loaded = await loadConfig(undefined, { env: {}, cwd: dir });
    expect(loaded.path).toBeUndefined();
    expect(loaded.baseDir).toBe(dir);
    expect(loaded.config.agents.list.map((agent) => agent.id)).toEqual(["main"]);
    expect(loaded.config.gateway.port).toBe(18789);
  });

  it("reads JSON5, JSON and YAML by extension, relative to the working directory", async () => {
    await file("a.json5", "{ gateway: { port: 19001, }, // comment\n }");
    await file("b.json", '{"gateway": {"port": 19002}}');
    await file(
      "c.yaml",
      "gateway:\n  port: 19003\nagents:\n  list:\n    - id: main\n      default: true\n    - id: research\n",
    );
    const json5 = await loadConfig("a.json5", { env: {}, cwd: dir });
    expect(json5.config.gateway.port).toBe(19001);
    expect(json5.path).toBe(join(dir, "a.json5"));
    expect(json5.baseDir).toBe(dir);
    expect((await loadConfig("b.json", { env: {}, cwd: dir })).config.gateway.port).toBe(19002);
    const yaml = await loadConfig(join(dir, "c.yaml"), { env: {} });
    expect(yaml.config.gateway.port).toBe(19003);
    expect(yaml.config.agents.list.map((agent) => agent.id)).toEqual(["main", "research"]);
  });

  it("takes the path from SWITCHBOARD_CONFIG and the data dir from SWITCHBOARD_HOME", async () => {
    const path = await file("env.json5", "{ gateway: { port: 19004, dataDir: './from-file' } }");
    const loaded = await loadConfig(undefined, {
      env: { SWITCHBOARD_CONFIG: path, SWITCHBOARD_HOME: "/tmp/sb-home" },
    });
    expect(loaded.config.gateway.port).toBe(19004);
    expect(loaded.config.gateway.dataDir).toBe("/tmp/sb-home");
    expect(resolveDataDir(loaded.config, undefined, {})).toBe("/tmp/sb-home");
    expect(resolveDataDir(loaded.config, "./override", { SWITCHBOARD_HOME: "/x" })).toBe(
      resolve("./override"),
    );
  });

  it("names the file and every bad field with its reason", async () => {
    const path = await file(
      "bad.json5",
      "{ gateway: { port: 'high' }, agents: { list: [ { id: 'main', subagents: { maxSpawnDepth: 9 } } ] }, gatway: {} }",
    );
    const error = await failure(loadConfig(path, { env: {} }));
    expect(error.code).toBe("INVALID_REQUEST");
    expect(error.message).toContain(path);
    expect(error.message).toContain("gateway.port:");
    expect(error.message).toContain("agents.list[0].subagents.maxSpawnDepth:");
    expect(error.message).toMatch(/gatway: unknown key \(did you mean "gateway"\?\)/);
    const issues = (error.details as { issues: Array<{ path: string }> }).issues.map((issue) => issue.path);
    expect(issues).toEqual(
      expect.arrayContaining(["gateway.port", "agents.list[0].subagents.maxSpawnDepth", "gatway"]),
    );
  });

  it("gives the line of a syntax error", async () => {
    const json5 = await file("broken.json5", "{\n  gateway: {\n    port: ]\n  }\n}\n");
    const yaml = await file("broken.yml", "gateway:\n  port: 1\n    host: x\n");
    const json5Error = await failure(loadConfig(json5, { env: {} }));
    expect(json5Error.message).toMatch(
      new RegExp(`${json5} is not valid JSON5 at line 3, column \\d+: invalid character`),
    );
    const yamlError = await failure(loadConfig(yaml, { env: {} }));
    expect(yamlError.message).toMatch(new RegExp(`${yaml} is not valid YAML at line \\d+, column \\d+: \\S`));
  });

  it("refuses a JSON5 or JSON config that sets a key twice, naming it and both places", async () => {
    const path = await file(
      "twice.json5",
      "{\n  gateway: { port: 1 },\n  agents: {},\n  gateway: { port: 2 },\n}\n",
    );
    const error = await failure(loadConfig(path, { env: {}, cwd: dir }));
    expect(error.code).toBe("INVALID_REQUEST");
    expect(error.message).toBe(
      `config file ${path} is not valid JSON5 at line 4, column 3: duplicate key "gateway" (first at line 2, column 3): a key may appear once in an object`,
    );
    const json = await file("twice.json", '{"agents": {"list": [{"id": "a", "id": "b"}]}}');
    expect((await failure(loadConfig(json, { env: {}, cwd: dir }))).message).toContain(
      'is not valid JSON at line 1, column 34: duplicate key "id"',
    );
  });

  it("refuses a missing file and an unknown extension", async () => {
    const missing = await failure(loadConfig(join(dir, "nope.json5"), { env: {} }));
    expect(missing.message).toBe(`cannot read config file ${join(dir, "nope.json5")}: no such file`);
    const toml = await file("x.toml", "a = 1");
    expect((await failure(loadConfig(toml, { env: {} }))).message).toContain('unsupported extension ".toml"');
  });

  it("treats an empty YAML file as the defaults", async () => {
    const empty = await file("empty.yaml", "");
    expect((await loadConfig(empty, { env: {} })).config.agents.list[0]!.id).toBe("main");
  });
});

describe("loadConfigFile", () => {
  it("reads JSON5 (comments, unquoted keys) and gives the file's directory as baseDir", async () => {
    await writeFile(
      join(dir, "switchboard.config.json5"),
      "// agents\n{ agents: { list: [{ id: 'main' }, { id: 'research' },] } }",
    );
    const loaded = await loadConfigFile("switchboard.config.json5", dir);
    expect(loaded.config.agents.list.map((agent) => agent.id)).toEqual(["main", "research"]);
    expect(loaded.path).toBe(join(dir, "switchboard.config.json5"));
    expect(loaded.baseDir).toBe(dir);
  });

  it("reads YAML, and an empty YAML file gives the defaults", async () => {
    await writeFile(join(dir, "file.yaml"), "gateway:\n  port: 19000\n");
    expect((await loadConfigFile(join(dir, "file.yaml"))).config.gateway.port).toBe(19000);
    await writeFile(join(dir, "empty-file.yml"), "");
    expect(
      (await loadConfigFile(join(dir, "empty-file.yml"))).config.agents.list.map((agent) => agent.id),
    ).toEqual(["main"]);
  });

  it("names the file and the problem: missing, not parseable, invalid", async () => {
    await expect(loadConfigFile(join(dir, "missing-file.json5"))).rejects.toThrow(
      `cannot read config file ${join(dir, "missing-file.json5")}`,
    );
    await writeFile(join(dir, "broken-file.json"), "{ agents: ");
    await expect(loadConfigFile(join(dir, "broken-file.json"))).rejects.toThrow(
      /broken-file\.json is not valid JSON at line \d+, column \d+/,
    );
    await writeFile(join(dir, "typo-file.json"), JSON.stringify({ agnets: {} }));
    await expect(loadConfigFile(join(dir, "typo-file.json"))).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message: expect.stringMatching(/invalid configuration in .*typo-file\.json:\n\s+agnets: unknown key/),
    });
  });
});
