import fs from "node:fs";
import path from "node:path";

/**
 * Thin promise wrappers over the callback `fs` API. The callback API skips the FileHandle
 * bookkeeping of `fs/promises`, which matters on the hot append and tail-read paths.
 */

export const FILE_MODE = 0o600;
export const DIR_MODE = 0o700;

/** The operations a fault hook can fail (every call that changes a file, or opens one to write). */
export type FaultOp = "open" | "write" | "sync" | "truncate" | "rename" | "link";

/**
 * Returns an errno code (e.g. `ENOSPC`) to make that call fail as the OS would, or undefined to
 * let it run. A test seam: the store's own code paths run unchanged, only the OS answer is faked.
 */
export type FaultHook = (op: FaultOp, filePath: string) => string | undefined;

let faultHook: FaultHook | undefined;
/** Open descriptors and their paths, so faults on descriptor calls can be aimed by path. */
const descriptorPaths = new Map<number, string>();

/** Installs (or with undefined, removes) the process-wide fault hook. For tests only. */
export function setFaultHook(hook: FaultHook | undefined): void {
  faultHook = hook;
}

function injected(op: FaultOp, target: string | number): NodeJS.ErrnoException | undefined {
  if (!faultHook) return undefined;
  const filePath = typeof target === "number" ? (descriptorPaths.get(target) ?? `fd ${target}`) : target;
  const code = faultHook(op, filePath);
  if (code === undefined) return undefined;
  const error: NodeJS.ErrnoException = new Error(`${code}: injected fault, ${op} '${filePath}'`);
  error.code = code;
  error.syscall = op;
  error.path = filePath;
  return error;
}

export function openFile(filePath: string, flags: string | number, mode = FILE_MODE): Promise<number> {
  // Only opens that may write are hookable, so a file can be made unwritable but still readable.
  const fault = typeof flags === "string" && flags !== "r" ? injected("open", filePath) : undefined;
  if (fault) return Promise.reject(fault);
  return new Promise((resolve, reject) => {
    fs.open(filePath, flags, mode, (error, fd) => {
      if (error) return reject(error);
      descriptorPaths.set(fd, filePath);
      resolve(fd);
    });
  });
}

/**
 * O_DSYNC where the platform has it: a write on such a descriptor returns only once its data is
 * durable, as if followed by fdatasync, in one syscall (one thread-pool round trip instead of two).
 */
export const DSYNC_FLAG: number | undefined = fs.constants.O_DSYNC;

/**
 * Opens an append log for writing (`create`: a new file, `existing`: an existing one), with
 * O_DSYNC when `dsync`. Hookable like `openFile`'s writing opens.
 */
export function openLogFile(filePath: string, how: "create" | "existing", dsync: boolean): Promise<number> {
  const fault = injected("open", filePath);
  if (fault) return Promise.reject(fault);
  const { O_RDWR, O_CREAT, O_EXCL } = fs.constants;
  const flags = (how === "create" ? O_RDWR | O_CREAT | O_EXCL : O_RDWR) | (dsync ? (DSYNC_FLAG ?? 0) : 0);
  return new Promise((resolve, reject) => {
    fs.open(filePath, flags, FILE_MODE, (error, fd) => {
      if (error) return reject(error);
      descriptorPaths.set(fd, filePath);
      resolve(fd);
    });
  });
}

/**
 * The sync step of a write made on an O_DSYNC descriptor: nothing left to do, but the fault hook
 * still sees a `sync`, so tests fail it exactly as they fail an fdatasync.
 */
export function syncedByWrite(fd: number): Promise<void> {
  const fault = injected("sync", fd);
  return fault ? Promise.reject(fault) : Promise.resolve();
}

export function closeFile(fd: number): Promise<void> {
  descriptorPaths.delete(fd);
  return new Promise((resolve, reject) => fs.close(fd, (error) => (error ? reject(error) : resolve())));
}

/** Synchronous positioned write of the whole buffer (short writes continued). */
export function writeAllAtSync(fd: number, buffer: Buffer, position: number): void {
  const fault = injected("write", fd);
  if (fault) throw fault;
  let done = 0;
  while (done < buffer.length) {
    done += fs.writeSync(fd, buffer, done, buffer.length - done, position + done);
  }
}

export function truncateFileSync(fd: number, length: number): void {
  const fault = injected("truncate", fd);
  if (fault) throw fault;
  fs.ftruncateSync(fd, length);
}

export async function renamePath(from: string, to: string): Promise<void> {
  const fault = injected("rename", to);
  if (fault) throw fault;
  await fs.promises.rename(from, to);
}

export async function linkPath(existing: string, newPath: string): Promise<void> {
  const fault = injected("link", newPath);
  if (fault) throw fault;
  await fs.promises.link(existing, newPath);
}

export function fileSize(fd: number): Promise<number> {
  return new Promise((resolve, reject) =>
    fs.fstat(fd, (error, stats) => (error ? reject(error) : resolve(stats.size))),
  );
}

/** Reads exactly `length` bytes at `position` unless the file ends first; returns the bytes read. */
export async function readAt(fd: number, buffer: Buffer, length: number, position: number): Promise<number> {
  let done = 0;
  while (done < length) {
    const count = await new Promise<number>((resolve, reject) => {
      fs.read(fd, buffer, done, length - done, position + done, (error, bytes) =>
        error ? reject(error) : resolve(bytes),
      );
    });
    if (count === 0) break;
    done += count;
  }
  return done;
}

/** Writes every buffer at `position`, in order, handling short writes. */
export async function writeAllAt(fd: number, buffers: readonly Buffer[], position: number): Promise<void> {
  const fault = injected("write", fd);
  if (fault) throw fault;
  let pending = buffers.filter((buffer) => buffer.length > 0);
  let at = position;
  while (pending.length > 0) {
    const written = await new Promise<number>((resolve, reject) => {
      fs.writev(fd, pending, at, (error, bytes) => (error ? reject(error) : resolve(bytes)));
    });
    at += written;
    let skip = written;
    const rest: Buffer[] = [];
    for (const buffer of pending) {
      if (skip >= buffer.length) {
        skip -= buffer.length;
        continue;
      }
      rest.push(skip > 0 ? buffer.subarray(skip) : buffer);
      skip = 0;
    }
    pending = rest;
  }
}

export function syncData(fd: number): Promise<void> {
  const fault = injected("sync", fd);
  if (fault) return Promise.reject(fault);
  return new Promise((resolve, reject) => fs.fdatasync(fd, (error) => (error ? reject(error) : resolve())));
}

export function truncateFile(fd: number, length: number): Promise<void> {
  const fault = injected("truncate", fd);
  if (fault) return Promise.reject(fault);
  return new Promise((resolve, reject) =>
    fs.ftruncate(fd, length, (error) => (error ? reject(error) : resolve())),
  );
}

/** Makes a directory's entries (creates, renames, unlinks) durable. */
export async function syncDirectory(dirPath: string): Promise<void> {
  const fd = await openFile(dirPath, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    await new Promise<void>((resolve, reject) =>
      fs.fsync(fd, (error) => (error ? reject(error) : resolve())),
    );
  } finally {
    await closeFile(fd);
  }
}

export async function ensureDirectory(dirPath: string): Promise<void> {
  await fs.promises.mkdir(dirPath, { recursive: true, mode: DIR_MODE });
}

export function isNotFound(error: unknown): boolean {
  return (error as NodeJS.ErrnoException | undefined)?.code === "ENOENT";
}

export function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}

/** Writes a whole small file atomically: temp file, fsync, rename, fsync of the directory. */
export async function writeFileAtomically(
  filePath: string,
  content: string,
  durable: boolean,
): Promise<void> {
  const temp = `${filePath}.${process.pid}.tmp`;
  const fd = await openFile(temp, "w");
  try {
    await writeAllAt(fd, [Buffer.from(content)], 0);
    if (durable) await syncData(fd);
  } catch (error) {
    await closeFile(fd).catch(() => undefined);
    await fs.promises.rm(temp, { force: true });
    throw error;
  }
  await closeFile(fd);
  await renamePath(temp, filePath);
  if (durable) await syncDirectory(path.dirname(filePath));
}

/** Waits for the event loop: long background work yields with it so requests keep flowing. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
