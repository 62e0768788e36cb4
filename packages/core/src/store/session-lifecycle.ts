import type { Store } from "./interfaces";
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
): Promise<{ archiveError?: unknown }> {
  await store.transcripts.create({ sessionId: next.sessionId, key: next.key, createdAt });
  await store.sessions.put(next);
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
): Promise<{ archiveError?: unknown }> {
  await store.sessions.delete(entry.key);
  try {
    if (mode === "remove") await store.transcripts.remove(entry.sessionId);
    else await store.transcripts.archive(entry.sessionId, "delete");
    return {};
  } catch (error) {
    return { archiveError: error };
  }
}

/**
 * Writes the row marked archived (`archived.archivedAt` set), then archives its transcript. The
 * row write is the commit point, as in `resetSessionTranscript`: a crash after it leaves a
 * transcript no live row points at (archived at the next open), never a live row without one.
 */
export async function archiveSession(
  store: Store,
  archived: SessionEntry,
): Promise<{ archiveError?: unknown }> {
  await store.sessions.put(archived);
  try {
    await store.transcripts.archive(archived.sessionId, "archive");
    return {};
  } catch (error) {
    return { archiveError: error };
  }
}
