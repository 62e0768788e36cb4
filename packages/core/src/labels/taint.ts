import { z } from "zod";
import { type Level, LevelSchema, levelRank } from "./level";

/** One rise of a session's taint, as recorded in its transcript. */
export const TaintEventSchema = z.object({
  at: z.number(),
  from: LevelSchema,
  to: LevelSchema,
  reason: z.string(),
  source: z.string(),
});
export type TaintEvent = z.infer<typeof TaintEventSchema>;

export interface TaintCause {
  /** Time of the rise (ms since epoch); passed in so the function stays pure. */
  at: number;
  /** Why, e.g. `read history`, `message from agent:main:main`. */
  reason: string;
  /** Where the data came from: a session key, `channel:<name>`, `tool:<name>`. */
  source: string;
}

export interface TaintEscalation {
  taint: Level;
  /** Present only when the taint actually rose. */
  event?: TaintEvent;
}

/**
 * Taint is a high-water mark: taking in data at `incoming` raises it to max(current, incoming)
 * and never lowers it (only a session reset does, outside this function).
 */
export function escalateTaint(current: Level, incoming: Level, cause: TaintCause): TaintEscalation {
  if (levelRank(incoming) <= levelRank(current)) return { taint: current };
  return {
    taint: incoming,
    event: { at: cause.at, from: current, to: incoming, reason: cause.reason, source: cause.source },
  };
}
