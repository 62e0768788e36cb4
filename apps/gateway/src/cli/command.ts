import type { CommandSpec, ParsedArgs } from "./args";
import type { CliIo } from "./output";

export interface CommandContext {
  io: CliIo;
  args: ParsedArgs;
  env: NodeJS.ProcessEnv;
}

/** One CLI command: its spec (flags, help) and what it does; returns the exit code. */
export interface Command {
  spec: CommandSpec;
  run(context: CommandContext): Promise<number>;
}
