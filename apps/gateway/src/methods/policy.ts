import { type MethodResult, SimulateResultSchema, type ToolResult } from "@switchboard/core";
import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

/** What the rules would decide for a tool call, without making it. */
export function policyMethods({
  access,
  toolCalls,
}: Pick<MethodDeps, "access" | "toolCalls">): Handlers<"policy.simulate"> {
  return {
    "policy.simulate": async (params, connection) => {
      const { caller } = await access.toolCaller(connection, { as: params.as });
      const result = await toolCalls.simulate(caller, params.tool, params.args);
      return simulateResult(result);
    },
  };
}

/**
 * The executor hands the backend's answer through as a loose tool result: a simulation (checked
 * against its schema here, so a drifted shape fails loudly) or a failure with its message.
 */
function simulateResult(result: ToolResult): MethodResult<"policy.simulate"> {
  if (result.status === "ok") return SimulateResultSchema.parse(result);
  return {
    status: result.status,
    error: typeof result.error === "string" ? result.error : "simulation failed",
  };
}
