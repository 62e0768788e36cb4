import { z } from "zod";
import { plainRecord } from "../plain-record";

/** The `prevHash` of the first record of a chain. */
export const GENESIS_HASH = "0".repeat(64);

export const AuditHashSchema = z
  .string()
  .regex(/^[0-9a-f]{64}$/, { error: "must be 64 lower-case hex characters (a SHA-256 HMAC)" });

/**
 * What a caller appends. `kind` names the event, e.g. `policy.blocked`, `policy.redacted`, `delivery`,
 * `spawn`, `taint`, `impersonation`, `announce`; `data` holds its plain-JSON details.
 */
export const AuditEntrySchema = z.strictObject({
  kind: z.string({ error: "must be a non-empty string" }).min(1, { error: "must be a non-empty string" }),
  at: z
    .number({ error: "must be a time in milliseconds since the epoch" })
    .int({ error: "must be a time in milliseconds since the epoch" })
    .nonnegative({ error: "must be a time in milliseconds since the epoch" }),
  actor: z.string({ error: "must be a string" }).optional(),
  sessionKey: z.string({ error: "must be a string" }).optional(),
  data: plainRecord(z.unknown(), { error: "must be an object" }),
});
export type AuditEntry = z.infer<typeof AuditEntrySchema>;

/** A stored link of the chain: the entry plus its position and the two hashes that bind it. */
export const AuditRecordSchema = AuditEntrySchema.extend({
  index: z.number().int().nonnegative({ error: "must be an integer >= 0" }),
  prevHash: AuditHashSchema,
  hash: AuditHashSchema,
});
export type AuditRecord = z.infer<typeof AuditRecordSchema>;

/** Where a chain currently ends: the index and hash of its last record. */
export interface AuditHead {
  index: number;
  hash: string;
}
