// Preloaded with `node --import` by the CLI's start-up test: records the URL of every module the
// process loads (one a line) in the file named by SWITCHBOARD_TEST_IMPORTS_LOG.
import { register } from "node:module";

register(new URL("./record-imports-hooks.mjs", import.meta.url));
