import { z } from "zod";

/** Classification levels, lowest first. Order matters: index is rank. */
export const LEVELS = ["PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED"] as const;
export const LevelSchema = z.enum(LEVELS, {
  error: () => `must be one of ${LEVELS.join(", ")}`,
});
export type Level = z.infer<typeof LevelSchema>;
