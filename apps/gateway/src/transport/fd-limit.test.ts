import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { DEFAULT_MAX_CONNECTIONS, defaultMaxConnections, readOpenFileLimit } from "./fd-limit";

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max processes             63704                63704                processes
Max open files            1024                 524288               files
Max locked memory         8388608              8388608              bytes
`;

describe("open-file limit", () => {
  it("reads the soft and hard nofile limits from /proc/self/limits text", () => {
    expect(readOpenFileLimit(LIMITS)).toEqual({ soft: 1024, hard: 524288 });
    expect(readOpenFileLimit(LIMITS.replace("524288", "unlimited"))).toEqual({ soft: 1024, hard: 1024 });
    expect(readOpenFileLimit("Max open files            unlimited  unlimited  files")).toBeUndefined();
    expect(readOpenFileLimit("")).toBeUndefined();
  });

  it("sizes the default connection cap under the soft limit", () => {
    expect(defaultMaxConnections(undefined)).toBe(DEFAULT_MAX_CONNECTIONS);
    expect(defaultMaxConnections({ soft: 1_048_576, hard: 1_048_576 })).toBe(DEFAULT_MAX_CONNECTIONS);
    expect(defaultMaxConnections({ soft: 1024, hard: 1024 })).toBe(576);
    expect(defaultMaxConnections({ soft: 100, hard: 100 })).toBe(16);
  });

  // The gateway relies on Node raising its own soft limit to the hard one at start-up (it has no
  // setrlimit to call): a process started under `ulimit -Sn 256` must see soft == hard.
  it.runIf(process.platform === "linux")("runs with the soft limit raised to the hard limit", () => {
    const script = `ulimit -Sn 256 && exec "${process.execPath}" -e 'process.stdout.write(require("fs").readFileSync("/proc/self/limits","utf8"))'`;
    const child = spawnSync("/bin/sh", ["-c", script], { encoding: "utf8" });
    expect(child.status).toBe(0);
    const limit = readOpenFileLimit(child.stdout);
    expect(limit).toBeDefined();
    expect(limit!.soft).toBe(limit!.hard);
  });
});
