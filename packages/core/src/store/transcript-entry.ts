import { z } from "zod";
import { LevelSchema } from "../labels/level";

export const TRANSCRIPT_FORMAT_VERSION = 1;

export const ProvenanceSchema = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("user"), channel: z.string().optional(), from: z.string().optional() }),
  z.object({
    kind: z.literal("agent"),
    fromSessionKey: z.string(),
    fromRunId: z.string(),
    chainId: z.string(),
    hop: z.number().int().nonnegative(),
    step: z.enum(["send", "reply", "announce"]).optional(),
  }),
  z.object({ kind: z.literal("subagent"), childSessionKey: z.string(), runId: z.string() }),
  z.object({ kind: z.literal("operator"), actor: z.string().optional() }),
  z.object({ kind: z.literal("system") }),
]);
export type Provenance = z.infer<typeof ProvenanceSchema>;

export const ContentPartSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text"), text: z.string() }),
  z.object({
    type: z.literal("toolCall"),
    id: z.string(),
    name: z.string(),
    args: z.record(z.string(), z.unknown()),
  }),
  z.object({ type: z.literal("toolResult"), toolCallId: z.string(), name: z.string(), result: z.unknown() }),
]);
export type ContentPart = z.infer<typeof ContentPartSchema>;

export const MessageRoleSchema = z.enum(["user", "assistant", "toolCall", "toolResult", "system"]);
export type MessageRole = z.infer<typeof MessageRoleSchema>;

export const TranscriptMessageSchema = z.object({
  role: MessageRoleSchema,
  content: z.array(ContentPartSchema),
});
export type TranscriptMessage = z.infer<typeof TranscriptMessageSchema>;

export const TaintRecordSchema = z.object({
  from: LevelSchema,
  to: LevelSchema,
  reason: z.string(),
  source: z.string(),
});

/** What a caller hands to `append`: the store assigns `seq`, and `id`/`ts` when absent. */
export const TranscriptEntryInputSchema = z.object({
  type: z.enum(["message", "taint", "event"]),
  id: z.string().min(1).max(128).optional(),
  ts: z.number().int().nonnegative().optional(),
  label: LevelSchema,
  runId: z.string().optional(),
  provenance: ProvenanceSchema.optional(),
  message: TranscriptMessageSchema.optional(),
  taint: TaintRecordSchema.optional(),
  event: z.object({ name: z.string(), data: z.record(z.string(), z.unknown()).optional() }).optional(),
});
export type TranscriptEntryInput = z.input<typeof TranscriptEntryInputSchema>;

export const TranscriptEntrySchema = TranscriptEntryInputSchema.extend({
  seq: z.number().int().positive(),
  id: z.string().min(1).max(128),
  ts: z.number().int().nonnegative(),
});
export type TranscriptEntry = z.infer<typeof TranscriptEntrySchema>;

export const TranscriptHeaderSchema = z.object({
  type: z.literal("session"),
  version: z.number().int().positive(),
  sessionId: z.uuid(),
  key: z.string(),
  createdAt: z.number().int().nonnegative(),
});
export type TranscriptHeader = z.infer<typeof TranscriptHeaderSchema>;

/** Plain text of a message: its text parts joined. */
export function messageText(message: TranscriptMessage | undefined): string {
  if (!message) return "";
  return message.content
    .filter((part): part is Extract<ContentPart, { type: "text" }> => part.type === "text")
    .map((part) => part.text)
    .join("");
}
