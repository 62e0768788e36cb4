import { CLIENT_OPTIONS, type CommandSpec, JSON_OPTION, numberOption, stringOption, usageLine } from "./args";
import { CliError, EXIT, UsageError } from "./cli-errors";
import type { Command } from "./command";
import { withOperator } from "./gateway-client";
import { printJson, withProgress } from "./output";

const spec: CommandSpec = {
  name: "spawn",
  brief: "spawn a sub-agent on behalf of a session (default: main)",
  summary:
    "Spawns a background sub-agent for a task, as if the session given by --as (default: main) called sessions_spawn. Its result is announced back to that session.",
  args: "<task>",
  positionals: { min: 1, max: 1 },
  options: {
    agent: {
      type: "string",
      value: "ID",
      description: "the agent that does the task (default: the requester's agent)",
    },
    as: { type: "string", value: "KEY", description: "the requesting session (default: main)" },
    label: { type: "string", value: "LABEL", description: "a name for the sub-agent (max 64 characters)" },
    timeout: {
      type: "string",
      value: "S",
      description: "run timeout in seconds (default and 0: the agent's timeoutSeconds)",
    },
    cleanup: {
      type: "string",
      value: "MODE",
      description: "keep (default) or delete the child session after its announce",
    },
    wait: {
      type: "string",
      value: "N",
      description: "wait up to N seconds for the sub-agent's findings and print them",
    },
    ...JSON_OPTION,
    ...CLIENT_OPTIONS,
  },
  details: `The call is made by the operator on behalf of the session (audited as an impersonation) and is
checked like the agent's own call: allowlists, spawn depth, children limit and labels apply.

Examples:
  switchboard spawn "look up the weather" --agent research
  switchboard spawn "summarise today's tickets" --label tickets --wait 60`,
};

export const spawnCommand: Command = {
  spec,
  async run({ io, args }) {
    const { values } = args;
    const task = args.positionals[0]!;
    const timeout = numberOption(spec, values, "timeout", { min: 0, max: 86_400, unit: "seconds" });
    const wait = numberOption(spec, values, "wait", { min: 0, max: 600, unit: "seconds" });
    const cleanup = stringOption(values, "cleanup");
    if (cleanup !== undefined && cleanup !== "keep" && cleanup !== "delete") {
      throw new UsageError(
        `--cleanup: must be "keep" or "delete" (got "${cleanup}")`,
        usageLine(spec),
        spec.name,
      );
    }
    const agentId = stringOption(values, "agent");
    const label = stringOption(values, "label");
    const as = stringOption(values, "as") ?? "main";
    return withOperator(io, values, async (client) => {
      // The main session always exists conceptually; on a fresh gateway it has no entry yet.
      if (stringOption(values, "as") === undefined) await client.sessions.create({ key: "main" });
      const result = await client.tools.invoke({
        tool: "sessions_spawn",
        as,
        args: {
          task,
          ...(agentId ? { agentId } : {}),
          ...(label ? { label } : {}),
          ...(timeout !== undefined ? { runTimeoutSeconds: timeout } : {}),
          ...(cleanup ? { cleanup } : {}),
        },
      });
      const refused = result.status === "forbidden";
      if (result.status !== "accepted") {
        if (values.json) printJson(io, result);
        throw new CliError(
          `spawn ${refused ? "refused" : "failed"}: ${String(result.error ?? result.status)}`,
          refused ? EXIT.refused : EXIT.failure,
        );
      }
      const childKey = String(result.childSessionKey);
      const runId = String(result.runId);
      if (result.warning && !values.json) io.err(`warning: ${String(result.warning)}`);
      if (!wait) {
        if (values.json) printJson(io, result);
        else io.out(`spawned ${childKey} (run ${runId}); the result will be announced to ${as}`);
        return EXIT.ok;
      }
      const ended = await withProgress(io, `waiting for ${childKey}`, () =>
        client.agent.wait({ runId, timeoutMs: Math.round(wait * 1000) }),
      );
      if (values.json) printJson(io, { ...result, run: ended });
      else io.err(`spawned ${childKey} (run ${runId})`);
      if (ended.status === "ok") {
        if (!values.json) io.out(ended.reply ?? "");
        return EXIT.ok;
      }
      throw new CliError(
        ended.status === "timeout"
          ? `the sub-agent has not finished within ${wait}s (${ended.error ?? "timeout"}); its result will still be announced to ${as}`
          : `the sub-agent failed: ${ended.error ?? "unknown error"}`,
        EXIT.failure,
      );
    });
  },
};
