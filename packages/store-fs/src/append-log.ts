import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import { closeFile, openFile, syncData, syncDirectory, writeAllAt } from "./fs-io";

interface PendingWrite {
  buffer: Buffer;
  resolve: () => void;
  reject: (error: unknown) => void;
}

export interface AppendLogOptions {
  /** fdatasync after each batch (false only for tests and throwaway data). */
  durable: boolean;
  /** Names the file in error messages. */
  label: string;
}

/**
 * An append-only file with group commit: writes that arrive while a batch is being written and
 * synced wait and go out together in the next batch, so one fdatasync covers many appends.
 * `append` resolves once its bytes are written and (when durable) synced.
 */
export class AppendLog {
  /** Bytes written (all of them visible to readers). */
  size: number;
  /** Bytes written plus bytes queued: where the next `append` will land. */
  reservedSize: number;
  batches = 0;
  private queue: PendingWrite[] = [];
  private flushing: Promise<void> | undefined;
  private failure: unknown;
  private closed = false;

  private constructor(
    readonly filePath: string,
    private readonly fd: number,
    size: number,
    private readonly options: AppendLogOptions,
  ) {
    this.size = size;
    this.reservedSize = size;
  }

  /** Opens an existing file for appending at `size` (its verified end). */
  static async openAt(filePath: string, size: number, options: AppendLogOptions): Promise<AppendLog> {
    const fd = await openFile(filePath, "r+");
    return new AppendLog(filePath, fd, size, options);
  }

  /** Creates a new file holding `firstLine` and makes it and its directory entry durable. */
  static async create(filePath: string, firstLine: string, options: AppendLogOptions): Promise<AppendLog> {
    const fd = await openFile(filePath, "wx+");
    const header = Buffer.from(`${firstLine}\n`);
    try {
      await writeAllAt(fd, [header], 0);
      if (options.durable) {
        await syncData(fd);
        await syncDirectory(path.dirname(filePath));
      }
    } catch (error) {
      await closeFile(fd).catch(() => undefined);
      throw error;
    }
    return new AppendLog(filePath, fd, header.length, options);
  }

  get descriptor(): number {
    return this.fd;
  }

  append(data: string | Buffer): Promise<void> {
    if (this.failure !== undefined) return Promise.reject(this.broken());
    if (this.closed)
      return Promise.reject(new SwitchboardError("UNAVAILABLE", `${this.options.label} is closed`));
    const buffer = typeof data === "string" ? Buffer.from(data) : data;
    this.reservedSize += buffer.length;
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ buffer, resolve, reject });
      if (!this.flushing) this.flushing = this.flush();
    });
  }

  /** Resolves when everything queued so far is written (and synced). */
  async drain(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.drain();
    this.closed = true;
    await closeFile(this.fd);
  }

  private broken(): SwitchboardError {
    return new SwitchboardError(
      "UNAVAILABLE",
      `${this.options.label} failed earlier and takes no more writes`,
      {
        cause: this.failure,
      },
    );
  }

  private async flush(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        try {
          const buffers = batch.map((item) => item.buffer);
          const total = buffers.reduce((sum, buffer) => sum + buffer.length, 0);
          await writeAllAt(this.fd, buffers, this.size);
          this.size += total;
          if (this.options.durable) await syncData(this.fd);
          this.batches++;
          for (const item of batch) item.resolve();
        } catch (error) {
          // The file may now end in a partial batch; nothing more is written until a restart
          // repairs the tail, so no later entry can follow torn bytes.
          this.failure = error;
          const wrapped = new SwitchboardError("UNAVAILABLE", `${this.options.label}: write failed`, {
            cause: error,
          });
          for (const item of [...batch, ...this.queue]) item.reject(wrapped);
          this.queue = [];
        }
      }
    } finally {
      this.flushing = undefined;
    }
  }
}
