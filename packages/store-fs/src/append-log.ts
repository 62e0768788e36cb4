import fs from "node:fs";
import path from "node:path";
import { SwitchboardError } from "@switchboard/core";
import {
  closeFile,
  DSYNC_FLAG,
  openLogFile,
  syncData,
  syncDirectory,
  syncedByWrite,
  truncateFile,
  writeAllAt,
} from "./fs-io";
import { storageError } from "./storage-errors";
import type { StoreHealthTracker } from "./store-health";

/**
 * A durable log is opened O_DSYNC (where the platform has it), so each batch is one durable
 * writev instead of a writev and an fdatasync: half the thread-pool round trips per commit.
 */
function dsyncFor(options: AppendLogOptions): boolean {
  return options.durable && DSYNC_FLAG !== undefined;
}

interface PendingWrite {
  buffer: Buffer;
  resolve: () => void;
  reject: (error: unknown) => void;
  onFail?: () => void;
}

export interface AppendLogOptions {
  /** fdatasync after each batch (false only for tests and throwaway data). */
  durable: boolean;
  /** Names the file's part of the store in health reports (`sessions journal`, `commit log`). */
  label: string;
  health?: StoreHealthTracker;
  /**
   * When a batch starts after its first write: a few microtask turns later (the default), or at the
   * end of the current turn of the event loop (`turn`), for a log whose writes of one request are
   * issued far apart within that turn (the audit log: a call's impersonation record at its start,
   * its delivery record once the run is built; the commit log: a run's reply and the waiting
   * caller's record of the call).
   */
  gather?: "microtasks" | "turn";
  /**
   * Nothing is written before this settles; when it rejects, every write queued by then fails
   * with its error. For a commit-log segment whose predecessor may still have batches in flight.
   */
  after?: Promise<void>;
}

/**
 * An append-only file with group commit: writes that arrive while a batch is being written and
 * synced wait and go out together in the next batch, so one fdatasync covers many appends.
 * `append` resolves once its bytes are written and (when durable) synced.
 *
 * A failed batch (disk full, I/O error) rejects every write queued so far, then the file is cut
 * back to its last acknowledged byte before anything else is written, so a half-written batch can
 * never be read back as valid. Later appends work again as soon as the cause is gone.
 */
export class AppendLog {
  /** Bytes acknowledged (all of them visible to readers). */
  size: number;
  /** Bytes written plus bytes queued: where the next `append` will land. */
  reservedSize: number;
  batches = 0;
  private queue: PendingWrite[] = [];
  private flushing: Promise<void> | undefined;
  /** Set after a failed batch until the file is cut back to `size`. */
  private needsRepair = false;
  private closed = false;
  private failures = 0;
  private lastFailure: unknown;
  private gate: Promise<void> | undefined;

  private constructor(
    readonly filePath: string,
    private readonly fd: number,
    size: number,
    private readonly options: AppendLogOptions,
  ) {
    this.size = size;
    this.reservedSize = size;
    this.gate = options.after;
    // Seen only by the first batch, if any write ever comes: not an unhandled rejection before.
    this.gate?.catch(() => undefined);
  }

  /** Opens an existing file for appending at `size` (its verified end). */
  static async openAt(filePath: string, size: number, options: AppendLogOptions): Promise<AppendLog> {
    try {
      const fd = await openLogFile(filePath, "existing", dsyncFor(options));
      return new AppendLog(filePath, fd, size, options);
    } catch (error) {
      throw storageError(error, "opening", filePath);
    }
  }

  /**
   * Creates a new file holding `firstLine` and makes it and its directory entry durable. On
   * failure the file is removed again, so a retry can create it.
   */
  static async create(filePath: string, firstLine: string, options: AppendLogOptions): Promise<AppendLog> {
    let fd: number;
    try {
      fd = await openLogFile(filePath, "create", dsyncFor(options));
    } catch (error) {
      throw storageError(error, "creating", filePath);
    }
    const header = Buffer.from(`${firstLine}\n`);
    try {
      await writeAllAt(fd, [header], 0);
      if (options.durable) {
        await syncData(fd);
        await syncDirectory(path.dirname(filePath));
      }
    } catch (error) {
      await closeFile(fd).catch(() => undefined);
      await fs.promises.rm(filePath, { force: true }).catch(() => undefined);
      throw storageError(error, "creating", filePath);
    }
    return new AppendLog(filePath, fd, header.length, options);
  }

  get descriptor(): number {
    return this.fd;
  }

  /**
   * Queues `data`. `onFail` runs synchronously when the write fails, before any other code: the
   * failed writes of a batch call theirs newest first, so callers can undo in-memory changes in
   * reverse order.
   */
  append(data: string | Buffer, onFail?: () => void): Promise<void> {
    if (this.closed) {
      return Promise.reject(new SwitchboardError("UNAVAILABLE", `${this.options.label} is closed`));
    }
    const buffer = typeof data === "string" ? Buffer.from(data) : data;
    this.reservedSize += buffer.length;
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ buffer, resolve, reject, ...(onFail ? { onFail } : {}) });
      if (!this.flushing) this.flushing = this.flush();
    });
  }

  /** Resolves when everything queued so far is written (and synced). */
  async drain(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  /**
   * Like `drain`, but rejects with the error of a write that failed meanwhile (so once nothing
   * more is queued: whether every write queued so far was acknowledged).
   */
  async settled(): Promise<void> {
    const failuresBefore = this.failures;
    await this.drain();
    if (this.failures !== failuresBefore) throw this.lastFailure;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.drain();
    this.closed = true;
    await closeFile(this.fd);
  }

  private async flush(): Promise<void> {
    try {
      // The batch starts a few microtask turns later: the writes that the callers resumed by the
      // same completion issue (a few promise hops apart) go out together. Started at once, the
      // first of them went alone and the rest waited a whole round behind it: under B5's load a
      // fifth to a quarter of all batches held one write. (Waiting for the loop's check phase
      // instead batched as well but delayed batches behind long poll phases.)
      if (this.options.gather === "turn") await new Promise<void>((resolve) => setImmediate(resolve));
      else for (let turn = 0; turn < 3; turn++) await Promise.resolve();
      if (this.gate) {
        try {
          await this.gate;
        } catch (error) {
          this.fail([], error, false);
        }
        this.gate = undefined;
      }
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        try {
          if (this.needsRepair) await this.repair();
          const buffers = batch.map((item) => item.buffer);
          const total = buffers.reduce((sum, buffer) => sum + buffer.length, 0);
          await writeAllAt(this.fd, buffers, this.size);
          // Until synced the batch is not acknowledged: a failed sync cuts it off again.
          this.needsRepair = true;
          if (dsyncFor(this.options)) await syncedByWrite(this.fd);
          else if (this.options.durable) await syncData(this.fd);
          this.needsRepair = false;
          this.size += total;
          this.batches++;
          this.options.health?.ok(this.options.label);
          for (const item of batch) item.resolve();
        } catch (error) {
          this.fail(batch, error);
          // Cut the partial batch off now; when that fails too, the next batch tries first.
          await this.repair().catch(() => undefined);
        }
      }
    } finally {
      this.flushing = undefined;
    }
  }

  private fail(batch: PendingWrite[], error: unknown, written = true): void {
    const failed = [...batch, ...this.queue];
    this.queue = [];
    this.reservedSize = this.size;
    if (written) this.needsRepair = true;
    const wrapped = storageError(error, "writing", this.filePath);
    const rejection =
      wrapped instanceof SwitchboardError
        ? wrapped
        : new SwitchboardError("UNAVAILABLE", `${this.options.label}: writing ${this.filePath} failed`, {
            cause: error,
          });
    this.failures++;
    this.lastFailure = rejection;
    this.options.health?.fail(this.options.label, rejection);
    for (let index = failed.length - 1; index >= 0; index--) failed[index]!.onFail?.();
    for (const item of failed) item.reject(rejection);
  }

  /** Cuts the file back to its last acknowledged byte (and syncs that). */
  private async repair(): Promise<void> {
    if (!this.needsRepair) return;
    await truncateFile(this.fd, this.size);
    if (this.options.durable) await syncData(this.fd);
    this.needsRepair = false;
  }
}
