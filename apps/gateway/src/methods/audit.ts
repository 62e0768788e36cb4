import type { MethodDeps } from "./deps";
import type { Handlers } from "./handler";

/** The operator's read of the tamper-evident audit log. */
export function auditMethods({ audit }: Pick<MethodDeps, "audit">): Handlers<"audit.tail" | "audit.verify"> {
  return {
    "audit.tail": async (params) => ({ entries: await audit.tail(params.limit ?? 50, params.after) }),
    "audit.verify": async () => ({ ...(await audit.verify()) }),
  };
}
