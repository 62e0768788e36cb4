import { describe, expect, it } from "vitest";
import { CLI_BUILT, NOT_BUILT_MESSAGE, runCliProcess } from "./cli-process";

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
});
