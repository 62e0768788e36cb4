import { type RunRecord, TERMINAL_RUN_STATUSES, validateRunRecord } from "@switchboard/core";
import type { Coordination } from "./context";

/**
 * Fencing of run ends. An instance cut off from the database longer than its lease is declared
 * lost: its claims are freed and its runs reassigned or ended `error` by the others. Its workers
 * may still finish those runs, and it may write their results once the database is back — over the
 * `error`, or over the new holder's run. So in cluster mode a run's end is written only by the
 * instance that holds the run, in one transaction with the check:
 *
 * - the run is not ended in the store, and
 * - this instance holds its claim (`run_claims`, locked FOR SHARE so the sweep that frees it waits
 *   for this write, or this write sees it freed), or — a run never claimed, e.g. one that timed out
 *   in this instance's local queue — nobody holds it and it is neither in the cluster's queue nor
 *   in the failure outbox (where a lost instance's runs go).
 *
 * `write` returns false when the end was not written: the caller drops the late result.
 */
export interface ClusterRunEnds {
  write(record: RunRecord): Promise<boolean>;
}

export function openClusterRunEnds(coordination: Coordination): ClusterRunEnds {
  const { db, q, instanceId } = coordination;
  const runs = q("runs");
  const version = `nextval('${q("row_versions").replaceAll("'", "''")}')`;
  const open = `(${["queued", "running"].map((status) => `'${status}'`).join(", ")})`;
  return {
    async write(input) {
      const run = validateRunRecord(input);
      if (!TERMINAL_RUN_STATUSES.includes(run.status)) {
        throw new Error(`run ${run.runId}: only a run's end is fenced (status ${run.status})`);
      }
      // One statement: the claim is locked FOR SHARE by the check itself, so a sweep freeing it
      // waits for this write, or this write sees it freed.
      const written = await db.query(
        `writing the end of run ${run.runId}`,
        `UPDATE ${runs} SET status = $2, ended_at = $3, pending_announce = $4, row = $5, version = ${version}
         WHERE run_id = $1 AND status IN ${open} AND (
           EXISTS (SELECT 1 FROM ${q("run_claims")} WHERE run_id = $1 AND instance_id = $6 FOR SHARE)
           OR (NOT EXISTS (SELECT 1 FROM ${q("run_claims")} WHERE run_id = $1)
               AND NOT EXISTS (SELECT 1 FROM ${q("run_queue")} WHERE run_id = $1)
               AND NOT EXISTS (SELECT 1 FROM ${q("run_claim_failures")} WHERE run_id = $1)))`,
        [
          run.runId,
          run.status,
          run.endedAt ?? null,
          run.spawn?.announce.status === "pending",
          JSON.stringify(run),
          instanceId,
        ],
      );
      return (written.rowCount ?? 0) > 0;
    },
  };
}
