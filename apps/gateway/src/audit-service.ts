import { createHmac } from "node:crypto";
import {
  type AuditChain,
  type AuditHead,
  type AuditRecord,
  type AuditStore,
  createAuditChain,
  type MetaStore,
  verifyAuditRecords,
} from "@switchboard/core";
import type { EventBus } from "./event-bus";

const ANCHOR = "audit.head";

/** node:crypto's synchronous HMAC: the same hashes as core's WebCrypto default, without a thread hop. */
const nodeHmac = (key: Uint8Array, message: string): string =>
  createHmac("sha256", key).update(message).digest("hex");

export interface AuditInput {
  kind: string;
  actor?: string;
  sessionKey?: string;
  data: Record<string, unknown>;
}

/** Appends decisions to the hash-chained audit log and announces each append on the event bus. */
export class AuditService {
  /** The newest record known to be durable; what `anchor()` records outside the log. */
  private durableHead: AuditHead | undefined;

  private constructor(
    private readonly store: AuditStore,
    private readonly meta: MetaStore,
    private readonly chain: AuditChain,
    private readonly key: Uint8Array,
    private readonly bus: EventBus,
  ) {}

  static async open(
    store: AuditStore,
    meta: MetaStore,
    key: Uint8Array,
    bus: EventBus,
  ): Promise<AuditService> {
    const last = await store.last();
    const chain = createAuditChain({
      key,
      hmac: nodeHmac,
      ...(last ? { last: { index: last.index, hash: last.hash } } : {}),
    });
    const service = new AuditService(store, meta, chain, key, bus);
    if (last) service.durableHead = { index: last.index, hash: last.hash };
    return service;
  }

  /**
   * Records the durable head outside the log (meta store). A chain cannot notice a cut-off tail by
   * itself; `verify` checks the log still reaches the last anchored head.
   */
  async anchor(): Promise<void> {
    const head = this.durableHead;
    if (head) await this.meta.set(ANCHOR, JSON.stringify(head));
  }

  private async anchoredHead(): Promise<AuditHead | undefined> {
    const text = await this.meta.get(ANCHOR);
    if (!text) return undefined;
    try {
      const head = JSON.parse(text) as AuditHead;
      return Number.isInteger(head.index) && typeof head.hash === "string" ? head : undefined;
    } catch {
      return undefined;
    }
  }

  private persisted: Promise<unknown> = Promise.resolve();

  /**
   * Chains in call order (the chain serialises `next`) and hands records to the store in that same
   * order without waiting for each fsync, so concurrent decisions share one group commit.
   */
  append(input: AuditInput): Promise<AuditRecord> {
    const entry = { kind: input.kind, at: Date.now(), data: input.data } as Parameters<AuditChain["next"]>[0];
    if (input.actor !== undefined) entry.actor = input.actor;
    if (input.sessionKey !== undefined) entry.sessionKey = input.sessionKey;
    const task = this.chain.next(entry).then(async (record) => {
      await this.store.append([record]);
      if (!this.durableHead || record.index > this.durableHead.index) {
        this.durableHead = { index: record.index, hash: record.hash };
      }
      this.bus.publish(
        "audit.appended",
        {
          index: record.index,
          kind: record.kind,
          ...(record.sessionKey ? { sessionKey: record.sessionKey } : {}),
        },
        record.sessionKey ? { sessionKey: record.sessionKey } : {},
      );
      return record;
    });
    this.persisted = task.catch(() => undefined);
    return task;
  }

  async tail(limit: number, after?: number): Promise<AuditRecord[]> {
    if (after !== undefined) return this.store.read({ after, limit });
    return this.store.tail(limit);
  }

  async verify(): Promise<{ ok: boolean; entries: number; firstBadIndex?: number; reason?: string }> {
    await this.persisted;
    const records = await this.store.read({});
    const expectedHead = await this.anchoredHead();
    return verifyAuditRecords(this.key, records, {
      hmac: nodeHmac,
      ...(expectedHead ? { expectedHead } : {}),
    });
  }
}
