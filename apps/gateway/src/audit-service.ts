import {
  type AuditRecord,
  type AuditStore,
  type MetaStore,
  type Store,
  type TaintRise,
  verifyAuditRecords,
} from "@switchboard/core";
import type { ClusterAuditLog } from "@switchboard/store-pg";
import { type AuditChainHead, type AuditEntry, InProcessAuditHead, nodeHmac } from "./ports/audit-head";
import type { EventLog } from "./ports/event-log";

export interface AuditInput {
  kind: string;
  actor?: string;
  sessionKey?: string;
  data: Record<string, unknown>;
}

/** Appends decisions to the hash-chained audit log and announces each append on the event bus. */
export class AuditService {
  private persisted: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly store: Pick<AuditStore, "append" | "read" | "tail" | "scan">,
    private readonly head: AuditChainHead,
    private readonly key: Uint8Array,
    private readonly bus: EventLog,
    /**
     * Several instances: records go to this instance's chain of the cluster's audit chains (one
     * chain per writer, anchored together by the leader), and `verify` checks every chain.
     */
    private readonly cluster?: ClusterAuditLog,
  ) {}

  /**
   * The audit of one instance of a cluster. The chain is in the database: `appendWith` records the
   * entry in this instance's chain first and then lets `persist` store the same record with its
   * data (a failure between the two leaves an audit record of a write that did not happen, never a
   * write without its record); a taint rise (`commitTaintRise`) is one transaction instead.
   */
  static forCluster(
    cluster: ClusterAuditLog,
    store: AuditStore,
    key: Uint8Array,
    bus: EventLog,
  ): AuditService {
    // The head lives in the cluster log (chains in the database, anchored by the leader's timer).
    const head: AuditChainHead = {
      next: () => Promise.reject(new Error("the cluster's audit chains are appended by the cluster log")),
      stored: () => undefined,
      resync: () => undefined,
      anchor: () => Promise.resolve(),
      anchorThrough: () => Promise.resolve(),
      anchored: () => Promise.resolve(undefined),
      lostTail: () => Promise.resolve(undefined),
    };
    return new AuditService(store, head, key, bus, cluster);
  }

  static async open(
    store: AuditStore,
    meta: MetaStore,
    key: Uint8Array,
    bus: EventLog,
  ): Promise<AuditService> {
    return new AuditService(store, await InProcessAuditHead.open(store, meta, key), key, bus);
  }

  /**
   * Records the durable head outside the log (meta store) when it is behind. Every append already
   * anchors its record before it resolves; this is for shutdown and bookkeeping.
   */
  anchor(): Promise<void> {
    // In a cluster every instance anchors (every chain's head) on this same timer and at close, so
    // a removed tail is noticed however the leader's own anchors are timed.
    if (this.cluster) return this.cluster.anchor();
    return this.head.anchor();
  }

  /**
   * Chains in call order (the head serialises `next`) and hands records to the store in that same
   * order without waiting for each fsync, so concurrent decisions share one group commit. Resolves
   * once the record is durable and anchored outside the log (see `appendWith`).
   */
  async append(input: AuditInput): Promise<AuditRecord> {
    return (await this.appendWith(input, this.storeOnly)).record;
  }

  /**
   * Like `append`, but `persist` stores the record (instead of the audit store's `append`), for
   * a write that commits it together with other data as one unit (a taint rise). `persist` is
   * called in chain order and must hand the record to the store before it returns.
   *
   * The record's head is anchored outside the log (meta store) before this resolves: one anchor
   * write per group of records, pipelined with their group commits. So a tail of acknowledged
   * records cut off the log (after a crash, or by hand) is noticed by `verify`, however recent.
   */
  appendWith<T>(
    input: AuditInput,
    persist: (record: AuditRecord) => Promise<T>,
  ): Promise<{ record: AuditRecord; result: T }> {
    const entry = entryOf(input);
    if (this.cluster) return this.appendToCluster(this.cluster, entry, persist);
    const stored = this.head.next(entry).then(async (record) => {
      let result: T;
      try {
        result = await persist(record);
      } catch (error) {
        // The store rolled the record back (e.g. disk full), but the chain moved past it, and every
        // record chained after it is refused too: start again from what the store holds.
        this.head.resync(this.persisted);
        throw error;
      }
      this.head.stored(record);
      return { record, result };
    });
    this.persisted = stored.catch(() => undefined);
    return stored.then(async (done) => {
      await this.head.anchorThrough(done.record.index);
      this.announce(done.record);
      return done;
    });
  }

  /**
   * A taint rise: its audit record, the transcript's `taint` entry and the session row, all of
   * them or none, also across a crash. One process: the store commits the three together.
   * Several instances: one PostgreSQL transaction writes the record into this instance's chain
   * and the entry and row into the store's tables.
   */
  async commitTaintRise(
    input: AuditInput,
    rise: Omit<TaintRise, "audit">,
    store: Pick<Store, "commitTaintRise">,
  ): Promise<void> {
    if (this.cluster) {
      const { record } = await this.cluster.commitTaintRise(entryOf(input), rise);
      this.announce(record);
      return;
    }
    await this.appendWith(input, (record) => store.commitTaintRise({ ...rise, audit: record }));
  }

  private async appendToCluster<T>(
    cluster: ClusterAuditLog,
    entry: AuditEntry,
    persist: (record: AuditRecord) => Promise<T>,
  ): Promise<{ record: AuditRecord; result: T }> {
    const record = await cluster.append(entry);
    // The plain `append` stores nothing more: the chain's table is the cluster's audit log.
    const result = persist === this.storeOnly ? (undefined as T) : await persist(record);
    this.announce(record);
    return { record, result };
  }

  /** `append`'s persist step, recognised so a cluster append does not store the record twice. */
  private readonly storeOnly = (record: AuditRecord) => this.store.append([record]);

  private announce(record: AuditRecord): void {
    this.bus.publish(
      "audit.appended",
      {
        index: record.index,
        kind: record.kind,
        ...(record.sessionKey ? { sessionKey: record.sessionKey } : {}),
      },
      record.sessionKey ? { sessionKey: record.sessionKey } : {},
    );
  }

  async tail(limit: number, after?: number): Promise<AuditRecord[]> {
    // A cluster has one chain per writer and no global index: records carry a cluster-wide
    // `position`, which is what `after` means there.
    if (this.cluster) return this.cluster.tail(limit, after);
    if (after !== undefined) return this.store.read({ after, limit });
    return this.store.tail(limit);
  }

  async verify(): Promise<{ ok: boolean; entries: number; firstBadIndex?: number; reason?: string }> {
    if (this.cluster) {
      const result = await this.cluster.verify();
      return {
        ok: result.ok,
        entries: result.entries,
        ...(result.firstBadIndex !== undefined ? { firstBadIndex: result.firstBadIndex } : {}),
        ...(result.reason !== undefined
          ? { reason: result.chainId ? `chain ${result.chainId}: ${result.reason}` : result.reason }
          : {}),
      };
    }
    await this.persisted;
    // The anchor first: the scan then reaches at least as far (records are written before their anchor).
    const expectedHead = await this.head.anchored();
    const result = await verifyAuditRecords(this.key, inSlices(this.store.scan(VERIFY_SLICE)), {
      hmac: nodeHmac,
      ...(expectedHead ? { expectedHead } : {}),
    });
    // A tail cut off while the gateway was down stays reported after the log grew past it.
    const lost = await this.head.lostTail();
    if (!lost || !result.ok) return result;
    return {
      ok: false,
      entries: result.entries,
      firstBadIndex: lost.foundIndex + 1,
      reason:
        `records ${lost.foundIndex + 1} to ${lost.anchored.index} were cut from the log while the gateway ` +
        `was down (its anchor named index ${lost.anchored.index}; found at the start of ` +
        `${new Date(lost.detectedAt).toISOString()}); restore the log from a backup`,
    };
  }
}

/** Records verified between two yields: ~5 ms of hashing, so other requests are not held up. */
const VERIFY_SLICE = 500;

/**
 * The records of the store's scan one by one, a page in memory at a time (a whole log of millions of
 * records is not), letting the event loop run between pages (hashing is synchronous: verifying 100k
 * records in one go held every client for most of a second).
 */
async function* inSlices<T>(pages: AsyncIterable<readonly T[]>): AsyncGenerator<T> {
  let first = true;
  for await (const page of pages) {
    if (!first) await new Promise((resolve) => setImmediate(resolve));
    first = false;
    yield* page;
  }
}

function entryOf(input: AuditInput): AuditEntry {
  const entry = { kind: input.kind, at: Date.now(), data: input.data } as AuditEntry;
  if (input.actor !== undefined) entry.actor = input.actor;
  if (input.sessionKey !== undefined) entry.sessionKey = input.sessionKey;
  return entry;
}
