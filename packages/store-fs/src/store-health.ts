import type { StoreDegradation, StoreHealth } from "@switchboard/core";
import { SwitchboardError } from "@switchboard/core";
import { isStorageFault } from "./storage-errors";

/**
 * Which parts of the store failed to write, and since when. A part is marked by a failed write
 * and cleared by its next successful one, so the report follows the disk without a restart.
 */
/** Causes that belong to the machine, not to one file: a probe write elsewhere shows they are gone. */
const MACHINE_WIDE = new Set(["ENOSPC", "EDQUOT", "EMFILE", "ENFILE"]);

export class StoreHealthTracker {
  private readonly degraded = new Map<string, StoreDegradation & { code: string }>();

  /** Records a failed write of `part` when it is a storage fault (other errors are bugs, not health). */
  fail(part: string, error: unknown): void {
    const cause = error instanceof SwitchboardError ? (error.cause ?? error) : error;
    if (!isStorageFault(cause)) return;
    const code = (cause as NodeJS.ErrnoException).code!;
    const message = error instanceof Error ? error.message : String(error);
    const since = this.degraded.get(part)?.since ?? new Date().toISOString();
    this.degraded.set(part, { cause: message, since, code });
  }

  ok(part: string): void {
    if (this.degraded.size > 0) this.degraded.delete(part);
  }

  get healthy(): boolean {
    return this.degraded.size === 0;
  }

  /**
   * A probe write succeeded: machine-wide causes (space, descriptors) are gone, so those parts get
   * their chance again. A file-specific cause (permissions) stays until that part writes again.
   */
  probeSucceeded(): void {
    for (const [part, entry] of this.degraded) if (MACHINE_WIDE.has(entry.code)) this.degraded.delete(part);
  }

  report(): StoreHealth {
    if (this.degraded.size === 0) return { ok: true };
    const degraded: Record<string, StoreDegradation> = {};
    for (const [part, { cause, since }] of this.degraded) degraded[part] = { cause, since };
    return { ok: false, degraded };
  }
}
