import { createHmac } from "node:crypto";
import {
  type AuditChain,
  type AuditRecord,
  type AuditStore,
  createAuditChain,
  verifyAuditRecords,
} from "@switchboard/core";
import type { EventBus } from "./event-bus";

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
  private constructor(
    private readonly store: AuditStore,
    private readonly chain: AuditChain,
    private readonly key: Uint8Array,
    private readonly bus: EventBus,
  ) {}

  static async open(store: AuditStore, key: Uint8Array, bus: EventBus): Promise<AuditService> {
    const last = await store.last();
    const chain = createAuditChain({
      key,
      hmac: nodeHmac,
      ...(last ? { last: { index: last.index, hash: last.hash } } : {}),
    });
    return new AuditService(store, chain, key, bus);
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
    const result = await verifyAuditRecords(this.key, records, { hmac: nodeHmac });
    return result;
  }
}
