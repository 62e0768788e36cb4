import { z } from "zod";
import { SwitchboardError } from "../errors";

/** Classification levels, lowest first. Order matters: index is rank. */
export const LEVELS = ["PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED"] as const;
export const LevelSchema = z.enum(LEVELS, {
  error: () => `must be one of ${LEVELS.join(", ")}`,
});
export type Level = z.infer<typeof LevelSchema>;

export const LOWEST_LEVEL: Level = "PUBLIC";
export const HIGHEST_LEVEL: Level = "RESTRICTED";

export function isLevel(value: unknown): value is Level {
  return typeof value === "string" && (LEVELS as readonly string[]).includes(value);
}

/**
 * Rank of a level (PUBLIC = 0). Throws on anything that is not a level, so a corrupted label can
 * never compare as "lowest" and slip through a flow check.
 */
export function levelRank(level: Level): number {
  const rank = (LEVELS as readonly string[]).indexOf(level);
  if (rank < 0) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `level: must be one of ${LEVELS.join(", ")} (got ${JSON.stringify(level)})`,
    );
  }
  return rank;
}

/** Negative when a < b, 0 when equal, positive when a > b. */
export function compareLevels(a: Level, b: Level): number {
  return levelRank(a) - levelRank(b);
}

/** The highest of the given levels; PUBLIC (the bottom) when none are given. */
export function maxLevel(...levels: Level[]): Level {
  let result: Level = LOWEST_LEVEL;
  for (const level of levels) if (levelRank(level) > levelRank(result)) result = level;
  return result;
}

/** The lowest of the given levels; RESTRICTED (the top) when none are given. */
export function minLevel(...levels: Level[]): Level {
  let result: Level = HIGHEST_LEVEL;
  for (const level of levels) if (levelRank(level) < levelRank(result)) result = level;
  return result;
}

/** Data labelled `from` may enter something rated `to` only when from <= to. */
export function canFlowTo(from: Level, to: Level): boolean {
  return levelRank(from) <= levelRank(to);
}

/** Exact, upper-case parse; the error names the field and the allowed values. */
export function parseLevel(value: unknown, field = "level"): Level {
  if (isLevel(value)) return value;
  throw new SwitchboardError(
    "INVALID_REQUEST",
    `${field}: must be one of ${LEVELS.join(", ")} (got ${JSON.stringify(value) ?? String(value)})`,
    { details: { field, allowed: [...LEVELS] } },
  );
}
