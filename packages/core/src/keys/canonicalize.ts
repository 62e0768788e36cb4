import { SwitchboardError } from "../errors";
import { normalizeAgentId } from "./agent-id";
import { isInternalKey } from "./parse-key";
import { validateKey } from "./validate-key";

export interface KeyContext {
  /** Agent of the calling session; absent for operator calls. */
  callerAgentId?: string;
  /** The configured default agent (marked `default: true`, else the first, else `main`). */
  defaultAgentId: string;
  /** `session.mainKey` (default `main`). */
  mainKey: string;
  /** `session.scope`; with `global`, every main-session reference resolves to the internal `global`. */
  scope?: "per-sender" | "global";
  /** Field named in error messages (default `sessionKey`). */
  field?: string;
  /** Accept the internal keys `global`/`unknown` as input (gateway-internal callers only). */
  allowInternal?: boolean;
}

const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return typeof value === "string" && UUID_PATTERN.test(value);
}

/** The canonical key of an agent's main session: `agent:<id>:<mainKey>`. */
export function mainKeyFor(agentId: string, mainKey = "main"): string {
  const key = `agent:${normalizeAgentId(agentId)}:${mainKey}`;
  validateKey(key, "mainKey");
  return key;
}

/** The key of a new sub-agent session: `agent:<id>:subagent:<uuid>`. */
export function makeSubagentKey(agentId: string, uuid: string): string {
  if (!isUuid(uuid)) {
    throw new SwitchboardError("INVALID_REQUEST", `uuid: must be a UUID (got ${JSON.stringify(uuid)})`);
  }
  return `agent:${normalizeAgentId(agentId)}:subagent:${uuid.toLowerCase()}`;
}

/**
 * Turns any accepted key input into its canonical form (keys.md "Aliases"):
 * - `main` → the caller's (operator: default agent's) main session;
 * - a bare key → prefixed with the caller's (operator: default) agent;
 * - `agent:<id>:main` → `agent:<id>:<mainKey>`; the agent id is lower-cased;
 * - with `scope: "global"` any main-session reference → `global`.
 * UUID inputs are not handled here: use {@link resolveKeyInput}.
 */
export function canonicalizeKey(raw: string, ctx: KeyContext): string {
  const field = ctx.field ?? "sessionKey";
  // One key, one session: canonically equivalent spellings (NFC "é" vs NFD "e" + U+0301) look the
  // same to a person and must not make two sessions. Confusables across scripts stay distinct keys
  // (docs/decisions.md, "Unicode in keys").
  const input = typeof raw === "string" ? raw.normalize("NFC") : raw;
  validateKey(input, field);
  if (!ctx.allowInternal && isInternalKey(input)) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `${field}: ${JSON.stringify(input)} is an internal key and cannot be addressed`,
      { details: { field, key: input } },
    );
  }
  const global = ctx.scope === "global";
  if (global && input === "global") return "global";

  let agentId: string;
  let rest: string;
  const segments = input.split(":");
  if (segments[0]?.toLowerCase() === "agent" && segments.length >= 2) {
    if (segments.length < 3) {
      throw new SwitchboardError(
        "INVALID_REQUEST",
        `${field}: agent-prefixed key must be agent:<agentId>:<rest> (got ${JSON.stringify(input)})`,
        { details: { field, key: input } },
      );
    }
    agentId = normalizeAgentId(segments[1] as string, field);
    rest = segments.slice(2).join(":");
  } else {
    agentId = normalizeAgentId(ctx.callerAgentId ?? ctx.defaultAgentId, field);
    rest = input;
  }
  if (rest === "main" || rest === ctx.mainKey) {
    if (global) return "global";
    rest = ctx.mainKey;
  }
  const key = `agent:${agentId}:${rest}`;
  validateKey(key, field);
  return key;
}

/**
 * Like {@link canonicalizeKey}, but a UUID input names the session whose *current* sessionId it
 * is. `lookupSessionId` returns every key with that sessionId (normally zero or one).
 */
export async function resolveKeyInput(
  input: string,
  ctx: KeyContext,
  lookupSessionId: (sessionId: string) => Promise<string[]>,
): Promise<string> {
  const field = ctx.field ?? "sessionKey";
  if (!isUuid(input)) return canonicalizeKey(input, ctx);
  const sessionId = input.toLowerCase();
  const keys = [...new Set(await lookupSessionId(sessionId))].sort();
  if (keys.length === 0) {
    throw new SwitchboardError("NOT_FOUND", `${field}: no session has sessionId ${sessionId}`, {
      details: { field, sessionId },
    });
  }
  if (keys.length > 1) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `${field}: sessionId ${sessionId} is ambiguous; it matches ${keys.join(", ")}`,
      { details: { field, sessionId, keys } },
    );
  }
  const key = keys[0] as string;
  // Under global scope `global` is the main session, reachable by alias and by its sessionId.
  const globalMain = ctx.scope === "global" && key === "global";
  if (!ctx.allowInternal && !globalMain && isInternalKey(key)) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `${field}: sessionId ${sessionId} belongs to an internal session and cannot be addressed`,
      { details: { field, sessionId } },
    );
  }
  return key;
}
