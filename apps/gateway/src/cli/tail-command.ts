import type { EventName } from "@switchboard/core";
import { EVENT_NAMES } from "@switchboard/core";
import {
  CLIENT_OPTIONS,
  type CommandSpec,
  JSON_OPTION,
  listOption,
  numberOption,
  stringOption,
  usageLine,
} from "./args";
import { EXIT, UsageError } from "./cli-errors";
import type { Command } from "./command";
import { describeEvent } from "./event-text";
import { withOperator } from "./gateway-client";
import { clock } from "./output";

const spec: CommandSpec = {
  name: "tail",
  brief: "live events until Ctrl-C",
  summary:
    "Prints the gateway's live events (runs, tool calls, replies, deliveries, taint, blocks) until Ctrl-C.",
  positionals: { min: 0, max: 0 },
  options: {
    session: { type: "string", value: "KEY", description: "only events of this session" },
    events: { type: "string", value: "LIST", description: `only these events (${EVENT_NAMES.join(", ")})` },
    after: { type: "string", value: "SEQ", description: "first replay the events after this seq" },
    max: { type: "string", value: "N", description: "exit after N events shown" },
    verbose: {
      type: "boolean",
      short: "v",
      description: "also text deltas, session updates and audit appends",
    },
    ...JSON_OPTION,
    ...CLIENT_OPTIONS,
  },
  details: `With --json, every event is one line of JSON: {"seq", "event", "payload"}.

Examples:
  switchboard tail
  switchboard tail --session main --events run.ended,delivery --json`,
};

export const tailCommand: Command = {
  spec,
  async run({ io, args }) {
    const { values } = args;
    const after = numberOption(spec, values, "after", {
      min: 0,
      max: Number.MAX_SAFE_INTEGER,
      integer: true,
    });
    const max = numberOption(spec, values, "max", { min: 1, max: Number.MAX_SAFE_INTEGER, integer: true });
    const names = listOption(spec, values, "events");
    const unknown = names?.filter((name) => !(EVENT_NAMES as string[]).includes(name));
    if (unknown?.length) {
      throw new UsageError(
        `--events: unknown event ${unknown.join(", ")} (known: ${EVENT_NAMES.join(", ")})`,
        usageLine(spec),
        spec.name,
      );
    }
    const sessionKey = stringOption(values, "session");
    return withOperator(
      io,
      values,
      async (client) => {
        let count = 0;
        const stop = new AbortController();
        const onSignal = () => stop.abort();
        process.once("SIGINT", onSignal);
        process.once("SIGTERM", onSignal);
        const iterator = client.events(names ? { events: names as EventName[] } : {});
        stop.signal.addEventListener("abort", () => void iterator.return?.());
        try {
          await client.subscribe({
            ...(sessionKey ? { sessionKey } : {}),
            ...(after !== undefined ? { after } : {}),
          });
          io.err(`listening on ${sessionKey ?? "all sessions"}; Ctrl-C to stop`);
          for await (const event of iterator) {
            if (values.json)
              io.out(JSON.stringify({ seq: event.seq, event: event.event, payload: event.payload }));
            else {
              const line = describeEvent(event, { verbose: values.verbose === true || names !== undefined });
              // `--max` counts the events shown: one this view hides (without -v) is not one of them.
              if (!line) continue;
              io.out(
                `${clock(Date.now())}  #${event.seq}  ${event.event.padEnd(14)} ${line.actor.padEnd(20)} ${line.text}`,
              );
            }
            count += 1;
            if (max !== undefined && count >= max) break;
          }
        } finally {
          process.off("SIGINT", onSignal);
          process.off("SIGTERM", onSignal);
        }
        return EXIT.ok;
      },
      { reconnect: true },
    );
  },
};
