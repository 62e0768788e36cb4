import { CLIENT_OPTIONS, type CommandSpec, JSON_OPTION, stringOption, usageLine } from "./args";
import { CliError, EXIT, UsageError } from "./cli-errors";
import type { Command } from "./command";
import { withOperator } from "./gateway-client";
import { formatTable, printJson } from "./output";

const spec: CommandSpec = {
  name: "policy simulate",
  brief: "the decision a tool call would get, and why",
  summary:
    "Shows what the gateway would decide if a session called a tool: the decision, the rule that decided, every rule evaluated and the taint the session would have after. Nothing happens for real.",
  args: "<tool> [<json-args>]",
  positionals: { min: 1, max: 2 },
  options: {
    as: { type: "string", value: "KEY", description: "the calling session (required)" },
    ...JSON_OPTION,
    ...CLIENT_OPTIONS,
  },
  details: `Examples:
  switchboard policy simulate --as main sessions_history '{"sessionKey":"agent:main:webchat:dm:carol"}'
  switchboard policy simulate --as agent:main:webchat:dm:carol sessions_send '{"sessionKey":"agent:main:discord:group:dev","message":"hi"}'`,
};

function parseToolArgs(text: string | undefined): Record<string, unknown> {
  if (text === undefined) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new UsageError(
      `<json-args>: not valid JSON (${(error as Error).message})`,
      usageLine(spec),
      spec.name,
    );
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new UsageError(
      '<json-args>: must be a JSON object, e.g. \'{"sessionKey":"main"}\'',
      usageLine(spec),
      spec.name,
    );
  }
  return value as Record<string, unknown>;
}

export const policySimulateCommand: Command = {
  spec,
  async run({ io, args }) {
    const as = stringOption(args.values, "as");
    if (as === undefined)
      throw new UsageError(
        "missing --as <key> (the session that would call the tool)",
        usageLine(spec),
        spec.name,
      );
    const [tool, rawArgs] = args.positionals as [string, string | undefined];
    const toolArgs = parseToolArgs(rawArgs);
    return withOperator(io, args.values, async (client) => {
      const result = await client.policy.simulate({ as, tool, args: toolArgs });
      if (args.values.json) printJson(io, result);
      // A simulation that could not be made fails with or without --json (a BLOCK decision is an
      // answer, not a failure: exit 0).
      if (!("decision" in result)) {
        const code = result.status === "forbidden" ? EXIT.refused : EXIT.failure;
        if (args.values.json) return code;
        throw new CliError(`simulation failed: ${result.error}`, code);
      }
      if (args.values.json) return EXIT.ok;
      io.out(`decision: ${result.decision}${result.ruleId ? ` (rule ${result.ruleId})` : ""}`);
      if (result.message) io.out(`message:  ${result.message}`);
      io.out(`taint:    ${result.taint.current} → ${result.taint.after}`);
      if (result.evaluated.length > 0) {
        io.out("");
        io.out(
          formatTable(result.evaluated, [
            { header: "RULE", value: (rule) => rule.ruleId },
            { header: "MATCHED", value: (rule) => (rule.matched ? "yes" : "no") },
            { header: "ACTION", value: (rule) => rule.action },
          ]),
        );
      }
      return EXIT.ok;
    });
  },
};
