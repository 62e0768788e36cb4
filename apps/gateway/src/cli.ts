#!/usr/bin/env node
import { EXIT } from "./cli/cli-errors";
import { runCli } from "./cli/main";
import { guardOutput, outputFailed } from "./cli/output";

// Before anything writes: log lines go to stderr directly, not through the CLI's own output.
guardOutput();
const result = await runCli(process.argv.slice(2));
// A command that "succeeded" while its output could not be written did not deliver its result.
process.exitCode = result === EXIT.ok && outputFailed() ? EXIT.failure : result;
// Everything is closed by now; a handle some library left open must not keep the CLI alive.
setTimeout(() => process.exit(), 3000).unref();
