import fs from "node:fs";
import path from "node:path";

/**
 * Thin promise wrappers over the callback `fs` API. The callback API skips the FileHandle
 * bookkeeping of `fs/promises`, which matters on the hot append and tail-read paths.
 */

export const FILE_MODE = 0o600;
export const DIR_MODE = 0o700;

export function openFile(filePath: string, flags: string | number, mode = FILE_MODE): Promise<number> {
  return new Promise((resolve, reject) => {
    fs.open(filePath, flags, mode, (error, fd) => (error ? reject(error) : resolve(fd)));
  });
}

export function closeFile(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.close(fd, (error) => (error ? reject(error) : resolve())));
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
  return new Promise((resolve, reject) => fs.fdatasync(fd, (error) => (error ? reject(error) : resolve())));
}

export function truncateFile(fd: number, length: number): Promise<void> {
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
  } finally {
    await closeFile(fd);
  }
  await fs.promises.rename(temp, filePath);
  if (durable) await syncDirectory(path.dirname(filePath));
}

/** Waits for the event loop: long background work yields with it so requests keep flowing. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
