#!/usr/bin/env node
import { runCli } from "./cli/main";

const code = await runCli(process.argv.slice(2));
process.exitCode = code;
// Everything is closed by now; a handle some library left open must not keep the CLI alive.
setTimeout(() => process.exit(code), 3000).unref();
