import { classifyKey, deriveChannel } from "../keys/classify";
import { parseKey } from "../keys/parse-key";
import type { PolicyContext, SessionFacts } from "./context";

/** Session facts for a canonical key, with everything a test does not care about at its default. */
export function sessionFacts(key: string, overrides: Partial<SessionFacts> = {}): SessionFacts {
  return {
    key,
    agentId: parseKey(key).agentId,
    kind: classifyKey(key),
    channel: deriveChannel(key),
    taint: "PUBLIC",
    clearance: "RESTRICTED",
    ...overrides,
  };
}

export const MAIN = "agent:main:main";
export const DISCORD_GROUP = "agent:main:discord:group:dev";

export function sendContext(
  caller: Partial<SessionFacts>,
  target: Partial<SessionFacts>,
  extra: Partial<PolicyContext> = {},
): PolicyContext {
  return {
    hook: "PRE_SEND",
    caller: sessionFacts(caller.key ?? MAIN, caller),
    target: sessionFacts(target.key ?? DISCORD_GROUP, target),
    ...extra,
  };
}
