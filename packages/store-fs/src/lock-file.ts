import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { closeFile, errorCode, isNotFound, openFile, syncData, syncDirectory, writeAllAt } from "./fs-io";
import type { StoreLogger } from "./logger";

export const LOCK_FILE = "LOCK";

export interface LockInfo {
  /** The lock file. */
  path: string;
  /** This process. */
  pid: number;
  acquiredAt: number;
  /** Set when the lock was left by a process that is gone and this one took it over. */
  tookOverFromPid?: number;
}

/** Whether a process with this pid exists (EPERM: it exists but belongs to someone else). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The pid recorded in a lock file; undefined when missing or unreadable. */
export async function readLockPid(lockPath: string): Promise<number | undefined> {
  let text: string;
  try {
    text = await fs.promises.readFile(lockPath, "utf8");
  } catch (error) {
    if (isNotFound(error)) return undefined;
    // A read of a directory fails naming no path: say which file and what to do.
    if (errorCode(error) === "EISDIR") {
      throw new SwitchboardError(
        "UNAVAILABLE",
        `the lock file ${lockPath} is a directory; move it away or remove it (the gateway writes the lock file when it starts)`,
        { cause: error, details: { lockPath } },
      );
    }
    throw error;
  }
  try {
    const pid = (JSON.parse(text) as { pid?: unknown }).pid;
    return typeof pid === "number" && Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Takes the single-writer lock of a data dir: a `LOCK` file created exclusively and holding our
 * pid. A lock whose pid is no longer running is taken over; a live one is refused.
 */
export async function acquireLock(dataDir: string, durable: boolean, logger: StoreLogger): Promise<LockInfo> {
  const lockPath = path.join(dataDir, LOCK_FILE);
  let tookOverFromPid: number | undefined;
  for (let attempt = 0; attempt < 5; attempt++) {
    const acquiredAt = Date.now();
    let fd: number;
    try {
      fd = await openFile(lockPath, "wx");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const holder = await readLockPid(lockPath);
      if (holder !== undefined && isProcessAlive(holder)) {
        const self = holder === process.pid ? " (this process)" : "";
        throw new SwitchboardError("UNAVAILABLE", `data dir in use by pid ${holder}${self}: ${dataDir}`, {
          details: { pid: holder, lockPath },
        });
      }
      // Left by a process that is gone (or half-written by one that died while taking it).
      tookOverFromPid = holder;
      await fs.promises.rm(lockPath, { force: true });
      continue;
    }
    try {
      const body = { pid: process.pid, hostname: os.hostname(), acquiredAt };
      await writeAllAt(fd, [Buffer.from(`${JSON.stringify(body)}\n`)], 0);
      if (durable) await syncData(fd);
    } finally {
      await closeFile(fd);
    }
    if (durable) await syncDirectory(dataDir);
    if (tookOverFromPid !== undefined) {
      logger.warn(
        {
          pid: tookOverFromPid,
        },
        `took over the data dir lock left by pid ${tookOverFromPid}, which is no longer running`,
      );
    }
    return {
      path: lockPath,
      pid: process.pid,
      acquiredAt,
      ...(tookOverFromPid !== undefined ? { tookOverFromPid } : {}),
    };
  }
  throw new SwitchboardError(
    "UNAVAILABLE",
    `could not take the data dir lock ${lockPath}: another process keeps taking it`,
  );
}

/** Removes the lock file if it is still ours. */
export async function releaseLock(lock: LockInfo): Promise<void> {
  if ((await readLockPid(lock.path)) === lock.pid) await fs.promises.rm(lock.path, { force: true });
}
