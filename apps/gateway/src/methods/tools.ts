import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

/** Tool calls made over the protocol (by a worker for its run, or an operator acting `as` a session). */
export function toolMethods({
  access,
  tools,
  toolCalls,
}: Pick<MethodDeps, "access" | "tools" | "toolCalls">): Handlers<"tools.list" | "tools.invoke"> {
  return {
    "tools.list": async (params, connection) => {
      const { entry } = await access.toolCaller(connection, params);
      return { tools: tools.definitionsFor(entry).list };
    },
    "tools.invoke": async (params, connection) => {
      const { caller, entry } = await access.toolCaller(connection, params);
      return toolCalls.invoke(caller, entry, params.tool, params.args, params.toolCallId);
    },
  };
}
