import { describe, expect, it } from "vitest";
import type { AuditInput } from "../audit-service";
import { RefusalAudit } from "./refusal-audit";

describe("RefusalAudit", () => {
  it("records up to the bound per actor and window, then one summary with the count", async () => {
    const written: AuditInput[] = [];
    let now = 1_000;
    const audit = new RefusalAudit(async (input) => written.push(input), {
      perWindow: 3,
      windowMs: 100,
      now: () => now,
    });
    for (let i = 0; i < 10; i++) await audit.refused("alice", { i });
    await audit.refused("bob", { i: 0 });
    expect(written.filter((entry) => entry.actor === "alice")).toHaveLength(3);
    expect(written.filter((entry) => entry.actor === "bob")).toHaveLength(1);
    now += 100;
    await audit.refused("alice", { i: 10 });
    const summary = written.find((entry) => entry.kind === "access.refused.suppressed");
    expect(summary).toMatchObject({ actor: "alice", data: { count: 7, windowMs: 100 } });
    expect(written.at(-1)).toMatchObject({ kind: "access.refused", data: { i: 10 } });
  });
});
