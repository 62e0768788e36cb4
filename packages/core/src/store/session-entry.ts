import { z } from "zod";
import { LevelSchema } from "../labels/level";

export const ChatTypeValues = ["direct", "group", "channel"] as const;

export const DeliveryContextSchema = z.object({
  channel: z.string(),
  to: z.string(),
  accountId: z.string().optional(),
});
export type DeliveryContext = z.infer<typeof DeliveryContextSchema>;

/**
 * One row of the sessions index. The kind is not stored: it is always derived from the key
 * (and `chatType`), so the two can never disagree.
 */
export const SessionEntrySchema = z.object({
  key: z.string().min(1).max(256),
  sessionId: z.uuid(),
  agentId: z.string().min(1).max(64),
  createdAt: z.number().int().nonnegative(),
  updatedAt: z.number().int().nonnegative(),
  taint: LevelSchema,
  clearance: LevelSchema,
  /** True once an operator set the clearance explicitly; it then survives config changes. */
  clearancePinned: z.boolean().optional(),
  channel: z.string().optional(),
  chatType: z.enum(ChatTypeValues).optional(),
  displayName: z.string().max(200).optional(),
  label: z.string().max(64).optional(),
  model: z.string().optional(),
  sendPolicy: z.enum(["allow", "deny"]).optional(),
  spawnedBy: z.string().optional(),
  spawnDepth: z.number().int().nonnegative().optional(),
  lastChannel: z.string().optional(),
  lastTo: z.string().optional(),
  deliveryContext: DeliveryContextSchema.optional(),
  contextTokens: z.number().int().nonnegative().optional(),
  totalTokens: z.number().int().nonnegative().optional(),
  thinkingLevel: z.string().optional(),
  verboseLevel: z.string().optional(),
  systemSent: z.boolean().optional(),
  abortedLastRun: z.boolean().optional(),
  /** Archived sub-agent sessions stay indexed for audit but are hidden from lists. */
  archivedAt: z.number().int().nonnegative().optional(),
});
export type SessionEntry = z.infer<typeof SessionEntrySchema>;

/**
 * A row's activity mark after an append (`SessionIndexStore.touch`): `updatedAt` rises to `at`
 * (never falls) and `totalTokens` grows by `addTokens`, on the row of `key` only while its current
 * sessionId is `sessionId` (a reset in between makes the touch a no-op, not a write to the new row).
 */
export const SessionTouchSchema = z.object({
  sessionId: z.uuid(),
  at: z.number().int().nonnegative(),
  addTokens: z.number().int().nonnegative().optional(),
});
export type SessionTouch = z.infer<typeof SessionTouchSchema>;

/** The row `touch` makes of `row` (the same rule in every store). */
export function touchedRow(row: SessionEntry, touch: SessionTouch): SessionEntry {
  return {
    ...row,
    updatedAt: Math.max(row.updatedAt, touch.at),
    ...(touch.addTokens ? { totalTokens: (row.totalTokens ?? 0) + touch.addTokens } : {}),
  };
}
