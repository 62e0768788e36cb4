// Core is compiled with neither Node's types nor the DOM lib, so an import of `node:*` or a use of
// `process`, `Buffer` or `document` fails to compile. What it does use from the host is declared here,
// as narrowly as core needs it: web-platform globals that Node ≥ 20, browsers, Deno, Bun and workers
// all provide. Not part of the emitted types; core's tests compile with Node's types instead
// (tsconfig.test.json), which declare the same globals in full. Adding a global here is a decision:
// it must exist on every runtime above.

/** WebCrypto, for the audit chain's HMAC, its key and new row ids. */
interface CryptoKey {
  readonly type: string;
}
interface SubtleCrypto {
  importKey(
    format: "raw",
    keyData: Uint8Array,
    algorithm: { name: "HMAC"; hash: "SHA-256" },
    extractable: boolean,
    keyUsages: readonly "sign"[],
  ): Promise<CryptoKey>;
  sign(algorithm: "HMAC", key: CryptoKey, data: Uint8Array): Promise<ArrayBuffer>;
}
interface Crypto {
  readonly subtle: SubtleCrypto;
  getRandomValues<T extends Uint8Array>(array: T): T;
  randomUUID(): `${string}-${string}-${string}-${string}-${string}`;
}
declare var crypto: Crypto;

/** UTF-8 encoding (audit hash input, serialised sizes in the conformance suite). */
declare class TextEncoder {
  encode(input?: string): Uint8Array;
}

/** Monotonic clock for the policy engine's time budget. */
declare var performance: { now(): number };

/** Deep copies in the in-memory store, so callers never share its rows. */
declare function structuredClone<T>(value: T): T;

/** Passed through the tool backend port; core only names the type. */
interface AbortSignal {
  readonly aborted: boolean;
  readonly reason: unknown;
}
