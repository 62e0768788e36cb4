import { createHmac } from "node:crypto";
import {
  type AuditChain,
  type AuditHead,
  type AuditRecord,
  type AuditStore,
  createAuditChain,
  type MetaStore,
} from "@switchboard/core";

const ANCHOR = "audit.head";
/** Set once, at the start that found the log short of its anchor: the loss stays reported. */
const LOST = "audit.head.lost";

/** Records cut off the log while the gateway was down, as found at a start. */
export interface LostAuditTail {
  /** The head the anchor named, which the log no longer reaches. */
  anchored: AuditHead;
  /** The index the log ended at (-1: empty), or where its record differed from the anchor. */
  foundIndex: number;
  detectedAt: number;
}

/** node:crypto's synchronous HMAC: the same hashes as core's WebCrypto default, without a thread hop. */
export const nodeHmac = (key: Uint8Array, message: string): string =>
  createHmac("sha256", key).update(message).digest("hex");

export type AuditEntry = Parameters<AuditChain["next"]>[0];

/**
 * The head of the audit hash chain: which index and hash the next record links to, and the newest
 * head known durable (anchored outside the log so a cut-off tail is noticed). One process owns it;
 * several instances appending to one chain need the head in the store (a compare-and-set append).
 */
export interface AuditChainHead {
  /** Chains `entry` after the current head; calls are chained in call order. */
  next(entry: AuditEntry): Promise<AuditRecord>;
  /** `record` is in the store: it becomes the durable head if it is newer. */
  stored(record: AuditRecord): void;
  /**
   * The store refused a record the chain already moved past: once `settled` (records chained on the
   * old head fail first), the head is re-read from the store. `next` waits until then.
   */
  resync(settled: Promise<unknown>): void;
  /** Records the durable head outside the log (nothing when it is anchored already). */
  anchor(): Promise<void>;
  /**
   * Resolves once the head anchored outside the log is at `index` or later (`index` must be
   * stored). Calls arriving while an anchor is being written share the next one: one anchor write
   * per group of records, pipelined with the records' own group commits.
   */
  anchorThrough(index: number): Promise<void>;
  /** The head last anchored, if any and readable. */
  anchored(): Promise<AuditHead | undefined>;
  /** Records a start found cut off the log, if one ever did (it stays reported). */
  lostTail(): Promise<LostAuditTail | undefined>;
}

/** The chain in memory, anchored in the meta store. */
export class InProcessAuditHead implements AuditChainHead {
  /** The newest record known to be durable; what `anchor()` records outside the log. */
  private durableHead: AuditHead | undefined;
  /** Set while the chain is rebuilt from the store after a failed append. */
  private resyncing: Promise<void> | undefined;
  /** The index of the head anchored outside the log (-1: none). */
  private anchoredIndex = -1;
  /** The anchor write in flight, if any. */
  private anchoring: Promise<void> | undefined;

  private constructor(
    private readonly store: Pick<AuditStore, "last">,
    private readonly meta: MetaStore,
    private readonly key: Uint8Array,
    private chain: AuditChain,
  ) {}

  static async open(
    store: Pick<AuditStore, "last" | "read">,
    meta: MetaStore,
    key: Uint8Array,
  ): Promise<InProcessAuditHead> {
    const last = await store.last();
    const head = new InProcessAuditHead(store, meta, key, chainAfter(key, last));
    if (last) head.durableHead = { index: last.index, hash: last.hash };
    const anchored = await head.anchored();
    head.anchoredIndex = anchored?.index ?? -1;
    // A log that no longer reaches its anchor lost records while the gateway was down. The chain
    // goes on from what is left, and the next anchors would name the new head: noted now, or the
    // loss would stop showing once the log grew past the old anchor's index.
    if (anchored && !(await meta.get(LOST))) {
      const found = await recordAt(store, last, anchored.index);
      if (found?.hash !== anchored.hash) {
        const lost: LostAuditTail = {
          anchored,
          foundIndex: found ? anchored.index : (last?.index ?? -1),
          detectedAt: Date.now(),
        };
        await meta.set(LOST, JSON.stringify(lost));
      }
    }
    return head;
  }

  async lostTail(): Promise<LostAuditTail | undefined> {
    const text = await this.meta.get(LOST);
    if (!text) return undefined;
    try {
      return JSON.parse(text) as LostAuditTail;
    } catch {
      // Unreadable: still a loss that was recorded.
      return { anchored: { index: -1, hash: "" }, foundIndex: -1, detectedAt: 0 };
    }
  }

  next(entry: AuditEntry): Promise<AuditRecord> {
    return this.resyncing ? this.resyncing.then(() => this.chain.next(entry)) : this.chain.next(entry);
  }

  stored(record: AuditRecord): void {
    if (!this.durableHead || record.index > this.durableHead.index) {
      this.durableHead = { index: record.index, hash: record.hash };
    }
  }

  resync(settled: Promise<unknown>): void {
    this.resyncing ??= (async () => {
      await settled;
      this.chain = chainAfter(this.key, await this.store.last());
    })().finally(() => {
      this.resyncing = undefined;
    });
  }

  async anchor(): Promise<void> {
    const head = this.durableHead;
    if (head && head.index > this.anchoredIndex) await this.anchorThrough(head.index);
  }

  async anchorThrough(index: number): Promise<void> {
    if (!this.durableHead || this.durableHead.index < index) {
      throw new Error(`audit head: record ${index} is not stored yet, so it cannot be anchored`);
    }
    while (this.anchoredIndex < index) {
      this.anchoring ??= this.writeAnchor().finally(() => {
        this.anchoring = undefined;
      });
      await this.anchoring;
    }
  }

  /** Writes the current durable head; records stored meanwhile wait for the next write. */
  private async writeAnchor(): Promise<void> {
    const head = this.durableHead;
    if (!head || head.index <= this.anchoredIndex) return;
    await this.meta.set(ANCHOR, JSON.stringify(head));
    this.anchoredIndex = Math.max(this.anchoredIndex, head.index);
  }

  async anchored(): Promise<AuditHead | undefined> {
    const text = await this.meta.get(ANCHOR);
    if (!text) return undefined;
    try {
      const head = JSON.parse(text) as AuditHead;
      return Number.isInteger(head.index) && typeof head.hash === "string" ? head : undefined;
    } catch {
      return undefined;
    }
  }
}

/** The stored record at `index`: the last one itself on the common path, read otherwise. */
async function recordAt(
  store: Pick<AuditStore, "last" | "read">,
  last: AuditRecord | undefined,
  index: number,
): Promise<AuditRecord | undefined> {
  if (!last || last.index < index) return undefined;
  if (last.index === index) return last;
  const [record] = await store.read({ after: index - 1, limit: 1 });
  return record?.index === index ? record : undefined;
}

function chainAfter(key: Uint8Array, last: AuditRecord | undefined): AuditChain {
  return createAuditChain({
    key,
    hmac: nodeHmac,
    ...(last ? { last: { index: last.index, hash: last.hash } } : {}),
  });
}
