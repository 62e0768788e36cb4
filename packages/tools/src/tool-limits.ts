/** Defaults, clamps and allowed values of the tool parameters (tools.md). */

export const SESSION_KINDS = ["main", "group", "cron", "hook", "node", "subagent", "other"] as const;
export type SessionKind = (typeof SESSION_KINDS)[number];

export const SPAWN_CLEANUP_MODES = ["delete", "keep"] as const;
export const SUMMARIZE_SCOPES = ["session", "topic"] as const;

/** Cap on one `sessions_history` result, in UTF-8 bytes of its JSON. */
export const HISTORY_MAX_BYTES = 65536;
export const SPAWN_LABEL_MAX_LENGTH = 64;

export interface IntegerRange {
  readonly default: number;
  readonly min: number;
  readonly max: number;
}

export const SESSIONS_LIST_LIMIT: IntegerRange = { default: 50, min: 1, max: 200 };
export const SESSIONS_LIST_MESSAGE_LIMIT: IntegerRange = { default: 0, min: 0, max: 20 };
export const HISTORY_LIMIT: IntegerRange = { default: 50, min: 1, max: 500 };
export const SEND_TIMEOUT_SECONDS: IntegerRange = { default: 30, min: 0, max: 600 };
