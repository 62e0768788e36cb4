/**
 * Who performs a flow step that must happen exactly once — a spawn's announce, the background
 * part of a send (reply turns and announce) — right now. One process needs none: it runs each
 * step itself and resumes pending announces at restart. Several instances claim each step in the
 * database (cluster/…, store-pg `ClusterFlowClaims`), so that of two instances trying at once
 * only one performs it, and another takes it over when the one performing it dies.
 */
export interface FlowClaims {
  /** True when this process holds `key` now (nobody else alive does); false: leave the step alone. */
  claim(key: string, kind: FlowKind, runId: string): Promise<boolean>;
  /** The step's outcome is stored (or it failed and may be retried): the claim goes. */
  release(key: string): Promise<void>;
  /** Steps of `kind` whose claimer is gone, for this process to take over (claim first). */
  orphaned(kind: FlowKind): Promise<Array<{ key: string; runId: string }>>;
}

export type FlowKind = "spawn-announce" | "send";
