import { z } from "zod";

/** Where the gateway asks the policy engine (labels-and-policy.md "Policy engine"). */
export const HOOKS = ["PRE_TOOL_CALL", "PRE_HISTORY", "PRE_SEND", "PRE_SPAWN", "PRE_OUTPUT"] as const;
export const HookSchema = z.enum(HOOKS, { error: () => `must be one of ${HOOKS.join(", ")}` });
export type Hook = z.infer<typeof HookSchema>;
