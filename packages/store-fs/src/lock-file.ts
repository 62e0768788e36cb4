import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import {
  closeFile,
  errorCode,
  isNotFound,
  linkPath,
  openFile,
  syncData,
  syncDirectory,
  writeAllAt,
} from "./fs-io";
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

/** A lock file no process could read for this long is taken for one that died while writing it. */
const UNREADABLE_LOCK_GRACE_MS = 10_000;
/** How long a start waits for another process's take-over (or a lock being written) to finish. */
const LOCK_WAIT_MS = 3_000;

/** What a lock file holds, as read (with the file it was read from, to tell it from a newer one). */
type LockState =
  | { kind: "missing" }
  | { kind: "held"; holder: { pid: number; identity?: string }; ino: number }
  | { kind: "unreadable"; ageMs: number; ino: number };

async function readLockState(lockPath: string): Promise<LockState> {
  let stat: fs.Stats;
  try {
    stat = await fs.promises.stat(lockPath);
  } catch (error) {
    if (isNotFound(error)) return { kind: "missing" };
    throw error;
  }
  const holder = await readLockHolder(lockPath);
  if (holder) return { kind: "held", holder, ino: stat.ino };
  // Gone between the stat and the read: as missing.
  if (!fs.existsSync(lockPath)) return { kind: "missing" };
  return { kind: "unreadable", ageMs: Date.now() - stat.mtimeMs, ino: stat.ino };
}

/**
 * Creates `target` holding `body`, complete, or fails with EEXIST: the body goes to a file of this
 * process's own, made durable, then linked in under the lock's name (link, unlike open, never shows
 * a half-written file under that name). A second start reading the lock therefore always finds a
 * whole one, or none.
 */
async function createWhole(target: string, body: string, durable: boolean): Promise<void> {
  const temp = `${target}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  await writeExclusive(temp, body, durable);
  try {
    await linkPath(temp, target);
  } catch (error) {
    // A filesystem without hard links (some FUSE, SMB or FAT mounts): the name is created
    // exclusively and written after, as before links. A start meeting it half-written waits
    // (`UNREADABLE_LOCK_GRACE_MS`) rather than taking it for dead.
    if (!NO_HARD_LINKS.includes(errorCode(error) ?? "")) throw error;
    await writeExclusive(target, body, durable);
  } finally {
    await fs.promises.rm(temp, { force: true });
  }
}

/** What `link` answers where the filesystem has no hard links. */
const NO_HARD_LINKS = ["EPERM", "ENOTSUP", "EOPNOTSUPP", "EXDEV", "EMLINK"];

/** Creates `filePath` (failing with EEXIST when it exists) holding `body`. */
async function writeExclusive(filePath: string, body: string, durable: boolean): Promise<void> {
  const fd = await openFile(filePath, "wx");
  try {
    await writeAllAt(fd, [Buffer.from(body)], 0);
    if (durable) await syncData(fd);
  } finally {
    await closeFile(fd);
  }
}

function lockBody(acquiredAt: number): string {
  const identity = processIdentity(process.pid);
  const body = { pid: process.pid, hostname: os.hostname(), acquiredAt, ...(identity ? { identity } : {}) };
  return `${JSON.stringify(body)}\n`;
}

function inUse(dataDir: string, lockPath: string, pid: number): SwitchboardError {
  const self = pid === process.pid ? " (this process)" : "";
  return new SwitchboardError("UNAVAILABLE", `data dir in use by pid ${pid}${self}: ${dataDir}`, {
    details: { pid, lockPath },
  });
}

/**
 * Takes the single-writer lock of a data dir: a `LOCK` file holding our pid, created whole (see
 * `createWhole`). A live holder's lock is refused. A lock whose holder is gone is taken over under
 * a second lock, `LOCK.takeover`, so that of two starts finding the same dead lock only one
 * replaces it: the other, once it gets `LOCK.takeover`, reads the lock again and finds it live.
 * Without it, both read "dead", one replaced the lock, and the other removed the replacement and
 * took the data dir as well.
 */
export async function acquireLock(dataDir: string, durable: boolean, logger: StoreLogger): Promise<LockInfo> {
  const lockPath = path.join(dataDir, LOCK_FILE);
  const takeoverPath = `${lockPath}.takeover`;
  const waitUntil = Date.now() + LOCK_WAIT_MS;
  let tookOverFromPid: number | undefined;
  for (;;) {
    const acquiredAt = Date.now();
    try {
      await createWhole(lockPath, lockBody(acquiredAt), durable);
    } catch (error) {
      if (errorCode(error) !== "EEXIST") throw error;
      const state = await readLockState(lockPath);
      if (state.kind === "held" && isLockHolderAlive(lockPath, state.holder))
        throw inUse(dataDir, lockPath, state.holder.pid);
      if (state.kind !== "missing") {
        // Unreadable and young: a lock an older version was still writing (it opened, then wrote).
        const dead = state.kind === "held" || state.ageMs > UNREADABLE_LOCK_GRACE_MS;
        if (dead && (await takeOver(lockPath, takeoverPath, state, dataDir, logger))) {
          tookOverFromPid = state.kind === "held" ? state.holder.pid : undefined;
          continue;
        }
      }
      if (Date.now() > waitUntil)
        throw new SwitchboardError(
          "UNAVAILABLE",
          `could not take the data dir lock ${lockPath}: another process is taking it (or ${LOCK_FILE} is unreadable and new; a gateway that died writing it leaves it stale after ${UNREADABLE_LOCK_GRACE_MS / 1000} s)`,
          { retryable: true, details: { lockPath } },
        );
      if (state.kind !== "missing") await new Promise((resolve) => setTimeout(resolve, 50));
      continue;
    }
    if (durable) await syncDirectory(dataDir);
    heldHere.add(path.resolve(lockPath));
    await removeLeftTemps(dataDir);
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
}

async function inode(filePath: string): Promise<number | undefined> {
  return fs.promises.stat(filePath).then(
    (stat) => stat.ino,
    () => undefined,
  );
}

/** The files `createWhole` writes before linking them, left by a start killed meanwhile. */
async function removeLeftTemps(dataDir: string): Promise<void> {
  const names = await fs.promises.readdir(dataDir).catch(() => [] as string[]);
  for (const name of names) {
    const left = /^LOCK(?:\.takeover)?\.(\d+)\.[a-z0-9]*\.tmp$/.exec(name);
    if (left && !isProcessAlive(Number(left[1])))
      await fs.promises.rm(path.join(dataDir, name), { force: true }).catch(() => undefined);
  }
}

/**
 * Removes a dead lock while holding `LOCK.takeover`, if it is still the very file judged dead (same
 * inode; another start may have replaced it meanwhile). True when it was removed (the caller then
 * creates its own), false when the take-over lock is busy (the caller waits and reads again).
 * Throws when the lock turned out live.
 */
async function takeOver(
  lockPath: string,
  takeoverPath: string,
  judged: Exclude<LockState, { kind: "missing" }>,
  dataDir: string,
  logger: StoreLogger,
): Promise<boolean> {
  try {
    await createWhole(takeoverPath, lockBody(Date.now()), false);
  } catch (error) {
    if (errorCode(error) !== "EEXIST") throw error;
    // Left by a start killed during its take-over (a few milliseconds' window): removed once its
    // holder is gone, so it never blocks starts for good.
    const other = await readLockState(takeoverPath);
    const stale =
      (other.kind === "held" && !isLockHolderAlive(takeoverPath, other.holder)) ||
      (other.kind === "unreadable" && other.ageMs > UNREADABLE_LOCK_GRACE_MS);
    // Only the very file judged stale: another start may have replaced it meanwhile.
    if (stale && (await inode(takeoverPath)) === other.ino) {
      logger.warn({ takeoverPath }, "removed a lock take-over left by a process that is gone");
      await fs.promises.rm(takeoverPath, { force: true });
    }
    return false;
  }
  try {
    const now = await readLockState(lockPath);
    if (now.kind === "missing") return true;
    if (now.kind === "held" && isLockHolderAlive(lockPath, now.holder))
      throw inUse(dataDir, lockPath, now.holder.pid);
    if (now.ino !== judged.ino) return false;
    await fs.promises.rm(lockPath, { force: true });
    return true;
  } finally {
    await fs.promises.rm(takeoverPath, { force: true });
  }
}

/** Removes the lock file if it is still ours. */
export async function releaseLock(lock: LockInfo): Promise<void> {
  heldHere.delete(path.resolve(lock.path));
  if ((await readLockPid(lock.path)) === lock.pid) await fs.promises.rm(lock.path, { force: true });
}
