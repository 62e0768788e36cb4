import { fileURLToPath } from "node:url";
import type { TestProjectInlineConfiguration } from "vitest/config";
import { pgUnavailableReason } from "./packages/store-pg/src/testing.ts";
import { workspaceAlias } from "./vitest.shared.ts";

/**
 * The gateway's protocol suite: the test files that start gateways through the test harness
 * (`apps/gateway/src/testing/test-gateway.ts`) on the store SWITCHBOARD_TEST_STORE names. They run
 * once on the file store (project `gateway`) and once more on PostgreSQL (project `gateway-pg`).
 * Suites about one store's own behaviour (damaged files, disk faults, a held audit disk, the
 * memory store's hooks) are not here; the cluster suites start their own processes on PostgreSQL.
 */
export const GATEWAY_PROTOCOL_SUITE = [
  "src/gateway.int.test.ts",
  "src/gateway-methods.int.test.ts",
  "src/session-tools.int.test.ts",
  "src/sessions-list-visibility.int.test.ts",
  "src/client-sdk.int.test.ts",
  "src/agent-worker.int.test.ts",
  "src/protocol-hardening.int.test.ts",
  "src/run-recovery.int.test.ts",
  "src/reset-midrun.int.test.ts",
  "src/subagent-model.int.test.ts",
  "src/mcp/mcp.int.test.ts",
  "src/methods/runs-list.int.test.ts",
  "src/methods/sessions-paging.int.test.ts",
  "src/cli/agent-command.int.test.ts",
  "src/reliability/auth.int.test.ts",
  "src/reliability/label-results.int.test.ts",
  "src/reliability/large-messages.int.test.ts",
  "src/reliability/loops.int.test.ts",
  "src/reliability/refusals.int.test.ts",
  "src/reliability/spawn-loop.int.test.ts",
  "src/reliability/unicode-keys.int.test.ts",
  "src/events-missed.int.test.ts",
  "src/history-redaction.int.test.ts",
  "src/clearance-follows-config.int.test.ts",
];

/**
 * The `gateway-pg` project, when the test server answers (SWITCHBOARD_TEST_PG_URL, default the
 * local one). Without it the project is left out with a printed notice — unless
 * SWITCHBOARD_REQUIRE_PG=1 (CI), when it runs and fails.
 */
export async function gatewayOnPostgres(): Promise<TestProjectInlineConfiguration[]> {
  const unavailable = await pgUnavailableReason();
  // biome-ignore lint/suspicious/noUndeclaredEnvVars: read by vitest's config, in no turbo task
  const required = process.env.SWITCHBOARD_REQUIRE_PG === "1";
  if (unavailable !== undefined && !required) {
    console.warn(
      `[gateway-pg] the gateway protocol suite on PostgreSQL is skipped: no PostgreSQL (${unavailable}); set SWITCHBOARD_TEST_PG_URL, or SWITCHBOARD_REQUIRE_PG=1 to fail instead`,
    );
    return [];
  }
  return [
    {
      resolve: { alias: workspaceAlias },
      test: {
        name: "gateway-pg",
        root: fileURLToPath(new URL("./apps/gateway/", import.meta.url)),
        include: GATEWAY_PROTOCOL_SUITE,
        env: { SWITCHBOARD_TEST_STORE: "postgres" },
      },
    },
  ];
}
