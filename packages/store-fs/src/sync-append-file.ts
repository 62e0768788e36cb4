import fs from "node:fs";
import { SwitchboardError } from "@switchboard/core";
import { closeFile } from "./fs-io";

/**
 * An append-only file written synchronously, without fsync: for transcripts, whose durability
 * comes from the commit log. A synchronous write lands in the page cache in microseconds, while
 * an async one costs a thread-pool round trip per file and per batch, which dominated appends
 * spread over many transcripts. Bytes are readable as soon as `append` returns.
 */
export class SyncAppendFile {
  private failure: unknown;
  private closed = false;

  constructor(
    readonly filePath: string,
    readonly descriptor: number,
    public size: number,
  ) {}

  get failed(): boolean {
    return this.failure !== undefined;
  }

  append(buffer: Buffer): void {
    if (this.failure !== undefined) {
      throw new SwitchboardError("UNAVAILABLE", `${this.filePath}: a write failed earlier`, {
        cause: this.failure,
      });
    }
    if (this.closed) throw new SwitchboardError("UNAVAILABLE", `${this.filePath} is closed`);
    let done = 0;
    try {
      while (done < buffer.length) {
        done += fs.writeSync(this.descriptor, buffer, done, buffer.length - done, this.size + done);
      }
    } catch (error) {
      // A partial line may now end the file; it is cut when the transcript is opened again.
      this.failure = error;
      throw new SwitchboardError("UNAVAILABLE", `${this.filePath}: write failed`, { cause: error });
    }
    this.size += buffer.length;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await closeFile(this.descriptor);
  }
}
