import { z } from "zod";
import { recipientChain, type SessionKind } from "../keys/classify";
import { plainRecord } from "../plain-record";
import { type Level, LevelSchema, LOWEST_LEVEL, minLevel } from "./level";

/** Agent clearance when the config sets none. */
export const DEFAULT_CLEARANCE: Level = "RESTRICTED";

/**
 * A label table whose names are looked up case-insensitively (`lookup`): two names that differ
 * only in case would name one channel with two labels, and which one applied depended on the
 * spelling of the lookup (`Guest` CONFIDENTIAL, `guest` PUBLIC). Refused, naming both.
 */
const labelTable = () =>
  plainRecord(LevelSchema).superRefine((table, context) => {
    const seen = new Map<string, string>();
    for (const name of Object.keys(table)) {
      const earlier = seen.get(name.toLowerCase());
      if (earlier !== undefined)
        context.addIssue({
          code: "custom",
          path: [name],
          message: `names the same as "${earlier}" (names are compared case-insensitively): keep one`,
        });
      else seen.set(name.toLowerCase(), name);
    }
  });

/** `labels` in the config: classifications of channels, `<channel>:<to>` recipients and tools. */
export const LabelsConfigSchema = z.strictObject({
  channels: labelTable().optional(),
  recipients: labelTable().optional(),
  tools: labelTable().optional(),
});
export type LabelsConfig = z.infer<typeof LabelsConfigSchema>;

/**
 * Case-insensitive lookup: `Discord` and `discord` must get the same label, otherwise a channel
 * adapter could under-label inbound data by changing case.
 */
function lookup(table: Record<string, Level> | undefined, name: string): Level | undefined {
  if (!table) return undefined;
  if (Object.hasOwn(table, name)) return table[name];
  const lowered = name.toLowerCase();
  for (const [key, level] of Object.entries(table)) if (key.toLowerCase() === lowered) return level;
  return undefined;
}

/** The recipients table key for a channel recipient. */
export function recipientLabelKey(channel: string, to: string): string {
  return `${channel}:${to}`;
}

/**
 * Classification of a channel, or of one recipient on it: the lowest of the channel's and the
 * recipient's labels that are set, and PUBLIC when none is (unlabelled means "assume anyone can read
 * it"). A thread's recipient (`lobby:thread:42`) also takes the labels of the chats it is in, so it
 * is never classified above the chat whose members read it.
 */
export function channelLevel(labels: LabelsConfig | undefined, channel: string, to?: string): Level {
  let level = lookup(labels?.channels, channel);
  if (to !== undefined && labels?.recipients) {
    for (const recipient of recipientChain(to)) {
      const label = lookup(labels.recipients, recipientLabelKey(channel, recipient));
      if (label) level = level ? minLevel(level, label) : label;
    }
  }
  return level ?? LOWEST_LEVEL;
}

/** Label of a tool's results; PUBLIC unless configured. */
export function toolLevel(labels: LabelsConfig | undefined, toolName: string): Level {
  return lookup(labels?.tools, toolName) ?? LOWEST_LEVEL;
}

/** Kinds whose sessions are bound to an outside channel (group/channel chats and direct chats). */
export const OUTSIDE_CHANNEL_KINDS: readonly SessionKind[] = ["group", "other"];

export interface ClearanceInput {
  kind: SessionKind;
  /** The agent's configured clearance; DEFAULT_CLEARANCE when unset. */
  agentClearance?: Level;
  /** `channelLevel(...)` of the session's channel (and recipient). */
  channelLevel: Level;
  /** An operator's explicit per-session clearance (`sessions.patch`); wins when set. */
  override?: Level;
}

/**
 * Clearance of a new session: outside-channel sessions (group and other/direct chats) get
 * min(agent clearance, channel classification); main, cron, hook, node and sub-agent sessions
 * get the agent's clearance. An `other` session with no known channel therefore gets PUBLIC
 * clearance once labels are configured: unknown provenance is treated as public.
 */
export function resolveClearance(input: ClearanceInput): Level {
  if (input.override) return input.override;
  const agent = input.agentClearance ?? DEFAULT_CLEARANCE;
  return OUTSIDE_CHANNEL_KINDS.includes(input.kind) ? minLevel(agent, input.channelLevel) : agent;
}

/** Clearance of a spawned session: min(requester clearance, target agent clearance). */
export function spawnClearance(
  requesterClearance: Level,
  targetAgentClearance: Level = DEFAULT_CLEARANCE,
): Level {
  return minLevel(requesterClearance, targetAgentClearance);
}
