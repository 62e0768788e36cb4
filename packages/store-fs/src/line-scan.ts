import { readAt } from "./fs-io";

/**
 * Line scanning over JSONL files by byte offset. Lines are the bytes between `\n`s; a line is
 * reported with the offset of its first byte. Callbacks get views into shared chunk buffers, so
 * they must decode or copy what they keep before returning.
 */

export const NEWLINE = 0x0a;
export const DEFAULT_CHUNK_BYTES = 64 * 1024;

/** Return false to stop the scan. */
export type LineVisitor = (line: Buffer, lineStart: number) => boolean;

export interface BackwardScanResult {
  /** True when every line down to `start` was visited. */
  reachedStart: boolean;
}

/**
 * Visits the lines in `[start, end)` newest first, reading fixed-size chunks from the end, so the
 * cost is proportional to the bytes visited, not to the file size. `end` must sit just after a
 * `\n` (or equal `start`); `start` must be a line start.
 */
export async function scanBackward(
  fd: number,
  start: number,
  end: number,
  visit: LineVisitor,
  chunkBytes = DEFAULT_CHUNK_BYTES,
): Promise<BackwardScanResult> {
  if (end <= start) return { reachedStart: true };
  // The current line is [lineStart?, lineEnd); `carry` holds its bytes already read, from `position` on.
  let lineEnd = end - 1;
  let position = end;
  let carry: Buffer[] = [];
  while (position > start) {
    const chunkStart = Math.max(start, position - chunkBytes);
    const chunk = Buffer.allocUnsafe(position - chunkStart);
    const read = await readAt(fd, chunk, chunk.length, chunkStart);
    if (read !== chunk.length) throw new Error(`file shrank while reading at offset ${chunkStart}`);
    // Bytes of this chunk that belong to the current line end at `limit` (exclusive).
    let limit = Math.min(chunk.length, lineEnd - chunkStart);
    while (limit > 0) {
      const newline = chunk.lastIndexOf(NEWLINE, limit - 1);
      if (newline < 0) break;
      const piece = chunk.subarray(newline + 1, limit);
      const line = carry.length === 0 ? piece : Buffer.concat([piece, ...carry]);
      carry = [];
      if (!visit(line, chunkStart + newline + 1)) return { reachedStart: false };
      lineEnd = chunkStart + newline;
      limit = newline;
    }
    if (limit > 0) carry.unshift(chunk.subarray(0, limit));
    position = chunkStart;
  }
  // What is left, [start, lineEnd), is the oldest line.
  const line = carry.length === 1 ? carry[0]! : Buffer.concat(carry);
  if (!visit(line, start)) return { reachedStart: false };
  return { reachedStart: true };
}

export interface ForwardScanResult {
  /** Offset just after the last complete (newline-terminated) line visited. */
  end: number;
  /** Bytes after `end` that do not form a complete line (a torn tail), when the scan ran to the end. */
  trailingBytes: number;
  /** True when the visitor stopped the scan. */
  stopped: boolean;
}

/** Visits complete lines in `[start, end)` oldest first. */
export async function scanForward(
  fd: number,
  start: number,
  end: number,
  visit: LineVisitor,
  chunkBytes = DEFAULT_CHUNK_BYTES,
): Promise<ForwardScanResult> {
  let position = start;
  let lineStart = start;
  let carry: Buffer[] = [];
  while (position < end) {
    const chunk = Buffer.allocUnsafe(Math.min(chunkBytes, end - position));
    const read = await readAt(fd, chunk, chunk.length, position);
    const view = chunk.subarray(0, read);
    let from = 0;
    while (from < view.length) {
      const newline = view.indexOf(NEWLINE, from);
      if (newline < 0) break;
      const piece = view.subarray(from, newline);
      const line = carry.length === 0 ? piece : Buffer.concat([...carry, piece]);
      carry = [];
      const thisStart = lineStart;
      lineStart = position + newline + 1;
      if (!visit(line, thisStart)) return { end: lineStart, trailingBytes: 0, stopped: true };
      from = newline + 1;
    }
    if (from < view.length) carry.push(Buffer.from(view.subarray(from)));
    position += read;
    if (read < chunk.length) break;
  }
  return { end: lineStart, trailingBytes: position - lineStart, stopped: false };
}

/** Reads the first line of a file (up to `maxBytes`); undefined when there is no complete one. */
export async function readFirstLine(fd: number, maxBytes = DEFAULT_CHUNK_BYTES): Promise<Buffer | undefined> {
  let found: Buffer | undefined;
  await scanForward(
    fd,
    0,
    maxBytes,
    (line) => {
      found = Buffer.from(line);
      return false;
    },
    Math.min(maxBytes, 4096),
  );
  return found;
}

const SEQ_PREFIX = /^\{"type":"[a-z]+","seq":(\d+),/;

/**
 * The seq of a stored transcript line, read from its fixed prefix (`{"type":"…","seq":N,`)
 * without parsing the whole entry; undefined when the prefix does not match.
 */
export function seqOfLine(line: Buffer): number | undefined {
  const match = SEQ_PREFIX.exec(line.toString("latin1", 0, Math.min(line.length, 48)));
  return match ? Number(match[1]) : undefined;
}

/** The offset of the last `\n` in `[start, end)`, or -1. */
export async function lastNewlineBefore(
  fd: number,
  start: number,
  end: number,
  chunkBytes = DEFAULT_CHUNK_BYTES,
): Promise<number> {
  let position = end;
  while (position > start) {
    const chunkStart = Math.max(start, position - chunkBytes);
    const chunk = Buffer.allocUnsafe(position - chunkStart);
    const read = await readAt(fd, chunk, chunk.length, chunkStart);
    const found = chunk.subarray(0, read).lastIndexOf(NEWLINE);
    if (found >= 0) return chunkStart + found;
    position = chunkStart;
  }
  return -1;
}

export interface IntactEnd {
  /** Offset just after the last intact line (`start` when there is none). */
  end: number;
  /** That line (a copy) and where it starts. */
  lastLine?: Buffer;
  lastLineStart?: number;
}

/**
 * Finds where the intact part of a JSONL file ends: a partial last line (no `\n`) and complete
 * last lines that `isIntact` rejects are torn and lie after the returned `end`. Reads only the
 * tail of the file.
 */
export async function findIntactEnd(
  fd: number,
  start: number,
  size: number,
  isIntact: (line: Buffer) => boolean,
): Promise<IntactEnd> {
  let end = size;
  while (end > start) {
    const newline = await lastNewlineBefore(fd, start, end);
    if (newline < 0) return { end: start };
    const candidateEnd = newline + 1;
    let line: Buffer | undefined;
    let lineStart = start;
    await scanBackward(fd, start, candidateEnd, (found, foundStart) => {
      line = Buffer.from(found);
      lineStart = foundStart;
      return false;
    });
    if (line !== undefined && isIntact(line))
      return { end: candidateEnd, lastLine: line, lastLineStart: lineStart };
    end = lineStart;
  }
  return { end: start };
}

/** Parses a line as a JSON object; undefined when it is not one. */
export function parseJsonLine(line: Buffer): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(line.toString("utf8"));
    return value !== null && typeof value === "object" && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Visits the complete lines of `[start, end)` as strings, decoding each chunk's lines in one go
 * (much faster than one decode per line when loading big files). Returns the bytes after the last
 * newline, which are not a complete line.
 */
export async function forEachLineText(
  fd: number,
  start: number,
  end: number,
  visit: (line: string) => boolean,
  chunkBytes = 1024 * 1024,
  /** Gets the raw bytes of each run of complete lines, before they are visited (e.g. to hash them). */
  onBytes?: (bytes: Buffer) => void,
): Promise<{ trailingBytes: number; stopped: boolean }> {
  let position = start;
  let carry: Buffer | undefined;
  while (position < end) {
    const chunk = Buffer.allocUnsafe(Math.min(chunkBytes, end - position));
    const read = await readAt(fd, chunk, chunk.length, position);
    position += read;
    const data = carry ? Buffer.concat([carry, chunk.subarray(0, read)]) : chunk.subarray(0, read);
    const lastNewline = data.lastIndexOf(NEWLINE);
    if (lastNewline < 0) {
      carry = data;
    } else {
      onBytes?.(data.subarray(0, lastNewline + 1));
      const lines = data.toString("utf8", 0, lastNewline).split("\n");
      for (const line of lines) if (!visit(line)) return { trailingBytes: 0, stopped: true };
      carry = lastNewline + 1 < data.length ? Buffer.from(data.subarray(lastNewline + 1)) : undefined;
    }
    if (read < chunk.length) break;
  }
  return { trailingBytes: carry?.length ?? 0, stopped: false };
}
