import { SwitchboardError } from "../errors";
import type { ArchiveIdleOptions, Store } from "./interfaces";
import type { SessionEntry } from "./session-entry";

/**
 * Resets, deletes and archivings touch two stores (the index row and the transcripts) that cannot
 * change together. Their steps are ordered so that a crash between any two leaves every live row
 * pointing at a transcript that exists: the new transcript is created before the row points at
 * it, and the old one leaves only after no live row points at it. What a crash can leave behind is
 * an old transcript that belongs to no live row; the file store archives those at open
 * (`archiveOrphanTranscripts`).
 */

/**
 * Points `next.key` at the fresh transcript `next.sessionId`, then archives the previous one.
 * The row switch is the commit point: once it is durable the reset has happened, so a failure to
 * archive is returned (for logging), not thrown.
 */
export async function resetSessionTranscript(
  store: Store,
  previousSessionId: string,
  next: SessionEntry,
  createdAt: number,
  /** The row's version when read: another write since refuses the switch (CONFLICT). */
  expectedVersion?: number,
): Promise<{ archiveError?: unknown }> {
  await store.transcripts.create({ sessionId: next.sessionId, key: next.key, createdAt });
  try {
    await store.sessions.put(next, expectedVersion === undefined ? {} : { expectedVersion });
  } catch (error) {
    // Not switched: the fresh transcript belongs to no row (the file store archives such at open).
    await store.transcripts.archive(next.sessionId, "reset").catch(() => undefined);
    throw error;
  }
  try {
    await store.transcripts.archive(previousSessionId, "reset");
    return {};
  } catch (error) {
    return { archiveError: error };
  }
}

/**
 * Drops the row, then archives (or with `remove`, erases) its transcript. The row removal is the
 * commit point, as in `resetSessionTranscript`.
 */
export async function deleteSession(
  store: Store,
  entry: Pick<SessionEntry, "key" | "sessionId">,
  mode: "archive" | "remove" = "archive",
  /** The row's version when read: another write since refuses the delete (CONFLICT). */
  expectedVersion?: number,
): Promise<{ archiveError?: unknown }> {
  await store.sessions.delete(entry.key, expectedVersion === undefined ? {} : { expectedVersion });
  try {
    if (mode === "remove") await store.transcripts.remove(entry.sessionId);
    else await store.transcripts.archive(entry.sessionId, "delete");
    return {};
  } catch (error) {
    return { archiveError: error };
  }
}

/**
 * Archives an idle session (see `Store.archiveIdleSession`): the row is marked, then its transcript
 * moves to the archive. The row write is the commit point, as in `resetSessionTranscript`: a crash
 * after it leaves a transcript no live row points at (archived at the next open), never a live row
 * without one. `archived` is undefined (and nothing changed) when the store refused: the row was
 * gone, reset, archived already, or had a run queued or running.
 */
export async function archiveSession(
  store: Store,
  key: string,
  options: ArchiveIdleOptions,
): Promise<{ archived?: SessionEntry; archiveError?: unknown }> {
  const archived = await store.archiveIdleSession(key, options);
  if (!archived) return {};
  try {
    await store.transcripts.archive(archived.sessionId, "archive");
    return { archived };
  } catch (error) {
    return { archived, archiveError: error };
  }
}

/**
 * The row `archiveIdleSession` writes for `current` (the row as it is now), or undefined when it
 * must not archive it: gone, reset since (another sessionId), or archived already. Whether a run is
 * queued or running is the store's own check.
 */
export function idleArchiveRow(
  current: SessionEntry | undefined,
  { sessionId, at }: ArchiveIdleOptions,
): SessionEntry | undefined {
  if (!current || current.archivedAt !== undefined || current.sessionId !== sessionId) return undefined;
  return { ...current, archivedAt: at, updatedAt: Math.max(at, current.updatedAt) };
}

/** The NOT_FOUND a new run on an archived session gets from `runs.put` (insert only). */
export function archivedSessionError(sessionKey: string): SwitchboardError {
  return new SwitchboardError("NOT_FOUND", `session not found: ${sessionKey} (archived)`, {
    details: { key: sessionKey },
  });
}
