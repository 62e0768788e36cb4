import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { bundleChild } from "../test/bundle-child";
import { recordingLogger, tempDir } from "../test/helpers";
import { setFaultHook } from "./fs-io";
import { acquireLock, releaseLock } from "./lock-file";

// Two gateways must never hold one data dir: each start is a real process, as in production.
let workDir: string;
let childScript: string;

beforeAll(async () => {
  workDir = (await tempDir("switchboard-lock-")).dir;
  childScript = await bundleChild("lock-child", workDir);
});

afterAll(() => fs.rmSync(workDir, { recursive: true, force: true }));

function start(dataDir: string, name: string, holdMs: number, stall = false): Promise<string> {
  const args = [childScript, dataDir, name, String(holdMs), ...(stall ? ["stall"] : [])];
  const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    out += chunk;
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    out += chunk;
  });
  return new Promise((resolve) => child.on("close", () => resolve(out)));
}

const opened = (outs: string[]) => outs.filter((out) => out.includes("OPENED")).length;

describe("the data dir lock between processes", () => {
  it("refuses a second start while the first is still writing its lock", async () => {
    const dataDir = path.join(workDir, "slow");
    const first = start(dataDir, "first", 2_500, true);
    // The first is inside its stalled lock write once its lock file (or its lock's own file) shows.
    for (let i = 0; i < 500; i++) {
      if (fs.existsSync(dataDir) && fs.readdirSync(dataDir).some((name) => name.startsWith("LOCK"))) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const second = await start(dataDir, "second", 2_500);
    const outs = [await first, second];
    expect(opened(outs), outs.join("")).toBe(1);
    expect(outs.join("")).toMatch(/REFUSED \w+ data dir in use by pid \d+/);
  }, 60_000);

  it("lets only one of two starts take over a lock a killed gateway left", async () => {
    for (let trial = 0; trial < 4; trial++) {
      const dataDir = path.join(workDir, `stale-${trial}`);
      fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
      fs.writeFileSync(
        path.join(dataDir, "LOCK"),
        `${JSON.stringify({ pid: 2 ** 22 - 3, acquiredAt: 1 })}\n`,
      );
      // Held well past the two starts' spread, so a second open can only mean two holders at once.
      const outs = await Promise.all([start(dataDir, "a", 1_500), start(dataDir, "b", 1_500)]);
      expect(opened(outs), outs.join("")).toBe(1);
      // Nothing of the lock's making is left once the holder has gone.
      expect(fs.readdirSync(dataDir).filter((name) => name.startsWith("LOCK"))).toEqual([]);
    }
  }, 120_000);
});

describe("the data dir lock on a filesystem without hard links", () => {
  afterEach(() => setFaultHook(undefined));
  const { logger } = recordingLogger();

  for (const code of ["EPERM", "ENOTSUP"]) {
    it(`is taken when link() answers ${code}, and refuses a second holder`, async () => {
      const dataDir = path.join(workDir, `nolink-${code}`);
      fs.mkdirSync(dataDir, { recursive: true });
      setFaultHook((op) => (op === "link" ? code : undefined));
      const lock = await acquireLock(dataDir, false, logger);
      expect(JSON.parse(fs.readFileSync(path.join(dataDir, "LOCK"), "utf8")).pid).toBe(process.pid);
      await expect(acquireLock(dataDir, false, logger)).rejects.toThrow(/data dir in use by pid/);
      await releaseLock(lock);
      expect(fs.readdirSync(dataDir)).toEqual([]);
    });
  }
});
