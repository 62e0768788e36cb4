import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  adminQuery,
  dropTestSchema,
  pgUnavailableReason,
  testPgUrl,
  testSchemaName,
} from "@switchboard/store-pg/testing";
import { afterAll, describe, expect, it } from "vitest";
import { CLI_BUILT, CliProcess, cleanEnv, NOT_BUILT_MESSAGE, runCliProcess } from "./cli-process";

const unavailable = await pgUnavailableReason();
const requirePg = process.env.SWITCHBOARD_REQUIRE_PG === "1";
if (!CLI_BUILT) console.warn(`[store-flag.int.test] skipped: ${NOT_BUILT_MESSAGE}`);
else if (unavailable !== undefined && !requirePg)
  console.warn(`[store-flag.int.test] skipped: no PostgreSQL (${unavailable}); set SWITCHBOARD_TEST_PG_URL`);

/** The test server's URL with a password in it (the test server trusts every login). */
function urlWithPassword(password: string): string {
  const url = new URL(testPgUrl());
  url.password = password;
  return url.toString();
}

describe.skipIf(!CLI_BUILT || (unavailable !== undefined && !requirePg))(
  "switchboard gateway --store",
  () => {
    const cleanups: Array<() => Promise<unknown>> = [];
    afterAll(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    });

    it("starts on PostgreSQL from --store, keeping the config's schema, and never prints the password", async () => {
      if (unavailable !== undefined)
        throw new Error(`SWITCHBOARD_REQUIRE_PG=1 but no PostgreSQL: ${unavailable}`);
      const dir = await mkdtemp(join(tmpdir(), "switchboard-store-flag-"));
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      const schema = testSchemaName("sbcli");
      cleanups.push(() => dropTestSchema(schema));
      const config = join(dir, "switchboard.config.json");
      await writeFile(
        config,
        JSON.stringify({ store: { kind: "postgres", urlEnv: "UNUSED_PG_URL", schema } }),
      );
      const password = "pw-from-the-command-line";
      const gateway = CliProcess.start(
        [
          "gateway",
          "--port",
          "0",
          "--config",
          config,
          "--data-dir",
          join(dir, "data"),
          "--store",
          urlWithPassword(password),
          "--json",
          "--log-level",
          "info",
        ],
        { cwd: dir, env: cleanEnv() },
      );
      cleanups.push(() => gateway.stop("SIGKILL"));
      await gateway.waitForOutput("\n", 20_000);
      const details = JSON.parse(gateway.stdout.split("\n")[0]!) as { url: string; store: string };
      expect(details.store).toContain(`schema ${schema}`);
      expect(details.store).toContain(":***@");
      const migrated = await adminQuery<{ version: number }>(
        `SELECT max(version) AS version FROM "${schema}".schema_migrations`,
      );
      expect(migrated.rows[0]!.version).toBeGreaterThan(0);
      const sent = await runCliProcess(
        ["sessions", "list", "--url", details.url, "--data-dir", join(dir, "data")],
        {
          cwd: dir,
        },
      );
      expect(sent.code).toBe(0);
      await gateway.stop("SIGINT");
      expect(`${gateway.stdout}${gateway.stderr}`).not.toContain(password);
    });

    it("refuses a --store that is neither fs nor a postgres URL, without echoing its password", async () => {
      const refused = await runCliProcess([
        "gateway",
        "--port",
        "0",
        "--store",
        "mysql://root:hunter2@db/app",
      ]);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain("--store: must be fs or a postgres:// URL");
      expect(refused.stderr).not.toContain("hunter2");
    });
  },
);
