import { SwitchboardError } from "../errors";

/** Agent ids as stored: lower case, 1..64 characters, starting with a letter or digit. */
export const AGENT_ID_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** The agent used when nothing else names one (no caller, no configured default). */
export const DEFAULT_AGENT_ID = "main";

/**
 * Validates an agent id and returns its stored (lower-case) form. Ids are case-insensitive on
 * input so `Main` and `main` can never become two different agents.
 */
export function normalizeAgentId(id: string, field = "agentId"): string {
  if (typeof id !== "string") {
    throw new SwitchboardError("INVALID_REQUEST", `${field}: must be a string`);
  }
  if (id.length === 0) {
    throw new SwitchboardError("INVALID_REQUEST", `${field}: must not be empty`);
  }
  const lowered = id.toLowerCase();
  if (!AGENT_ID_PATTERN.test(lowered)) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `${field}: agent id ${JSON.stringify(id)} must match ${AGENT_ID_PATTERN.source} ` +
        "(1-64 characters: letters, digits, '_' or '-', starting with a letter or digit)",
    );
  }
  return lowered;
}

/** True when `id` is already a valid, stored-form agent id. */
export function isAgentId(id: unknown): id is string {
  return typeof id === "string" && AGENT_ID_PATTERN.test(id);
}
