import { existsSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CLI_BUILT, CliProcess, cleanEnv, NOT_BUILT_MESSAGE, runCliProcess } from "./cli-process";

if (!CLI_BUILT) console.warn(`skipping the demo test: ${NOT_BUILT_MESSAGE}`);

describe.skipIf(!CLI_BUILT)("switchboard demo", { timeout: 60_000 }, () => {
  it("plays spawn, send with reply-back and announce, and a blocked write-down, and exits 0", async () => {
    const result = await runCliProcess(["demo"]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    const out = result.stdout;
    // The timeline: the gateway's events with time offsets and actors.
    expect(out).toMatch(
      /\+\d+\.\d{3}s\s+research\/sub-[0-9a-f]{4}\s+sub-agent task: run started \(lane subagent/,
    );
    expect(out).toMatch(/\+\d+\.\d{3}s\s+main\s+announce of the sub-agent's result: run started/);
    expect(out).toMatch(/main\s+reply-back turn 1: run started/);
    expect(out).toMatch(/research@discord:group:lab\s+reply-back turn 2: run started/);
    expect(out).toMatch(/research@discord:group:lab\s+posted to discord:lab "For the lab:/);
    expect(out).toMatch(
      /gateway\s+BLOCKED at PRE_SEND \(rule flow\.no-write-down\): write-down blocked: session taint CONFIDENTIAL cannot flow to agent:research:discord:group:lab \(clearance PUBLIC\)/,
    );
    // The checks.
    for (const name of ["spawn", "send and wait", "reply-back", "announce", "write-down blocked", "audit"]) {
      expect(out).toContain(`✓ ${name}: `);
    }
    expect(out).not.toContain("✗");
    expect(out).toContain("demo passed");
  });

  it("reports the same run as JSON with --json", async () => {
    const result = await runCliProcess(["demo", "--json"]);
    expect(result.code).toBe(0);
    const report = JSON.parse(result.stdout) as {
      ok: boolean;
      checks: Array<{ name: string; ok: boolean }>;
      timeline: unknown[];
    };
    expect(report.ok).toBe(true);
    expect(report.checks.map((check) => check.name)).toEqual([
      "spawn",
      "send and wait",
      "reply-back",
      "announce",
      "write-down blocked",
      "audit",
    ]);
    expect(report.checks.every((check) => check.ok)).toBe(true);
    expect(report.timeline.length).toBeGreaterThan(20);
  });

  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    it(`removes its temporary data dir (LOCK, operator token, audit key) on ${signal}`, async () => {
      // A private TMPDIR, so the test sees exactly the dir this demo creates.
      const tmp = await mkdtemp(join(tmpdir(), "switchboard-demo-test-"));
      try {
        const demo = CliProcess.start(["demo"], { env: cleanEnv({ TMPDIR: tmp }) });
        let secrets: string[] = [];
        const deadline = Date.now() + 20_000;
        // Wait until the gateway has written its lock and secrets: the state Ctrl-C used to leave behind.
        while (secrets.length < 3) {
          if (Date.now() > deadline) throw new Error(`the demo never started:\n${demo.stderr}`);
          const [dir] = (await readdir(tmp)).filter((name) => name.startsWith("switchboard-demo-"));
          if (dir)
            secrets = ["LOCK", "operator-token", "audit.key"].filter((name) =>
              existsSync(join(tmp, dir, name)),
            );
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        const code = await demo.stop(signal);
        expect(code).toBe(signal === "SIGINT" ? 130 : 143);
        expect(demo.stderr).toContain(`${signal}: demo stopped; temporary data dir removed`);
        expect(await readdir(tmp)).toEqual([]);
      } finally {
        await rm(tmp, { recursive: true, force: true });
      }
    });
  }
});
