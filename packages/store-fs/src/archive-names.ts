/**
 * Archived transcripts are named `<sessionId>.<stamp>[-<n>].<reason>.jsonl`, where the stamp is the
 * archive time in ISO form with `:` and `.` replaced by `-` (file-name safe on every platform). The
 * name, not the file's mtime, says when it was archived: a rename keeps the last append's mtime.
 */
const ARCHIVE_NAME =
  /^([0-9a-f-]{36})\.(\d{4}-\d{2}-\d{2})T(\d{2})-(\d{2})-(\d{2})-(\d{3})Z(?:-\d+)?\.(reset|delete|archive)\.jsonl$/;

export function archiveStamp(at: Date = new Date()): string {
  return at.toISOString().replace(/[:.]/g, "-");
}

/** The archive time (ms epoch) of an archive file name, or undefined for any other name. */
export function archivedAt(name: string): number | undefined {
  const match = ARCHIVE_NAME.exec(name);
  if (!match) return undefined;
  const [, , day, hours, minutes, seconds, millis] = match;
  const time = Date.parse(`${day}T${hours}:${minutes}:${seconds}.${millis}Z`);
  return Number.isNaN(time) ? undefined : time;
}
