import { defineConfig } from "tsup";

export default defineConfig({
  entry: ["src/index.ts", "src/cli.ts", "src/exit-codes.ts"],
  format: ["esm"],
  dts: { entry: ["src/index.ts", "src/exit-codes.ts"] },
  clean: true,
  sourcemap: true,
  target: "node20",
});
