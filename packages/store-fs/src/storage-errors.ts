import { SwitchboardError } from "@switchboard/core";

/**
 * Storage faults that say nothing about the data, only about the machine right now: the write can
 * succeed later without a restart. Each maps to what it means and what the operator can do.
 */
const FAULTS: Record<string, { meaning: string; fix: string }> = {
  ENOSPC: { meaning: "disk full", fix: "free space and retry" },
  EDQUOT: { meaning: "disk quota exceeded", fix: "raise the quota or free space and retry" },
  EMFILE: {
    meaning: "too many open files in this process",
    fix: "raise the open-file limit (ulimit -n) or lower fileStore.maxOpenTranscripts",
  },
  ENFILE: { meaning: "too many open files on this system", fix: "close other programs' files and retry" },
  EPERM: {
    meaning: "operation not permitted",
    fix: "check the file's owner, mode and flags (chattr -i) under the data dir",
  },
  EACCES: {
    meaning: "permission denied",
    fix: "give the gateway's user write access (chmod 600 files, 700 dirs)",
  },
  EROFS: { meaning: "read-only file system", fix: "remount the data dir read-write" },
  EIO: { meaning: "I/O error", fix: "check the disk (dmesg) and retry" },
};

export function isStorageFault(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code !== undefined && code in FAULTS;
}

/**
 * Wraps a storage fault as `UNAVAILABLE` whose message names the cause, the action and the file,
 * e.g. "disk full (ENOSPC) writing /data/sessions/journal-….jsonl; free space and retry". Other
 * errors (and SwitchboardErrors) pass through unchanged.
 */
export function storageError(error: unknown, action: string, filePath: string): unknown {
  if (error instanceof SwitchboardError) return error;
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const fault = code === undefined ? undefined : FAULTS[code];
  if (!fault) return error;
  return new SwitchboardError(
    "UNAVAILABLE",
    `${fault.meaning} (${code}) ${action} ${filePath}; ${fault.fix}`,
    {
      cause: error,
      details: { cause: code, path: filePath },
    },
  );
}

/** Runs `body`, turning a storage fault into the `UNAVAILABLE` error `storageError` describes. */
export async function withStorageErrors<T>(
  action: string,
  filePath: string,
  body: () => Promise<T>,
): Promise<T> {
  try {
    return await body();
  } catch (error) {
    throw storageError(error, action, filePath);
  }
}
