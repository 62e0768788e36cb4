/**
 * The gateway's own secrets. Today they are files in the data dir, which only works while every
 * instance shares that dir; several instances need them from one place (a secret store, the env).
 */
export interface Secrets {
  /** The operator role's token (every operator connection and the CLI authenticate with it). */
  operatorToken(): Promise<string>;
  /**
   * The key of the audit chain's HMAC; every instance appending to one chain needs the same key.
   * `chained`: the audit log already holds records, so a key must exist; a missing one is refused,
   * not made anew (every record after would be chained with a key the earlier ones do not verify with).
   */
  auditKey(options?: { chained?: boolean }): Promise<Uint8Array>;
}
