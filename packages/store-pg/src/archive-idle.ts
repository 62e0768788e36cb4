import {
  type ArchiveIdleOptions,
  idleArchiveRow,
  type SessionEntry,
  TERMINAL_RUN_STATUSES,
  validateSessionEntry,
} from "@switchboard/core";
import type { Db } from "./db";
import type { KeyedSerializer } from "./serial";
import { sessionColumnValues, sessionUpsertSql } from "./sessions";

/**
 * `Store.archiveIdleSession` on PostgreSQL, for several instances at once. A new run's insert holds
 * its session's row `FOR KEY SHARE` while it checks the row is not archived (`runs.ts`); the archive
 * takes the row `FOR UPDATE` first, which waits for those inserts to commit and holds off later ones
 * until it commits, and only then looks for runs queued or running, in a statement of its own, so it
 * sees every run committed before (one statement would see the runs of its starting snapshot only).
 * An insert that waited re-reads the row and finds it archived: of the two, exactly one happens.
 */
export function createArchiveIdle(
  db: Db,
  q: (table: string) => string,
  sessionOrder: KeyedSerializer,
): (key: string, options: ArchiveIdleOptions) => Promise<SessionEntry | undefined> {
  const terminal = TERMINAL_RUN_STATUSES.map((status) => `'${status}'`).join(", ");
  return async (key, options) => {
    // A key PostgreSQL cannot hold (NUL) has no row.
    if (key.includes("\u0000")) return undefined;
    return sessionOrder.run(key, () =>
      db.transaction(`archiving session ${key}`, async (client) => {
        const found = await client.query<{ row: SessionEntry }>(
          `SELECT row FROM ${q("sessions")} WHERE key = $1 FOR UPDATE`,
          [key],
        );
        const archived = idleArchiveRow(found.rows[0]?.row, options);
        if (!archived) return undefined;
        const busy = await client.query(
          `SELECT 1 FROM ${q("runs")} WHERE session_key = $1 AND status NOT IN (${terminal}) LIMIT 1`,
          [key],
        );
        if (busy.rows.length > 0) return undefined;
        const row = validateSessionEntry(archived);
        await client.query(sessionUpsertSql(q), sessionColumnValues(row));
        return row;
      }),
    );
  };
}
