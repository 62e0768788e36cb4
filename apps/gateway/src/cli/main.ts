import { VERSION } from "../version";
import { agentCommand } from "./agent-command";
import { helpText, parseCommandArgs } from "./args";
import { auditTailCommand, auditVerifyCommand } from "./audit-command";
import { CliError, EXIT, errorCode, errorMessage, exitCodeFor, USAGE_CODE, UsageError } from "./cli-errors";
import type { Command } from "./command";
import { demoCommand } from "./demo-command";
import { doctorCommand } from "./doctor-command";
import { gatewayCommand } from "./gateway-command";
import { mcpCommand } from "./mcp-command";
import { type CliIo, processIo } from "./output";
import { policySimulateCommand } from "./policy-command";
import { sendCommand } from "./send-command";
import {
  sessionsDeleteCommand,
  sessionsHistoryCommand,
  sessionsListCommand,
  sessionsResetCommand,
  sessionsStatusCommand,
} from "./sessions-command";
import { spawnCommand } from "./spawn-command";
import { tailCommand } from "./tail-command";
import { upCommand } from "./up-command";

export const COMMANDS: readonly Command[] = [
  upCommand,
  gatewayCommand,
  agentCommand,
  sessionsListCommand,
  sessionsHistoryCommand,
  sessionsStatusCommand,
  sessionsResetCommand,
  sessionsDeleteCommand,
  sendCommand,
  spawnCommand,
  tailCommand,
  auditVerifyCommand,
  auditTailCommand,
  policySimulateCommand,
  doctorCommand,
  demoCommand,
  mcpCommand,
];

/** Command words that only group subcommands (`sessions list`). */
const GROUPS = new Set(
  COMMANDS.filter((command) => command.spec.name.includes(" ")).map(
    (command) => command.spec.name.split(" ")[0]!,
  ),
);

const TOP_USAGE = "usage: switchboard <command> [arguments] [options]";

function overview(): string {
  const width = Math.max(
    ...COMMANDS.map(
      (command) => command.spec.name.length + (command.spec.args ? command.spec.args.length + 1 : 0),
    ),
  );
  const lines = [
    TOP_USAGE,
    "",
    "Switchboard: a session gateway for AI agents. Commands:",
    "",
    ...COMMANDS.map((command) => {
      const name = `${command.spec.name}${command.spec.args ? ` ${command.spec.args}` : ""}`;
      return `  ${name.padEnd(width)}  ${command.spec.brief ?? firstSentence(command.spec.summary)}`;
    }),
    "",
    "Run `switchboard <command> --help` for a command's options. Exit codes: 0 ok, 1 failure,",
    "2 usage or config error, 3 refused by the gateway (FORBIDDEN / UNAUTHORIZED / policy).",
  ];
  return `${lines.join("\n")}\n`;
}

function groupHelp(group: string): string {
  const members = COMMANDS.filter((command) => command.spec.name.startsWith(`${group} `));
  const lines = [
    `usage: switchboard ${group} <${members.map((command) => command.spec.name.split(" ")[1]).join("|")}> [options]`,
    "",
  ];
  for (const command of members) {
    lines.push(
      `  ${`${command.spec.name}${command.spec.args ? ` ${command.spec.args}` : ""}`.padEnd(32)}  ${firstSentence(command.spec.summary)}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

function firstSentence(text: string): string {
  const end = text.indexOf(". ");
  return end === -1 ? text.replace(/\.$/, "") : text.slice(0, end);
}

function findCommand(argv: readonly string[]): { command: Command; rest: string[] } {
  const [first, second] = argv;
  if (first === undefined) throw new UsageError("missing command", TOP_USAGE);
  if (GROUPS.has(first)) {
    if (second === undefined || second === "--help" || second === "-h") {
      throw new UsageError(
        second === undefined ? `missing ${first} subcommand` : "",
        groupHelp(first).trimEnd(),
        first,
      );
    }
    const command = COMMANDS.find((candidate) => candidate.spec.name === `${first} ${second}`);
    if (!command)
      throw new UsageError(`unknown command "${first} ${second}"`, groupHelp(first).trimEnd(), first);
    return { command, rest: argv.slice(2) };
  }
  const command = COMMANDS.find((candidate) => candidate.spec.name === first);
  if (!command) throw new UsageError(`unknown command "${first}"`, TOP_USAGE);
  return { command, rest: argv.slice(1) };
}

/** Runs the CLI with `argv` (without `node` and the script); resolves to the exit code. */
export async function runCli(
  argv: readonly string[],
  io: CliIo = processIo,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const [first] = argv;
  if (first === undefined) {
    io.err(overview());
    return EXIT.usage;
  }
  if (first === "--help" || first === "-h" || first === "help") {
    io.out(overview());
    return EXIT.ok;
  }
  if (first === "--version" || first === "-V" || first === "version") {
    io.out(VERSION);
    return EXIT.ok;
  }
  const json = argv.includes("--json");
  // With --json, a failure is also reported on stdout, unless the command already printed its result there.
  let printed = false;
  const tracked: CliIo = {
    out: (text) => {
      printed = true;
      io.out(text);
    },
    err: (text) => io.err(text),
    interactive: io.interactive,
  };
  try {
    const { command, rest } = findCommand(argv);
    const args = parseCommandArgs(command.spec, rest);
    if (args.help) {
      io.out(helpText(command.spec));
      return EXIT.ok;
    }
    return await command.run({ io: tracked, args, env });
  } catch (error) {
    const exitCode = exitCodeFor(error);
    if (error instanceof UsageError) {
      // `sessions --help` arrives here with an empty message: the group's help is the answer.
      if (error.message === "") {
        io.out(`${error.usage ?? TOP_USAGE}\n`);
        return EXIT.ok;
      }
      io.err(`switchboard: ${error.message}`);
      io.err(error.usage ?? TOP_USAGE);
      io.err(`Run 'switchboard ${error.command ?? ""}${error.command ? " " : ""}--help' for details.`);
      // A script reading stdout must see the failure too, not an empty string it cannot parse.
      if (json && !printed)
        io.out(
          JSON.stringify({
            ok: false,
            error: { code: USAGE_CODE, message: error.message, usage: error.usage ?? TOP_USAGE },
          }),
        );
    } else {
      const code = errorCode(error);
      io.err(`switchboard: ${errorMessage(error)}`);
      if (json && !printed) {
        const details = error instanceof CliError ? error.details : undefined;
        io.out(
          JSON.stringify({
            ok: false,
            error: { ...(code ? { code } : {}), message: errorMessage(error), ...details },
          }),
        );
      }
    }
    return exitCode;
  }
}
