import { defineConfig } from "vitest/config";
import { gatewayOnPostgres } from "./vitest.postgres.ts";

export default defineConfig(async () => ({
  test: {
    // `gateway-pg`: the gateway's protocol suite once more on PostgreSQL (see vitest.postgres.ts).
    projects: ["packages/*", "apps/*", "scripts", ...(await gatewayOnPostgres())],
  },
}));
