import { formatZodIssues, invalidRequestFromZod, SwitchboardError } from "../errors";
import { type AuditHmac, assertAuditKey, computeAuditHash } from "./audit-hash";
import {
  type AuditEntry,
  AuditEntrySchema,
  AuditHashSchema,
  type AuditHead,
  type AuditRecord,
  AuditRecordSchema,
  GENESIS_HASH,
} from "./audit-schema";

export interface AuditChainOptions {
  /** The HMAC key (see `generateAuditKey`). */
  key: Uint8Array;
  /** The last record already stored, to continue an existing chain; omit for a new chain. */
  last?: AuditHead;
  /**
   * Stores a record. Called inside the chain's serial section, so records are written in chain order,
   * and the chain only advances once it resolves: a failed write leaves no gap in the chain.
   */
  persist?: (record: AuditRecord) => Promise<void> | void;
  /** HMAC implementation (default: WebCrypto). */
  hmac?: AuditHmac;
}

/**
 * Records a chain built here from an entry it validated. They are frozen, so each stays exactly as
 * built and a store may take it without parsing it again (`isChainBuiltRecord`). Only this module
 * adds to the set: no caller can vouch for a record it made itself.
 */
const chainBuilt = new WeakSet<object>();

/** Whether `record` is one an `AuditChain` built (and froze): valid as it stands. */
export function isChainBuiltRecord(record: unknown): record is AuditRecord {
  return typeof record === "object" && record !== null && chainBuilt.has(record);
}

/**
 * Builds the records of one hash chain. Calls to `next` may overlap; they are applied one at a time in
 * call order, so every record links to the one before it.
 */
export class AuditChain {
  readonly #key: Uint8Array;
  readonly #persist: AuditChainOptions["persist"];
  readonly #hmac: AuditHmac | undefined;
  #nextIndex: number;
  #prevHash: string;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(options: AuditChainOptions) {
    assertAuditKey(options.key);
    // Copied so a caller reusing its buffer cannot change the key under a running chain.
    this.#key = new Uint8Array(options.key);
    this.#persist = options.persist;
    this.#hmac = options.hmac;
    if (options.last === undefined) {
      this.#nextIndex = 0;
      this.#prevHash = GENESIS_HASH;
    } else {
      const { index, hash } = options.last;
      if (!Number.isSafeInteger(index) || index < 0) {
        throw new SwitchboardError("INVALID_REQUEST", "audit: last.index must be a safe integer >= 0");
      }
      if (!AuditHashSchema.safeParse(hash).success) {
        throw new SwitchboardError(
          "INVALID_REQUEST",
          "audit: last.hash must be 64 lower-case hex characters",
        );
      }
      this.#nextIndex = index + 1;
      this.#prevHash = hash;
    }
  }

  /** The last record appended (or the `last` it was created with); undefined for an empty chain. */
  get head(): AuditHead | undefined {
    return this.#nextIndex === 0 ? undefined : { index: this.#nextIndex - 1, hash: this.#prevHash };
  }

  /** Validates the entry, links it to the chain, persists it (if configured) and returns the record. */
  next(entry: AuditEntry): Promise<AuditRecord> {
    const parsed = AuditEntrySchema.safeParse(entry);
    if (!parsed.success) return Promise.reject(invalidRequestFromZod(parsed.error, "audit entry"));
    const run = this.#queue.then(() => this.#append(parsed.data));
    // Keep the queue alive after a failure; the failing caller still sees its own rejection.
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #append(entry: AuditEntry): Promise<AuditRecord> {
    const prevHash = this.#prevHash;
    const hash = await computeAuditHash(this.#key, prevHash, entry, this.#hmac);
    // An injected HMAC's output is checked here, since the records this chain vouches for are not
    // parsed again by a store.
    if (!AuditHashSchema.safeParse(hash).success) {
      throw new SwitchboardError(
        "INTERNAL",
        "audit: the HMAC did not return 64 lower-case hex characters; the record was not made",
      );
    }
    const record: AuditRecord = Object.freeze({ ...entry, index: this.#nextIndex, prevHash, hash });
    chainBuilt.add(record);
    if (this.#persist) await this.#persist(record);
    this.#nextIndex = record.index + 1;
    this.#prevHash = hash;
    return record;
  }
}

export function createAuditChain(options: AuditChainOptions): AuditChain {
  return new AuditChain(options);
}

export interface AuditVerifyOptions {
  /** Verify a tail of a chain: the record just before the first one given. Default: genesis. */
  after?: AuditHead;
  /**
   * A head recorded elsewhere (e.g. the last one seen): the chain must contain it. Catches a truncated
   * tail, which no chain can detect by itself. Records after it are fine (appended later).
   */
  expectedHead?: AuditHead;
  /** HMAC implementation (default: WebCrypto). */
  hmac?: AuditHmac;
}

export interface AuditVerifyResult {
  ok: boolean;
  /** Records verified before the first bad one (all of them when `ok`). */
  entries: number;
  /** The chain position (expected `index`) of the first record that does not verify. */
  firstBadIndex?: number;
  reason?: string;
}

/**
 * Replays the chain and stops at the first record that is malformed, out of place, not linked to its
 * predecessor or whose hash does not match its content. A changed entry fails its own hash; a removed,
 * reordered or inserted one breaks the index sequence or the `prevHash` link at that position.
 */
export async function verifyAuditRecords(
  key: Uint8Array,
  records: Iterable<unknown> | AsyncIterable<unknown>,
  options: AuditVerifyOptions = {},
): Promise<AuditVerifyResult> {
  assertAuditKey(key);
  const keyCopy = new Uint8Array(key);
  let expectedIndex = options.after ? options.after.index + 1 : 0;
  let expectedPrev = options.after ? options.after.hash : GENESIS_HASH;
  let entries = 0;
  const bad = (reason: string): AuditVerifyResult => ({
    ok: false,
    entries,
    firstBadIndex: expectedIndex,
    reason,
  });

  for await (const raw of records) {
    const parsed = AuditRecordSchema.safeParse(raw);
    if (!parsed.success) return bad(`malformed record: ${formatZodIssues(parsed.error).join("; ")}`);
    const { index, prevHash, hash, ...entry } = parsed.data;
    if (index !== expectedIndex) {
      return bad(
        `record has index ${index} where ${expectedIndex} was expected (removed, inserted or reordered)`,
      );
    }
    if (prevHash !== expectedPrev) {
      return bad("prevHash does not match the previous record's hash (removed, inserted or reordered)");
    }
    if ((await computeAuditHash(keyCopy, prevHash, entry, options.hmac)) !== hash) {
      return bad("hash does not match the record's content (changed, or written with another key)");
    }
    if (options.expectedHead?.index === index && options.expectedHead.hash !== hash) {
      return bad("hash differs from the head recorded for this index (chain rewritten)");
    }
    expectedPrev = hash;
    expectedIndex += 1;
    entries += 1;
  }

  const head = options.expectedHead;
  if (head && expectedIndex <= head.index) {
    return bad(`chain ends before the expected head at index ${head.index} (records missing at the end)`);
  }
  return { ok: true, entries };
}
