import { SwitchboardError } from "../errors";
import { type AuditEntry, AuditHashSchema } from "./audit-schema";
import { canonicalJson } from "./canonical-json";

/** HMAC keys shorter than this are refused: they would make the chain forgeable by brute force. */
export const MIN_AUDIT_KEY_BYTES = 16;

// Importing a key is the slow part of an HMAC in WebCrypto; a chain hashes with one key for its whole
// life. Keyed by the array object, so a caller who mutates the bytes in place must pass a new array.
const importedKeys = new WeakMap<Uint8Array, Promise<HmacKey>>();

// Derived from the global so the package needs neither the DOM lib nor node:crypto types.
type Subtle = typeof globalThis.crypto.subtle;
type HmacKey = Awaited<ReturnType<Subtle["importKey"]>>;

function subtle(): Subtle {
  const subtleCrypto = globalThis.crypto?.subtle;
  if (!subtleCrypto) {
    throw new SwitchboardError("UNAVAILABLE", "audit: WebCrypto (globalThis.crypto.subtle) is not available");
  }
  return subtleCrypto;
}

function importKey(key: Uint8Array): Promise<HmacKey> {
  assertAuditKey(key);
  let imported = importedKeys.get(key);
  if (!imported) {
    const importing = subtle().importKey(
      "raw",
      new Uint8Array(key),
      { name: "HMAC", hash: "SHA-256" },
      false,
      ["sign"],
    );
    // A failed import must not poison the cache for later calls.
    importing.catch(() => importedKeys.delete(key));
    importedKeys.set(key, importing);
    imported = importing;
  }
  return imported;
}

export function assertAuditKey(key: unknown): asserts key is Uint8Array {
  if (!(key instanceof Uint8Array) || key.byteLength < MIN_AUDIT_KEY_BYTES) {
    throw new SwitchboardError(
      "INVALID_REQUEST",
      `audit key must be a Uint8Array of at least ${MIN_AUDIT_KEY_BYTES} bytes`,
    );
  }
}

/** 32 fresh random bytes for a new chain's HMAC key. */
export function generateAuditKey(): Uint8Array {
  return globalThis.crypto.getRandomValues(new Uint8Array(32));
}

/**
 * `HMAC-SHA256(key, prevHash ‖ canonicalJson(entry))` as lower-case hex. `entry` is everything of a
 * record except `index`, `prevHash` and `hash`, so any field added to or changed in a stored record
 * changes its hash.
 */
/**
 * An HMAC-SHA256 implementation returning lower-case hex. Core uses WebCrypto; a host may inject a
 * faster synchronous one (e.g. node:crypto's createHmac) without core importing Node modules.
 */
export type AuditHmac = (key: Uint8Array, message: string) => string | Promise<string>;

export async function computeAuditHash(
  key: Uint8Array,
  prevHash: string,
  entry: AuditEntry | Record<string, unknown>,
  hmac?: AuditHmac,
): Promise<string> {
  if (!AuditHashSchema.safeParse(prevHash).success) {
    throw new SwitchboardError("INVALID_REQUEST", "audit: prevHash must be 64 lower-case hex characters");
  }
  if (hmac) return hmac(key, prevHash + canonicalJson(entry));
  const message = new TextEncoder().encode(prevHash + canonicalJson(entry));
  const signature = await subtle().sign("HMAC", await importKey(key), message);
  return toHex(new Uint8Array(signature));
}

function toHex(bytes: Uint8Array): string {
  let hex = "";
  for (const byte of bytes) hex += byte.toString(16).padStart(2, "0");
  return hex;
}
