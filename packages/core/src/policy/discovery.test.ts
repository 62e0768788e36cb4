import { describe, expect, it } from "vitest";
import { createPolicyEngine } from "./engine";
import { discoveryCeiling } from "./flow";
import { MAIN, sessionFacts } from "./test-fixtures";

// A session whose clearance an operator lowered below its taint (`sessions.patch` with `force`)
// keeps what it holds but takes in nothing more above the clearance: `sessions_history` refuses
// the read-up, and a `sessions_list` row (with its previews) is the same read of that session.

const ALICE = "agent:main:webchat:dm:alice";
const forcedDown = sessionFacts(MAIN, { taint: "CONFIDENTIAL", clearance: "PUBLIC" });

describe("sessions_list discovery of a caller whose clearance is below its taint", () => {
  it("is bounded by the lower of the caller's taint and clearance", () => {
    expect(discoveryCeiling(forcedDown)).toBe("PUBLIC");
    expect(discoveryCeiling({ taint: "INTERNAL", clearance: "RESTRICTED" })).toBe("INTERNAL");
  });

  it("hides a row above the clearance, in the engine and in the compiled filter alike", () => {
    const engine = createPolicyEngine();
    const row = (taint: "CONFIDENTIAL" | "PUBLIC") => sessionFacts(ALICE, { taint });
    const listed = (taint: "CONFIDENTIAL" | "PUBLIC") =>
      engine.evaluate({
        hook: "PRE_HISTORY",
        caller: forcedDown,
        target: row(taint),
        facts: { origin: "tool", discovery: true },
      });
    expect(listed("CONFIDENTIAL")).toMatchObject({
      action: "BLOCK",
      ruleId: "flow.no-read-up",
      message: `hidden: ${ALICE} (taint CONFIDENTIAL) is above the clearance PUBLIC of ${MAIN}`,
    });
    expect(listed("PUBLIC").action).toBe("ALLOW");

    const filter = engine.discovery(forcedDown);
    expect(filter.decide(row("CONFIDENTIAL"))).toBe(false);
    expect(filter.decide(row("PUBLIC"))).toBe(true);
    // What a networked store applies in its query.
    expect(filter.visibility.maxTaint).toBe("PUBLIC");
  });
});
