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

/**
 * Which process a pid names, beyond the pid: the boot and the start time in clock ticks since boot
 * (Linux `/proc`). A pid is reused — after a reboot, in a new container where the gateway is pid 1
 * again — and a lock naming a live pid may be a dead process's; undefined where `/proc` is missing.
 */
export function processIdentity(pid: number): string | undefined {
  try {
    const bootId = fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces and parentheses): state is field 3,
    // starttime field 22.
    const startTime = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
    return startTime ? `${bootId}:${startTime}` : undefined;
  } catch {
    return undefined;
  }
}

/** Lock files this process holds (a second open in the same process is refused, not taken over). */
const heldHere = new Set<string>();

/**
 * Whether the lock's holder is running: its pid alive and, when the lock says which process it was
 * (`identity`) and `/proc` can tell, the same process. A lock naming this process's own pid that it
 * did not take here was left by an earlier process with that pid (a container's pid 1).
 */
export function isLockHolderAlive(lockPath: string, holder: { pid: number; identity?: string }): boolean {
  if (holder.pid === process.pid) return heldHere.has(path.resolve(lockPath));
  if (!isProcessAlive(holder.pid)) return false;
  if (holder.identity === undefined) return true;
  const now = processIdentity(holder.pid);
  return now === undefined || now === holder.identity;
}

/** The holder a lock file records; undefined when missing or unreadable. */
export async function readLockHolder(
  lockPath: string,
): Promise<{ pid: number; identity?: string } | undefined> {
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
    const { pid, identity } = JSON.parse(text) as { pid?: unknown; identity?: unknown };
    if (typeof pid !== "number" || !Number.isInteger(pid) || pid <= 0) return undefined;
    return typeof identity === "string" ? { pid, identity } : { pid };
  } catch {
    return undefined;
  }
}

/** The pid recorded in a lock file; undefined when missing or unreadable. */
export async function readLockPid(lockPath: string): Promise<number | undefined> {
  return (await readLockHolder(lockPath))?.pid;
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
      const holder = await readLockHolder(lockPath);
      if (holder !== undefined && isLockHolderAlive(lockPath, holder)) {
        const self = holder.pid === process.pid ? " (this process)" : "";
        throw new SwitchboardError("UNAVAILABLE", `data dir in use by pid ${holder.pid}${self}: ${dataDir}`, {
          details: { pid: holder.pid, lockPath },
        });
      }
      // Left by a process that is gone (or half-written by one that died while taking it).
      tookOverFromPid = holder?.pid;
      await fs.promises.rm(lockPath, { force: true });
      continue;
    }
    try {
      const identity = processIdentity(process.pid);
      const body = {
        pid: process.pid,
        hostname: os.hostname(),
        acquiredAt,
        ...(identity ? { identity } : {}),
      };
      await writeAllAt(fd, [Buffer.from(`${JSON.stringify(body)}\n`)], 0);
      if (durable) await syncData(fd);
    } finally {
      await closeFile(fd);
    }
    if (durable) await syncDirectory(dataDir);
    heldHere.add(path.resolve(lockPath));
    if (tookOverFromPid !== undefined) {
      logger.warn(
        {
          pid: tookOverFromPid,
        },
        `took over the data dir lock left by pid ${tookOverFromPid}, which is no longer running (or is another process now)`,
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
  heldHere.delete(path.resolve(lock.path));
  if ((await readLockPid(lock.path)) === lock.pid) await fs.promises.rm(lock.path, { force: true });
}
