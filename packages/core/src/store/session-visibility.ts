import { z } from "zod";
import { formatZodIssues, SwitchboardError } from "../errors";
import { classifyKey } from "../keys/index";
import { canFlowTo, LevelSchema } from "../labels/level";
import { matchesAgentPattern } from "../policy/agent-to-agent";
import type { SessionEntry } from "./session-entry";

/**
 * Which rows of `sessions.list` a caller may see, as plain data, so a networked store can apply it
 * in its query (SQL `WHERE`) instead of calling back into the gateway per row. It is what core's
 * discovery rules (`compileDiscovery`) decide from the row alone; the engine's user rules are not
 * data and stay a `residual` check in the gateway.
 */
export const SessionVisibilitySchema = z.strictObject({
  /** The caller's own row: always visible, and the anchor of `sandboxed`. */
  selfKey: z.string().min(1),
  /** Rows whose taint is above this are withheld (no read up). */
  maxTaint: LevelSchema,
  /**
   * Agents whose rows may be seen: `"all"`, or agent-id globs (`*` any run, `?` one character,
   * case-insensitive; a SQL store maps them to `ILIKE`). An empty list admits no row but `selfKey`.
   */
  agents: z.union([z.literal("all"), z.array(z.string().min(1))]),
  /** A sandboxed caller sees only `selfKey` and the rows it spawned (`spawnedBy === selfKey`). */
  sandboxed: z.boolean(),
});
export type SessionVisibility = z.infer<typeof SessionVisibilitySchema>;

/** A per-row check that cannot be data (user policy rules); it runs in the gateway, never in a store. */
export type ResidualVisibility = (entry: SessionEntry) => boolean;

/**
 * Compiles a visibility filter once per list: agent ids are matched against the globs once each
 * and remembered, so a row costs a few comparisons. `residual` is asked only for rows the data part
 * admits, other than `selfKey` (the caller always sees its own row).
 */
export function compileSessionVisibility(
  visibility: SessionVisibility,
  residual?: ResidualVisibility,
): (entry: SessionEntry) => boolean {
  const parsed = SessionVisibilitySchema.safeParse(visibility);
  if (!parsed.success) {
    throw new SwitchboardError("INVALID_REQUEST", formatZodIssues(parsed.error, "visibility").join("; "), {
      details: { field: "visibility" },
    });
  }
  const { selfKey, maxTaint, agents, sandboxed } = parsed.data;
  const known = new Map<string, boolean>();
  const agentAllowed =
    agents === "all"
      ? () => true
      : (agentId: string): boolean => {
          let allowed = known.get(agentId);
          if (allowed === undefined) {
            allowed = agents.some((pattern) => matchesAgentPattern(pattern, agentId));
            known.set(agentId, allowed);
          }
          return allowed;
        };
  return (entry) => {
    if (entry.key === selfKey) return true;
    if (!canFlowTo(entry.taint, maxTaint)) return false;
    if (!agentAllowed(entry.agentId)) return false;
    if (sandboxed && entry.spawnedBy !== selfKey) return false;
    return residual ? residual(entry) : true;
  };
}

export type SessionClassifier = (entry: SessionEntry) => string;

const classifiers = new Map<string, SessionClassifier>();
const MAX_CLASSIFIERS = 16;

/**
 * Core's key rules for a gateway's `mainKey`, as one stable function per `mainKey` (stores cache
 * kinds per classifier function; a SQL store computes the same kind with its own expression).
 */
export function sessionClassifierFor(mainKey = "main"): SessionClassifier {
  let classify = classifiers.get(mainKey);
  if (!classify) {
    if (classifiers.size >= MAX_CLASSIFIERS) classifiers.clear();
    classify = (entry) =>
      classifyKey(entry.key, { mainKey, ...(entry.chatType ? { chatType: entry.chatType } : {}) });
    classifiers.set(mainKey, classify);
  }
  return classify;
}

/** The kind core's key rules give an entry (default `mainKey`); stores use it when the caller gives none. */
export const defaultSessionClassifier: SessionClassifier = sessionClassifierFor("main");
