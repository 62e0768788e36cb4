import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sampleMessage, sampleRun, sampleSession } from "@switchboard/core/testing";
import { openFileStore } from "@switchboard/store-fs";
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

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "switchboard-doctor-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("switchboard doctor", () => {
  it("reports a missing scripted rules file as an error naming the file and the fix", async () => {
    const config = join(dir, "missing-rules.json5");
    await writeFile(
      config,
      `{ agents: { list: [{ id: "main", model: { provider: "scripted", rules: "./nope.rules.yaml" } }] } }`,
    );
    const result = await run(["doctor", "--config", config, "--data-dir", join(dir, "data-1")]);
    expect(result.code).toBe(1);
    expect(result.stdout).not.toContain("no problems found");
    expect(result.stdout).toMatch(/✗ error\s+invalid-rules-file: .*nope\.rules\.yaml/);
    expect(result.stdout).toContain(`file: ${join(dir, "nope.rules.yaml")}`);
    expect(result.stdout).toMatch(/fix: {2}create or fix .*nope\.rules\.yaml/);

    const json = await run(["doctor", "--config", config, "--data-dir", join(dir, "data-1"), "--json"]);
    const parsed = JSON.parse(json.stdout);
    expect(parsed.ok).toBe(false);
    expect(parsed.issues).toContainEqual(
      expect.objectContaining({ code: "invalid-rules-file", path: join(dir, "nope.rules.yaml") }),
    );
  });

  it("reports an invalid config as an error and still checks the data dir", async () => {
    const config = join(dir, "broken.json5");
    await writeFile(config, `{ gateway: { port: "many" } }`);
    const result = await run(["doctor", "--config", config, "--data-dir", join(dir, "nowhere"), "--json"]);
    expect(result.code).toBe(1);
    const parsed = JSON.parse(result.stdout);
    expect(parsed.issues).toContainEqual(expect.objectContaining({ code: "invalid-config", path: config }));
    expect(parsed.issues).toContainEqual(expect.objectContaining({ code: "missing-data-dir" }));
  });

  it("finds a queued run on a reset session and --repair fixes it", async () => {
    const dataDir = join(dir, "data-run");
    const store = await openFileStore({ dataDir, fsyncMode: "none" });
    const row = sampleSession();
    await store.transcripts.create({ sessionId: row.sessionId, key: row.key, createdAt: 1 });
    await store.transcripts.append(row.sessionId, [sampleMessage("hi")]);
    await store.sessions.put(row);
    const queued = sampleRun({ sessionKey: row.key, sessionId: row.sessionId, status: "queued" });
    await store.runs.put(queued);
    await store.transcripts.archive(row.sessionId, "reset");
    await store.sessions.delete(row.key);
    await store.close();

    const check = await run(["doctor", "--data-dir", dataDir]);
    // The gateway's start would end the run itself: a warning, and `doctor` passes.
    expect(check.code).toBe(0);
    expect(check.stdout).toMatch(new RegExp(`warning\\s+orphan-run: run ${queued.runId}`));
    expect(check.stdout).toMatch(/fix: {2}nothing to do; or run `switchboard doctor --repair`/);

    const repaired = await run(["doctor", "--data-dir", dataDir, "--repair"]);
    expect(repaired.code).toBe(0);
    expect(repaired.stdout).toContain(`repaired:  marked run ${queued.runId}`);
    expect(repaired.stdout.trimEnd().split("\n").at(-1)).toBe("ok");
    expect((await run(["doctor", "--data-dir", dataDir])).code).toBe(0);
    expect(await readFile(join(dataDir, "VERSION"), "utf8")).toContain("switchboard-file-store");
  });
});
