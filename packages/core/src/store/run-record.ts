import { z } from "zod";
import { LevelSchema } from "../labels/level";
import { ProvenanceSchema } from "./transcript-entry";

export const LaneSchema = z.enum(["main", "nested", "subagent"]);
export type Lane = z.infer<typeof LaneSchema>;

export const RunStatusSchema = z.enum(["queued", "running", "ok", "error", "timeout"]);
export type RunStatus = z.infer<typeof RunStatusSchema>;
export const TERMINAL_RUN_STATUSES: readonly RunStatus[] = ["ok", "error", "timeout"];

export const UsageSchema = z.object({
  inputTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
});
export type Usage = z.infer<typeof UsageSchema>;

/** A spawned run's bookkeeping; durable so a restart never loses a result. */
export const SpawnRecordSchema = z.object({
  requesterKey: z.string(),
  childKey: z.string(),
  childSessionId: z.string(),
  task: z.string(),
  label: z.string().optional(),
  cleanup: z.enum(["delete", "keep"]),
  announce: z.object({
    status: z.enum(["pending", "delivered", "skipped", "failed"]),
    /** Announce runs made (each under a key of its own, `<idempotencyKey>:<n>` after the first). */
    attempts: z.number().int().nonnegative(),
    /**
     * Of those, the ones that ended with the gateway's process (`RunRecord.lost`): a restart is not
     * the requester failing the announce, so they do not count towards its attempts.
     */
    lostTries: z.number().int().nonnegative().optional(),
    idempotencyKey: z.string(),
    runId: z.string().optional(),
    lastError: z.string().optional(),
  }),
});
export type SpawnRecord = z.infer<typeof SpawnRecordSchema>;

export const RunOriginSchema = z.enum([
  "chat",
  "agent",
  "send",
  "reply",
  "announce",
  "spawn",
  "spawn-announce",
  "summarize",
]);
export type RunOrigin = z.infer<typeof RunOriginSchema>;

/** One run (one agent turn on one session), as the run registry keeps it. */
export const RunRecordSchema = z.object({
  runId: z.string(),
  sessionKey: z.string(),
  sessionId: z.string(),
  agentId: z.string(),
  lane: LaneSchema,
  status: RunStatusSchema,
  createdAt: z.number().int().nonnegative(),
  startedAt: z.number().int().nonnegative().optional(),
  endedAt: z.number().int().nonnegative().optional(),
  timeoutSeconds: z.number().nonnegative().optional(),
  idempotencyKey: z.string().optional(),
  /** Why the run exists: a chat input, an operator `agent` call, an a2a step, a spawn, an announce, a summary. */
  origin: RunOriginSchema,
  message: z.string(),
  /** Label the input message carried (what recovery writes if the input never reached the transcript). */
  label: LevelSchema.optional(),
  context: z.string().optional(),
  provenance: ProvenanceSchema.optional(),
  reply: z.string().optional(),
  error: z.string().optional(),
  /**
   * The session's taint when its worker ended the run with a reply or an error: the label that text
   * carries. Whoever takes it in takes it at least at this label, whatever a reset did since.
   */
  endLabel: LevelSchema.optional(),
  usage: z.object({ inputTokens: z.number(), outputTokens: z.number() }).optional(),
  attempts: z.number().int().nonnegative().default(0),
  spawn: SpawnRecordSchema.optional(),
  /**
   * A send's follow-up (reply turns, announce) on one process: `pending` from the send until it
   * ends, so a restart takes it up again (`RunListQuery.pendingFollowUp`); absent when it has no step.
   */
  followUp: z.enum(["pending", "done"]).optional(),
  /**
   * The run's reply posted to its session's channel (a chat or agent reply; a spawn's announce
   * settles on its own record): `pending` is written before the post and `done` after it, so a
   * restart between the two posts it again (`RunListQuery.pendingReplyPost`); absent when no post
   * was due (no reply, no route).
   */
  replyPost: z.enum(["pending", "done"]).optional(),
  /**
   * Set by the gateway alone when the run ended with its process rather than by its worker's answer:
   * the gateway restarted or shut down while it ran, or the cluster lost the instance holding it. A
   * flow step that ended so never had its turn and is made again; an error a worker reports, whatever
   * its text, never reads as one.
   */
  lost: z.enum(["restart", "shutdown", "instance"]).optional(),
  /** Free-form flow data the scheduler needs to resume (a2a chain ids, hop, waiting parents). */
  flow: z.record(z.string(), z.unknown()).optional(),
});
export type RunRecord = z.infer<typeof RunRecordSchema>;
