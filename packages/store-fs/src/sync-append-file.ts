import { SwitchboardError } from "@switchboard/core";
import { closeFile, truncateFileSync, writeAllAtSync } from "./fs-io";
import { storageError } from "./storage-errors";

/**
 * An append-only file written synchronously, without fsync: for transcripts, whose durability
 * comes from the commit log. A synchronous write lands in the page cache in microseconds, while
 * an async one costs a thread-pool round trip per file and per batch, which dominated appends
 * spread over many transcripts. Bytes are readable as soon as `append` returns.
 *
 * A failed write (or an append whose commit failed, see `rollback`) is cut off again at once; if
 * even that fails, the next append cuts it first, so torn or unacknowledged bytes are never
 * followed by new entries.
 */
export class SyncAppendFile {
  /** Where the file must be cut back to before the next write, after a failed cut. */
  private cutTo: number | undefined;
  private closed = false;

  constructor(
    readonly filePath: string,
    readonly descriptor: number,
    public size: number,
    /** Set when the file could only be opened for reading: appends fail with this error. */
    readonly readOnly?: SwitchboardError,
  ) {}

  append(buffer: Buffer): void {
    if (this.closed) throw new SwitchboardError("UNAVAILABLE", `${this.filePath} is closed`);
    if (this.readOnly) throw this.readOnly;
    if (this.cutTo !== undefined) this.cut(this.cutTo);
    try {
      writeAllAtSync(this.descriptor, buffer, this.size);
    } catch (error) {
      this.cutQuietly(this.size);
      throw storageError(error, "writing", this.filePath);
    }
    this.size += buffer.length;
  }

  /** Takes back bytes from `offset` on (an append whose commit failed). */
  rollback(offset: number): void {
    if (offset >= this.size) return;
    this.size = offset;
    this.cutQuietly(offset);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await closeFile(this.descriptor);
  }

  private cutQuietly(offset: number): void {
    try {
      this.cut(offset);
    } catch {
      // `cutTo` stays set: the next append tries again before writing.
    }
  }

  private cut(offset: number): void {
    this.cutTo = offset;
    try {
      truncateFileSync(this.descriptor, offset);
    } catch (error) {
      throw storageError(error, "truncating", this.filePath);
    }
    this.cutTo = undefined;
  }
}
