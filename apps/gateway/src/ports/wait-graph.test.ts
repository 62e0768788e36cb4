import { describe, expect, it } from "vitest";
import { chainPositionOf, InProcessWaitGraph } from "./wait-graph";

describe("InProcessWaitGraph", () => {
  it("finds the cycle a new wait would close, and forgets a wait once released", () => {
    const graph = new InProcessWaitGraph();
    expect(graph.cycleFor("a", "a")).toEqual(["a", "a"]);
    const ab = graph.wait("a", "b");
    const bc = graph.wait("b", "c");
    expect(graph.cycleFor("c", "a")).toEqual(["c", "a", "b", "c"]);
    expect(graph.cycleFor("a", "c")).toBeUndefined();
    bc();
    expect(graph.cycleFor("c", "a")).toBeUndefined();
    // Two waits on the same pair: the edge stays until both end.
    const ab2 = graph.wait("a", "b");
    ab();
    expect(graph.cycleFor("b", "a")).toEqual(["b", "a", "b"]);
    ab2();
    expect(graph.cycleFor("b", "a")).toBeUndefined();
  });
});

describe("chainPositionOf", () => {
  it("continues an agent chain one hop further, else starts a new chain at hop 1", () => {
    const base = {
      runId: "r",
      sessionKey: "k",
      sessionId: "s",
      agentId: "main",
      lane: "main" as const,
      status: "running" as const,
      createdAt: 0,
      origin: "chat" as const,
      message: "m",
      attempts: 1,
    };
    expect(
      chainPositionOf({
        ...base,
        provenance: { kind: "agent", chainId: "c1", hop: 2, fromSessionKey: "x", fromRunId: "r0" },
      }),
    ).toEqual({ chainId: "c1", hop: 3 });
    expect(chainPositionOf({ ...base, flow: { chainId: "c2", hop: 4 } })).toEqual({ chainId: "c2", hop: 5 });
    const fresh = chainPositionOf(undefined);
    expect(fresh.hop).toBe(1);
    expect(fresh.chainId).not.toBe(chainPositionOf(undefined).chainId);
  });
});
