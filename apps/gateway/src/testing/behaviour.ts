import type { RunContext, WorkerHandler } from "./test-gateway";

export interface BehaviourOptions {
  /** Reply in reply-back steps (default: `REPLY_SKIP`). */
  replyStep?: (context: RunContext) => string;
  /** Reply in announce steps (default: `ANNOUNCE_SKIP`). */
  announceStep?: (context: RunContext) => string;
}

/**
 * A programmable test agent. Messages are commands:
 * `call <tool> <json args>` invokes a tool through the gateway and replies with the JSON result;
 * `sleep <ms>` replies after a delay; `fail <error>` fails; `silent` never answers; anything else echoes.
 */
export function behaviour(options: BehaviourOptions = {}): WorkerHandler {
  return async (context) => {
    const { message, context: injected } = context.run.input;
    if (injected.includes("Agent-to-agent reply step")) return options.replyStep?.(context) ?? "REPLY_SKIP";
    if (injected.includes("announce step")) return options.announceStep?.(context) ?? "ANNOUNCE_SKIP";
    if (injected.startsWith("Summarize step")) return `summary: ${message.split("\n").length - 1} lines`;
    const call = /^call (\S+)(?: (.*))?$/s.exec(message);
    if (call) {
      const result = await context.invokeTool(call[1]!, call[2] ? JSON.parse(call[2]) : {});
      return JSON.stringify(result);
    }
    const sleep = /^sleep (\d+)$/.exec(message);
    if (sleep) {
      await new Promise((resolve) => setTimeout(resolve, Number(sleep[1])));
      return `slept ${sleep[1]}`;
    }
    const fail = /^fail (.*)$/.exec(message);
    if (fail) return { fail: fail[1]! };
    if (message === "silent") return { ignore: true };
    return `echo: ${message}`;
  };
}
