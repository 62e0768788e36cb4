/**
 * Defaults, clamps and allowed values shared by the session tools (tools.md) and the protocol
 * methods that serve the same reads (`sessions.list`, `sessions.history`). They live in core,
 * beside the tool and method schemas whose descriptions quote them, so the tools package, the
 * gateway and the schemas cannot drift apart.
 */

export interface IntegerRange {
  readonly default: number;
  readonly min: number;
  readonly max: number;
}

export const SESSIONS_LIST_LIMIT: IntegerRange = { default: 50, min: 1, max: 200 };
export const SESSIONS_LIST_MESSAGE_LIMIT: IntegerRange = { default: 0, min: 0, max: 20 };
export const HISTORY_LIMIT: IntegerRange = { default: 50, min: 1, max: 500 };
export const SEND_TIMEOUT_SECONDS: IntegerRange = { default: 30, min: 0, max: 600 };

/** Cap on one history page (tool result or `sessions.history` default), in UTF-8 bytes of its JSON. */
export const HISTORY_MAX_BYTES = 65536;
export const SPAWN_LABEL_MAX_LENGTH = 64;

export const SPAWN_CLEANUP_MODES = ["delete", "keep"] as const;
export const SUMMARIZE_SCOPES = ["session", "topic"] as const;

/** Floors, then clamps into the range; `undefined` gives the default. */
export function clampInteger(value: number | undefined, range: IntegerRange): number {
  if (value === undefined) return range.default;
  return Math.min(range.max, Math.max(range.min, Math.floor(value)));
}

/**
 * Whole seconds for a timeout: positive fractions round up (a wait of 0.2 s must not become 0,
 * which means "do not wait"), then the range applies; `undefined` gives the default.
 */
export function clampSeconds(value: number | undefined, range: IntegerRange): number {
  if (value === undefined) return range.default;
  return Math.min(range.max, Math.max(range.min, value > 0 ? Math.ceil(value) : 0));
}
