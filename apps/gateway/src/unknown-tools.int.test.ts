import type { ConfigInput } from "@switchboard/core";
import { describe, expect, it } from "vitest";
import { perTestGateway } from "./testing/per-test-gateway";
import { a2aConfig, type TestGateway } from "./testing/test-gateway";
import type { TestPeer } from "./testing/test-peer";

const MAIN = "agent:main:main";

type Result = Record<string, unknown> & { status: string };

const edge = perTestGateway();
let gw: TestGateway | undefined;

function tool(op: TestPeer, as: string, name: string, args: Record<string, unknown>): Promise<Result> {
  return op.call<Result>("tools.invoke", { tool: name, args, as });
}

describe("a tool name the gateway does not run", () => {
  it("meets the policy as simulate says: a rule denying it refuses and audits the real call", async () => {
    const config: ConfigInput = a2aConfig({
      policy: {
        rules: [
          {
            id: "no-shell",
            hook: "PRE_TOOL_CALL",
            when: { "tool.name": "shell_exec" },
            action: "deny",
            message: "no shell",
          },
        ],
      },
    } as Partial<ConfigInput>);
    gw = await edge.start(config, { store: "file" });
    const op = await gw.operator();
    await op.call("sessions.create", { key: MAIN });

    const simulated = await op.call<Result>("policy.simulate", { as: MAIN, tool: "shell_exec", args: {} });
    expect(simulated).toMatchObject({ decision: "BLOCK", ruleId: "no-shell" });

    // labels-and-policy.md: simulate "runs the exact same evaluation as a real call".
    const real = await tool(op, MAIN, "shell_exec", {});
    expect(real.status).toBe("forbidden");

    // "Every policy decision that blocks ... is appended to an audit log".
    const audit = await op.call<{ entries: Array<{ kind: string; data?: Record<string, unknown> }> }>(
      "audit.tail",
      { limit: 50 },
    );
    expect(audit.entries.some((entry) => entry.kind === "policy.blocked")).toBe(true);
  });
});
