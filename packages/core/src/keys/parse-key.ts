import { SwitchboardError } from "../errors";
import { AGENT_ID_PATTERN } from "./agent-id";
import { validateKey } from "./validate-key";

export interface ParsedKey {
  /** Stored (lower-case) agent id. */
  agentId: string;
  /** Everything after `agent:<agentId>:`; never empty. */
  rest: string;
}

/**
 * Keys the gateway uses for itself (`session.scope = "global"` main session, and the bucket for
 * input it cannot attribute). The `agent:<id>:global` / `agent:<id>:unknown` forms are internal
 * too: otherwise a tool could reach them by sending the bare word, which the alias rules would
 * prefix with its own agent.
 */
export const INTERNAL_KEYS = ["global", "unknown"] as const;

const AGENT_PREFIX = "agent:";

/** Splits a canonical key without validating it; undefined when it has no agent prefix. */
export function tryParseKey(key: string): ParsedKey | undefined {
  if (typeof key !== "string" || !key.startsWith(AGENT_PREFIX)) return undefined;
  const end = key.indexOf(":", AGENT_PREFIX.length);
  if (end < 0) return undefined;
  const agentId = key.slice(AGENT_PREFIX.length, end);
  const rest = key.slice(end + 1);
  if (!AGENT_ID_PATTERN.test(agentId) || rest === "") return undefined;
  return { agentId, rest };
}

/**
 * Parses a canonical key `agent:<agentId>:<rest>`. Throws INVALID_REQUEST for anything else,
 * including an upper-case agent id (canonical keys store it lower-cased; use `canonicalizeKey`
 * for user input).
 */
export function parseKey(key: string, field = "sessionKey"): ParsedKey {
  validateKey(key, field);
  const parsed = tryParseKey(key);
  if (!parsed) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `${field}: must be a canonical key agent:<agentId>:<rest> with a lower-case agent id (got ${JSON.stringify(key)})`,
      { details: { field, key } },
    );
  }
  return parsed;
}

/** True when `key` is valid and in canonical `agent:<id>:<rest>` form. */
export function isCanonicalKey(key: string): boolean {
  try {
    parseKey(key);
    return true;
  } catch {
    return false;
  }
}

/**
 * `<rest>` of a key for classification: the key itself when it has no agent prefix, so that
 * bare keys and canonical keys classify the same way.
 */
export function keyRest(key: string): string {
  return tryParseKey(key)?.rest ?? key;
}

/** `global`, `unknown`, `agent:<id>:global`, `agent:<id>:unknown`: never listed, never accepted from tools. */
export function isInternalKey(key: string): boolean {
  const rest = keyRest(key);
  return (INTERNAL_KEYS as readonly string[]).includes(rest);
}
