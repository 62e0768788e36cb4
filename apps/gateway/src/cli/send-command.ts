import { CLIENT_OPTIONS, type CommandSpec, JSON_OPTION, numberOption } from "./args";
import { CliError, EXIT } from "./cli-errors";
import type { Command } from "./command";
import { withOperator } from "./gateway-client";
import { printJson, withProgress } from "./output";
import { lacksWorker, noWorkerText } from "./worker-hint";

const spec: CommandSpec = {
  name: "send",
  brief: "chat input into a session; --wait prints the reply",
  summary:
    "Sends a message into a session as chat input (the session is created if needed). With --wait, waits for the agent's reply and prints it.",
  args: "<key> <message>",
  positionals: { min: 2, max: 2 },
  options: {
    wait: {
      type: "string",
      value: "N",
      description: "wait up to N seconds (0-3600) for the reply and print it",
    },
    "idempotency-key": { type: "string", value: "KEY", description: "the same key twice sends once" },
    ...JSON_OPTION,
    ...CLIENT_OPTIONS,
  },
  details: `Keys: "main" is the default agent's main session; full keys look like agent:research:discord:group:lab.

Examples:
  switchboard send main "ping" --wait 10
  switchboard send agent:main:telegram:dm:42 "hello" --json`,
};

export const sendCommand: Command = {
  spec,
  async run({ io, args }) {
    const [sessionKey, message] = args.positionals as [string, string];
    const waitSeconds = numberOption(spec, args.values, "wait", { min: 0, max: 3600, unit: "seconds" });
    const idempotencyKey = args.values["idempotency-key"];
    return withOperator(io, args.values, async (client) => {
      const accepted = await client.chat.send({
        sessionKey,
        message,
        ...(typeof idempotencyKey === "string" ? { idempotencyKey } : {}),
      });
      if (waitSeconds === undefined || waitSeconds === 0) {
        if (args.values.json) printJson(io, { sessionKey, ...accepted });
        else io.out(`accepted: run ${accepted.runId} on ${sessionKey}`);
        return EXIT.ok;
      }
      const result = await withProgress(io, `waiting for the reply of ${sessionKey}`, () =>
        client.agent.wait({ runId: accepted.runId, timeoutMs: Math.round(waitSeconds * 1000) }),
      );
      if (args.values.json) printJson(io, { sessionKey, ...result });
      if (result.status === "ok") {
        if (!args.values.json) io.out(result.reply ?? "");
        return EXIT.ok;
      }
      const stillGoing =
        result.error?.startsWith("run still in progress") || result.error === "run has not ended yet";
      if (result.status === "timeout" && stillGoing) {
        // The usual reason on a fresh `switchboard gateway`: nobody serves the agent yet.
        const { agentId } = await client.sessions.status({ sessionKey });
        if (await lacksWorker(client, agentId)) {
          throw new CliError(
            `no reply within ${waitSeconds}s: run ${result.runId} is queued, ${noWorkerText(agentId)}`,
            EXIT.failure,
            "TIMEOUT",
          );
        }
        throw new CliError(
          `no reply within ${waitSeconds}s (run ${result.runId} is still going; read it later with: switchboard sessions history ${sessionKey})`,
          EXIT.failure,
          "TIMEOUT",
        );
      }
      const what = result.status === "timeout" ? "the run timed out" : "the run failed";
      throw new CliError(
        `${what}: ${result.error ?? "unknown error"}`,
        EXIT.failure,
        result.status === "timeout" ? "TIMEOUT" : undefined,
      );
    });
  },
};
