import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { openFileStore } from "@switchboard/store-fs";
import { describe, expect, it } from "vitest";
import { createAppLogger, formatLine } from "./logger";

function capture() {
  const lines: string[] = [];
  return { lines, destination: { write: (line: string) => lines.push(line) } };
}

describe("createAppLogger", () => {
  it("redacts tokens and conversation text but keeps error messages", () => {
    const { lines, destination } = capture();
    const log = createAppLogger({ level: "info", destination });
    log.info(
      {
        auth: { token: "sb_op_secret-token-value" },
        params: { auth: { token: "sb_op_other-secret" } },
        run: { message: "my bank password is hunter2", reply: "noted" },
        delivery: { text: "private words" },
        err: new Error("store is locked"),
      },
      "something happened",
    );
    const entry = JSON.parse(lines[0]!) as {
      auth: { token: string };
      run: { message: string };
      err: { message: string };
      msg: string;
    };
    const text = lines.join("");
    expect(text).not.toContain("secret");
    expect(text).not.toContain("hunter2");
    expect(text).not.toContain("private words");
    expect(entry.auth.token).toBe("[redacted]");
    expect(entry.run.message).toBe("[redacted]");
    expect(entry.err.message).toBe("store is locked");
    expect(entry.msg).toBe("something happened");
  });

  it("honours the level and writes one human line per entry in pretty mode", () => {
    const { lines, destination } = capture();
    const log = createAppLogger({ level: "warn", pretty: true, destination });
    log.info("hidden");
    log.child({ component: "runs" }).warn({ runId: "r1", token: "abcdefabcdef" }, "run slow");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} WARN {2}\[runs\] run slow runId=r1 token=\[redacted\]\n$/,
    );
  });
});

describe("formatLine", () => {
  it("passes through a line that is not JSON", () => {
    expect(formatLine("plain")).toBe("plain\n");
  });
});

describe("redaction of child bindings", () => {
  it("redacts tokens bound to a child logger", () => {
    const { lines, destination } = capture();
    createAppLogger({ destination })
      .child({ auth: { token: "bound-secret" }, component: "x" })
      .info("x");
    expect(lines[0]).not.toContain("bound-secret");
    expect(lines[0]).toContain('"component":"x"');
  });
});

describe("pino as the store's logger", () => {
  it("keeps the store's fields and the child's bindings", async () => {
    const dataDir = await fs.promises.mkdtemp(path.join(os.tmpdir(), "sb-store-log-"));
    try {
      // A lock left by a process that is gone makes the store log a takeover with the old pid.
      const gone = Number(
        spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"]).stdout,
      );
      fs.writeFileSync(path.join(dataDir, "LOCK"), JSON.stringify({ pid: gone }));
      const { lines, destination } = capture();
      const log = createAppLogger({ level: "info", destination });
      const store = await openFileStore({
        dataDir,
        fsyncMode: "none",
        logger: log.child({ component: "store" }),
      });
      await store.close();
      const takeover = lines.find((line) => line.includes("took over the data dir lock"));
      expect(JSON.parse(takeover!)).toMatchObject({ level: 40, component: "store" });
      // The base binding is this process's pid; the store's own field names the gone one.
      expect(takeover).toContain(`"pid":${gone},`);
    } finally {
      await fs.promises.rm(dataDir, { recursive: true, force: true });
    }
  });
});
