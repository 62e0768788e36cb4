import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { loadConfigFile } from "./config-file";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "switchboard-config-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
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
    await writeFile(join(dir, "a.yaml"), "gateway:\n  port: 19000\n");
    expect((await loadConfigFile(join(dir, "a.yaml"))).config.gateway.port).toBe(19000);
    await writeFile(join(dir, "empty.yml"), "");
    expect(
      (await loadConfigFile(join(dir, "empty.yml"))).config.agents.list.map((agent) => agent.id),
    ).toEqual(["main"]);
  });

  it("names the file and the problem: missing, not parseable, invalid", async () => {
    await expect(loadConfigFile(join(dir, "missing.json5"))).rejects.toThrow(
      `cannot read config file ${join(dir, "missing.json5")}`,
    );
    await writeFile(join(dir, "broken.json"), "{ agents: ");
    await expect(loadConfigFile(join(dir, "broken.json"))).rejects.toThrow(
      /broken\.json is not valid JSON at line \d+, column \d+/,
    );
    await writeFile(join(dir, "typo.json"), JSON.stringify({ agnets: {} }));
    await expect(loadConfigFile(join(dir, "typo.json"))).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message: expect.stringMatching(/invalid configuration in .*typo\.json:\n\s+agnets: unknown key/),
    });
  });
});
