import { describe, expect, it } from "vitest";
import { cancelledRequestIds, type McpCancellationRelay, McpCancellations } from "./mcp-cancellations";

/**
 * Instances joined by an in-memory cluster standing in for `ClusterCancellations`: the calls of
 * every instance by key, and the targeted NOTIFY as a direct call of the holder's handler.
 */
function memoryCluster() {
  const calls = new Map<string, number[]>();
  const handlers: Array<(key: string) => void> = [];
  const told: Array<{ to: number; key: string }> = [];
  const relay = (index: number): McpCancellationRelay => ({
    track(key) {
      calls.set(key, [...(calls.get(key) ?? []), index]);
      return () => {
        const holders = calls.get(key)!;
        holders.splice(holders.indexOf(index), 1);
      };
    },
    async cancel(key) {
      const holders = calls.get(key) ?? [];
      if (holders.length === 0) return "none";
      if (holders.length > 1) return "ambiguous";
      if (holders[0] === index) return "here";
      told.push({ to: holders[0]!, key });
      handlers[holders[0]!]?.(key);
      return "sent";
    },
    listen: async (handler) => {
      handlers[index] = handler;
    },
  });
  return { relay, told };
}

describe("McpCancellations", () => {
  it("cancels the one call of a token with the id, and only it", async () => {
    const calls = new McpCancellations();
    const one = calls.track("desktop", 3);
    const other = calls.track("desktop", 4);
    const otherToken = calls.track("laptop", 3);
    expect(await calls.cancel("desktop", 3)).toBe(true);
    expect(one.signal.aborted).toBe(true);
    expect(other.signal.aborted).toBe(false);
    expect(otherToken.signal.aborted).toBe(false);
    expect(await calls.cancel("desktop", "3")).toBe(false);
    for (const call of [one, other, otherToken]) call.done();
    expect(calls.size).toBe(0);
    expect(await calls.cancel("desktop", 4)).toBe(false);
  });

  it("cancels none when two clients of a token use the same id", async () => {
    const calls = new McpCancellations();
    const first = calls.track("shared", 1);
    const second = calls.track("shared", 1);
    expect(await calls.cancel("shared", 1)).toBe(false);
    expect(first.signal.aborted || second.signal.aborted).toBe(false);
    second.done();
    expect(await calls.cancel("shared", 1)).toBe(true);
    expect(first.signal.aborted).toBe(true);
  });

  it("aborts the call before cancel returns without a cluster (one instance)", () => {
    const calls = new McpCancellations();
    const call = calls.track("laptop", 1);
    void calls.cancel("laptop", 1);
    expect(call.signal.aborted).toBe(true);
  });

  it("applies the one-call rule to the whole cluster, wherever the cancellation lands", async () => {
    const cluster = memoryCluster();
    const [a, b, c] = [0, 1, 2].map((index) => new McpCancellations(cluster.relay(index)));
    await Promise.resolve();
    // One call, on A: cancelled through B (A is told) and through A itself.
    const one = a!.track("laptop", 5);
    expect(await b!.cancel("laptop", 5)).toBe(false);
    expect(one.signal.aborted).toBe(true);
    expect(cluster.told).toEqual([{ to: 0, key: "laptop\u0000number\u00005" }]);
    one.done();
    const again = a!.track("laptop", 6);
    expect(await a!.cancel("laptop", 6)).toBe(true);
    expect(again.signal.aborted).toBe(true);
    again.done();
    // Two clients of a token with the same id on A and B: C cancels neither, nor does A or B.
    const x = a!.track("shared", 7);
    const y = b!.track("shared", 7);
    for (const instance of [a, b, c]) expect(await instance!.cancel("shared", 7)).toBe(false);
    expect(x.signal.aborted || y.signal.aborted).toBe(false);
    expect(cluster.told).toHaveLength(1);
    // Once Y's call ended, X's is the only one.
    y.done();
    expect(await c!.cancel("shared", 7)).toBe(false);
    expect(x.signal.aborted).toBe(true);
    x.done();
    expect(a!.size + b!.size + c!.size).toBe(0);
  });

  it("counts a relay that fails as no cancellation, and reports it", async () => {
    const errors: unknown[] = [];
    const calls = new McpCancellations(
      {
        track: () => () => undefined,
        cancel: () => Promise.reject(new Error("down")),
        listen: async () => undefined,
      },
      (error) => errors.push(error),
    );
    const call = calls.track("laptop", 1);
    expect(await calls.cancel("laptop", 1)).toBe(false);
    expect(call.signal.aborted).toBe(false);
    expect(errors).toHaveLength(1);
  });

  it("reads the cancelled ids of a body, single or batched", () => {
    const cancel = (requestId: unknown) => ({
      jsonrpc: "2.0",
      method: "notifications/cancelled",
      params: { requestId, reason: "user" },
    });
    expect(cancelledRequestIds(cancel(7))).toEqual([7]);
    expect(
      cancelledRequestIds([cancel("a"), { jsonrpc: "2.0", id: 1, method: "tools/list" }, cancel({}), null]),
    ).toEqual(["a"]);
    expect(cancelledRequestIds({ jsonrpc: "2.0", id: 1, method: "tools/call" })).toEqual([]);
  });
});
