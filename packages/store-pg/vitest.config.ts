import { defineProject } from "vitest/config";
import { workspaceAlias } from "../../vitest.shared.ts";

export default defineProject({
  resolve: { alias: workspaceAlias },
  test: { name: "store-pg", include: ["src/**/*.test.ts", "test/**/*.test.ts"] },
});
