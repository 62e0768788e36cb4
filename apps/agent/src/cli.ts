#!/usr/bin/env node
import { runAgentCli } from "./agent-cli";
import { EXIT } from "./exit-codes";

runAgentCli(process.argv.slice(2)).then(
  (code) => {
    // Exit explicitly: a lingering socket or timer must not keep a stopped worker alive.
    process.exit(code);
  },
  (error: unknown) => {
    process.stderr.write(
      `switchboard-agent: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(EXIT.failure);
  },
);
