import { randomBytes } from "node:crypto";
import { SwitchboardError } from "@switchboard/core";
import { clusterValue } from "./cluster-meta";
import type { Coordination } from "./context";

/**
 * Backs the gateway's `Secrets` port for a cluster: the operator token and the audit key are
 * created once per schema (by whichever instance starts first) and read by every instance, so a
 * token or an audit chain works the same on all of them. Same interface as `DataDirSecrets`;
 * nothing changes for callers. Values are cached after the first read (they never change).
 *
 * They are stored in the `cluster_meta` table in plain text, like the data dir's files: whoever
 * can read the schema can read them (grant the database role accordingly).
 */
export interface ClusterSecrets {
  operatorToken(): Promise<string>;
  auditKey(): Promise<Uint8Array>;
}

const AUDIT_KEY_BYTES = 32;

export function openClusterSecrets(coordination: Coordination): ClusterSecrets {
  let token: Promise<string> | undefined;
  let key: Promise<Uint8Array> | undefined;
  // A failed read is not cached: the next call tries again.
  const once = <T>(make: () => Promise<T>, set: (value: Promise<T> | undefined) => void): Promise<T> => {
    const promise = make();
    set(promise);
    promise.catch(() => set(undefined));
    return promise;
  };
  return {
    operatorToken() {
      return (
        token ??
        once(
          () =>
            clusterValue(
              coordination,
              "secrets.operatorToken",
              () => `sb_op_${randomBytes(24).toString("base64url")}`,
            ),
          (value) => {
            token = value;
          },
        )
      );
    },
    auditKey() {
      return (
        key ??
        once(
          async () => {
            const text = await clusterValue(coordination, "secrets.auditKey", () =>
              randomBytes(AUDIT_KEY_BYTES).toString("base64"),
            );
            const bytes = new Uint8Array(Buffer.from(text, "base64"));
            if (bytes.byteLength < 16) {
              throw new SwitchboardError(
                "INTERNAL",
                `cluster audit key in schema ${coordination.schema} is ${bytes.byteLength} bytes; at least 16 are needed (cluster_meta row secrets.auditKey was altered)`,
              );
            }
            return bytes;
          },
          (value) => {
            key = value;
          },
        )
      );
    },
  };
}
