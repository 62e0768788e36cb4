import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  dropTestSchema,
  pgUnavailableReason,
  TcpProxy,
  testPgUrl,
  testSchemaName,
} from "@switchboard/store-pg/testing";
import { afterAll, describe, expect, it } from "vitest";
import { CLI_BUILT, CliProcess } from "./cli-process";

// SIGTERM to `switchboard gateway` while its PostgreSQL stops answering: the stop gives up at
// gateway.shutdown.timeoutMs (a connection pool's end on a silent socket never returns), says what
// it left undone, and exits 1.

const unavailable = await pgUnavailableReason();
const requirePg = process.env.SWITCHBOARD_REQUIRE_PG === "1";
if (unavailable !== undefined && !requirePg)
  console.warn(
    `[pg-stall-shutdown.int.test] skipped: no PostgreSQL (${unavailable}); set SWITCHBOARD_TEST_PG_URL`,
  );

const processes: CliProcess[] = [];
afterAll(async () => {
  for (const child of processes) await child.stop("SIGKILL");
});

describe.skipIf(!CLI_BUILT || (unavailable !== undefined && !requirePg))(
  "SIGTERM to `switchboard gateway` while PostgreSQL does not answer",
  { timeout: 120_000 },
  () => {
    it("stops within gateway.shutdown.timeoutMs, names what it left undone and exits 1", async () => {
      const dir = await mkdtemp(join(tmpdir(), "switchboard-pg-stall-"));
      const target = new URL(testPgUrl());
      const proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
      await proxy.start();
      const schema = testSchemaName("sbstall");
      const config = join(dir, "switchboard.json5");
      await writeFile(
        config,
        JSON.stringify({
          gateway: { shutdown: { drainMs: 500, timeoutMs: 3000 } },
          store: { kind: "postgres", url: proxy.urlFor(testPgUrl()), schema },
        }),
      );
      const gateway = CliProcess.start(
        [
          "gateway",
          "--config",
          config,
          "--port",
          "0",
          "--data-dir",
          join(dir, "data"),
          "--json",
          "--log-level",
          "error",
        ],
        { cwd: dir },
      );
      processes.push(gateway);
      try {
        await gateway.waitForOutput("\n", 60_000);
        const banner = JSON.parse(gateway.stdout.split("\n")[0]!) as { url: string };
        expect((await fetch(`${banner.url.replace(/^ws/, "http")}/healthz`)).status).toBe(200);
        proxy.stall();
        await new Promise((resolve) => setTimeout(resolve, 1000));
        const started = Date.now();
        gateway.child.kill("SIGTERM");
        const exited = await Promise.race([
          gateway.exited,
          new Promise<"still running">((resolve) => setTimeout(() => resolve("still running"), 30_000)),
        ]);
        // 3 s of deadline, a moment for each step after it, and the CLI's own exit.
        expect(exited).toBe(1);
        expect(Date.now() - started).toBeLessThan(20_000);
        expect(gateway.stderr).toContain("stopped, but the shutdown did not finish");
        expect(gateway.stderr).toMatch(/timed out/);
      } finally {
        await gateway.stop("SIGKILL");
        await proxy.stop();
        await dropTestSchema(schema).catch(() => undefined);
        await rm(dir, { recursive: true, force: true });
      }
    });
  },
);
