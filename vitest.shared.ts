import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL(".", import.meta.url));

/** Tests run against the workspace packages' sources, so `vitest` needs no build of the libraries. */
export const workspaceAlias: Record<string, string> = {
  "@switchboard/core/testing": `${root}packages/core/src/testing.ts`,
  "@switchboard/core": `${root}packages/core/src/index.ts`,
  "@switchboard/store-fs/testing": `${root}packages/store-fs/src/testing.ts`,
  "@switchboard/store-fs": `${root}packages/store-fs/src/index.ts`,
  "@switchboard/store-pg/testing": `${root}packages/store-pg/src/testing.ts`,
  "@switchboard/store-pg/url": `${root}packages/store-pg/src/url.ts`,
  "@switchboard/store-pg": `${root}packages/store-pg/src/index.ts`,
  "@switchboard/tools": `${root}packages/tools/src/index.ts`,
  "@switchboard/config-loader": `${root}packages/config-loader/src/index.ts`,
  "@switchboard/client/testing": `${root}packages/client-sdk/src/testing.ts`,
  "@switchboard/client": `${root}packages/client-sdk/src/index.ts`,
  "@switchboard/agent/exit-codes": `${root}apps/agent/src/exit-codes.ts`,
  "@switchboard/agent": `${root}apps/agent/src/index.ts`,
};
