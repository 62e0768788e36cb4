import { SwitchboardError } from "../errors";

/**
 * Row versions for compare-and-set writes. One counter per table gives every write a version no
 * row of that table had before, so a row deleted and created again never comes back with a
 * version a stale reader still holds (no ABA). Rows loaded at open and not written since share
 * `LOADED_VERSION`, which keeps opening 100k rows free of per-row bookkeeping.
 *
 * Versions live as long as the open store: the embedded stores are one process, so no version
 * is held across a restart. A networked store keeps them in a column instead.
 */
export const LOADED_VERSION = 1;

/** What `put` accepts besides the row. */
export interface WriteOptions {
  /**
   * Compare-and-set: the write happens only if the row's current version is this one (`0`: the
   * row must not exist, i.e. insert-only); otherwise it rejects with CONFLICT naming the key and
   * both versions. Absent: an unconditional write.
   */
  expectedVersion?: number;
}

export class RowVersions {
  private counter = LOADED_VERSION;
  private readonly versions = new Map<string, number>();

  /** `table` names the rows in errors ("session", "run"). */
  constructor(private readonly table: string) {}

  /** The current version of a row; `present` says whether the row exists (0 when it does not). */
  of(key: string, present: boolean): number {
    if (!present) return 0;
    return this.versions.get(key) ?? LOADED_VERSION;
  }

  /** Throws CONFLICT when `expected` is given and is not the row's current version. */
  check(key: string, present: boolean, expected: number | undefined): void {
    if (expected === undefined) return;
    if (!Number.isInteger(expected) || expected < 0) {
      throw new SwitchboardError("INVALID_REQUEST", "expectedVersion: must be an integer >= 0", {
        details: { field: "expectedVersion" },
      });
    }
    const actual = this.of(key, present);
    if (actual === expected) return;
    const now = actual === 0 ? "does not exist" : `is at version ${actual}`;
    throw new SwitchboardError(
      "CONFLICT",
      `${this.table} ${key} changed meanwhile: expected version ${expected}, but it ${now}; read it again and retry`,
      { details: { key, expectedVersion: expected, actualVersion: actual } },
    );
  }

  /** Gives a written row a fresh version and returns it with an undo for a failed write. */
  bump(key: string): { version: number; undo: () => void } {
    const previous = this.versions.get(key);
    const version = ++this.counter;
    this.versions.set(key, version);
    return {
      version,
      undo: () => {
        // A later write of the same row keeps its own version.
        if (this.versions.get(key) !== version) return;
        if (previous === undefined) this.versions.delete(key);
        else this.versions.set(key, previous);
      },
    };
  }

  /** The row is gone; a later insert gets a fresh version. */
  forget(key: string): number | undefined {
    const previous = this.versions.get(key);
    this.versions.delete(key);
    return previous;
  }

  /** Puts back what `forget` removed (a failed delete). */
  restore(key: string, version: number | undefined): void {
    if (version !== undefined) this.versions.set(key, version);
  }
}
