import { describe, it } from "vitest";
import { adminQuery, dropTestSchema, pgUnavailableReason, testPgUrl, testSchemaName } from "../src/testing";

export { adminQuery, testSchemaName };

/** The server the PostgreSQL suites use (spec: SWITCHBOARD_TEST_PG_URL, this default otherwise). */
export const TEST_PG_URL = testPgUrl();

export const dropSchema = (schema: string) => dropTestSchema(schema);

/**
 * Registers `body` when PostgreSQL is reachable. Without a server the suite is skipped with a
 * printed notice, unless SWITCHBOARD_REQUIRE_PG=1 (CI), which turns the missing server into a
 * failing test.
 */
export async function describeWithPg(name: string, body: () => void): Promise<void> {
  const reason = await pgUnavailableReason();
  if (reason === undefined) {
    body();
    return;
  }
  const notice = `PostgreSQL not reachable at ${TEST_PG_URL.replace(/:[^:@/]*@/, ":***@")} (${reason})`;
  if (process.env.SWITCHBOARD_REQUIRE_PG === "1") {
    describe(name, () => {
      it("needs PostgreSQL (SWITCHBOARD_REQUIRE_PG=1)", () => {
        throw new Error(`${notice}; set SWITCHBOARD_TEST_PG_URL or start a server`);
      });
    });
    return;
  }
  console.warn(`[store-pg] skipping "${name}": ${notice}; set SWITCHBOARD_TEST_PG_URL to run it`);
  describe.skip(name, () => {
    it("needs PostgreSQL", () => undefined);
  });
}
