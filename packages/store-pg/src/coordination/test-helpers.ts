import { afterEach } from "vitest";
import { dropSchema, TEST_PG_URL, testSchemaName } from "../../test/pg-harness";
import { type Coordination, type CoordinationOptions, openCoordination } from "./context";
import { type ClusterMembership, openMembership } from "./membership";

/**
 * Test helper: "instances" are coordination objects with pools of their own on one schema (as
 * several gateway processes would be), closed and the schema dropped after each test.
 */
export function useClusterSchema(): {
  open(options?: Partial<CoordinationOptions>): Promise<Coordination>;
  /** An instance named `instanceId` with a live lease (renewed once; `start()` keeps it alive). */
  member(
    instanceId: string,
    leaseMs?: number,
  ): Promise<{ coordination: Coordination; membership: ClusterMembership }>;
  readonly schema: string;
  cleanup(task: () => Promise<unknown> | unknown): void;
} {
  let schema: string | undefined;
  let opened: Coordination[] = [];
  let cleanups: (() => Promise<unknown> | unknown)[] = [];
  afterEach(async () => {
    for (const task of cleanups.reverse()) await task();
    for (const coordination of opened) await coordination.close();
    if (schema) await dropSchema(schema);
    schema = undefined;
    opened = [];
    cleanups = [];
  });
  return {
    async open(options = {}) {
      schema ??= testSchemaName("sbclu");
      const coordination = await openCoordination({ url: TEST_PG_URL, schema, ...options });
      opened.push(coordination);
      return coordination;
    },
    async member(instanceId, leaseMs = 5000) {
      const coordination = await this.open({ instanceId });
      const membership = openMembership(coordination, { leaseMs, renewMs: Math.floor(leaseMs / 4) });
      cleanups.push(() => membership.stop());
      await membership.renew();
      return { coordination, membership };
    },
    get schema() {
      if (!schema) throw new Error("no instance opened yet");
      return schema;
    },
    cleanup(task) {
      cleanups.push(task);
    },
  };
}

/** Polls `check` until it returns true (or throws after `timeoutMs`). */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 5000,
  what = "condition",
): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
