import { z } from "zod";
import { keyRest, tryParseKey } from "./parse-key";

export const SESSION_KINDS = ["main", "group", "cron", "hook", "node", "subagent", "other"] as const;
export const SessionKindSchema = z.enum(SESSION_KINDS, {
  error: () => `must be one of ${SESSION_KINDS.join(", ")}`,
});
export type SessionKind = z.infer<typeof SessionKindSchema>;

const SESSION_KIND_SET: ReadonlySet<string> = new Set(SESSION_KINDS);

/** Exact (case-sensitive) membership, for filtering caller-given kind lists. */
export function isSessionKind(value: string): value is SessionKind {
  return SESSION_KIND_SET.has(value);
}

export const CHAT_TYPES = ["direct", "group", "channel"] as const;
export const ChatTypeSchema = z.enum(CHAT_TYPES, { error: () => `must be one of ${CHAT_TYPES.join(", ")}` });
export type ChatType = z.infer<typeof ChatTypeSchema>;
/** A destination whose chat type the gateway cannot tell (see `RecipientFacts.chatType`). */
export const UNKNOWN_CHAT_TYPE = "unknown";

export interface ClassifyOptions {
  /** `session.mainKey` (default `main`). */
  mainKey?: string;
  /** The entry's explicit chat type; `group`/`channel` make the session a `group`. */
  chatType?: ChatType;
}

/**
 * The chat type a key's shape implies: `<channel>:group:<id>` → group, `<channel>:channel:<id>` →
 * channel, `<channel>:dm:<peer>` → direct, anything else → undefined. A `:thread:<id>` suffix
 * does not change it. Works on canonical and bare keys.
 */
export function chatTypeFromKey(key: string): ChatType | undefined {
  const segments = keyRest(key).split(":");
  // The marker must follow a channel name and be followed by an id.
  for (let i = 1; i < segments.length - 1; i++) {
    const segment = segments[i];
    if (segment === "group" || segment === "channel") return segment;
    if (segment === "dm") return "direct";
    if (segment === "thread") return undefined;
  }
  return undefined;
}

/**
 * A recipient id and the chats it is a thread of, innermost first: `lobby:thread:42` →
 * [`lobby:thread:42`, `lobby`]. keys.md: a `:thread:<id>` suffix keeps the parent's kind — a thread
 * is read by the members of its chat, so a label or a send-policy rule set on the chat must hold in
 * its threads too (otherwise a thread suffix would be a way around both).
 */
export function recipientChain(to: string): string[] {
  const chain = [to];
  let current = to;
  for (;;) {
    const at = current.toLowerCase().lastIndexOf(":thread:");
    if (at <= 0) return chain;
    current = current.slice(0, at);
    chain.push(current);
  }
}

/**
 * The kind of a session (keys.md "Kind classification"), decided on `<rest>` after stripping
 * `agent:<id>:`, so `agent:main:cron:x` is `cron`. The internal `global` key is the main session
 * of `session.scope = "global"`; `unknown` is `other`.
 */
export function classifyKey(key: string, options: ClassifyOptions | ChatType = {}): SessionKind {
  const { mainKey = "main", chatType } = typeof options === "string" ? { chatType: options } : options;
  if (key === "global") return "main";
  const rest = keyRest(key);
  if (rest === mainKey) return "main";
  if (rest.startsWith("cron:")) return "cron";
  if (rest.startsWith("hook:")) return "hook";
  if (/^node-[^:]/.test(rest)) return "node";
  if (rest.startsWith("subagent:")) return "subagent";
  if (chatType === "group" || chatType === "channel") return "group";
  const implied = chatTypeFromKey(rest);
  if (implied === "group" || implied === "channel") return "group";
  return "other";
}

export interface ChannelHints {
  channel?: string;
  lastChannel?: string;
  chatType?: ChatType;
}

/**
 * The channel of a session for rows and policy: `internal` for cron/hook/node sessions; else the
 * entry's `channel`, else its `lastChannel`, else the first segment of `<rest>` when the key has a
 * recognisable chat shape (`<channel>:group|channel:<id>`, and also `<channel>:dm:<peer>` direct
 * chats, which name their channel the same way), else `unknown`. Channel names are lower-cased so
 * label and policy lookups cannot be dodged by case.
 */
export function deriveChannel(key: string, entry: ChannelHints = {}, mainKey = "main"): string {
  const kind = classifyKey(key, { mainKey, ...(entry.chatType ? { chatType: entry.chatType } : {}) });
  if (kind === "cron" || kind === "hook" || kind === "node") return "internal";
  if (entry.channel) return entry.channel.toLowerCase();
  if (entry.lastChannel) return entry.lastChannel.toLowerCase();
  if (chatTypeFromKey(key) !== undefined) {
    const channel = keyRest(key).split(":")[0];
    if (channel) return channel.toLowerCase();
  }
  return "unknown";
}

/**
 * How a key is shown to a caller: its own main session as `main` (also the internal `global`
 * main session of global scope), every other key canonical. Without a caller (operator) keys are
 * shown canonical.
 */
export function displayKey(key: string, callerKey?: string, mainKey = "main"): string {
  if (key === "global") return "main";
  if (callerKey === undefined) return key;
  const caller = tryParseKey(callerKey);
  if (caller && key === `agent:${caller.agentId}:${mainKey}`) return "main";
  return key;
}
