import { describe, expect, it } from "vitest";
import { cancelledRequestIds, McpCancellations } from "./mcp-cancellations";

describe("McpCancellations", () => {
  it("cancels the one call of a token with the id, and only it", () => {
    const calls = new McpCancellations();
    const one = calls.track("desktop", 3);
    const other = calls.track("desktop", 4);
    const otherToken = calls.track("laptop", 3);
    expect(calls.cancel("desktop", 3)).toBe(true);
    expect(one.signal.aborted).toBe(true);
    expect(other.signal.aborted).toBe(false);
    expect(otherToken.signal.aborted).toBe(false);
    expect(calls.cancel("desktop", "3")).toBe(false);
    for (const call of [one, other, otherToken]) call.done();
    expect(calls.size).toBe(0);
    expect(calls.cancel("desktop", 4)).toBe(false);
  });

  it("cancels none when two clients of a token use the same id", () => {
    const calls = new McpCancellations();
    const first = calls.track("shared", 1);
    const second = calls.track("shared", 1);
    expect(calls.cancel("shared", 1)).toBe(false);
    expect(first.signal.aborted || second.signal.aborted).toBe(false);
    second.done();
    expect(calls.cancel("shared", 1)).toBe(true);
    expect(first.signal.aborted).toBe(true);
  });

  it("passes on a cancellation it holds no call for, and applies the others' to its own calls", async () => {
    // Two instances joined by an in-memory relay standing in for the cluster's NOTIFY.
    const handlers: Array<(key: string) => void> = [];
    const sent: string[] = [];
    const relay = (index: number) => ({
      broadcast: async (key: string) => {
        sent.push(key);
        handlers.forEach((handler, at) => {
          if (at !== index) handler(key);
        });
      },
      listen: async (handler: (key: string) => void) => {
        handlers[index] = handler;
      },
    });
    const a = new McpCancellations(relay(0));
    const b = new McpCancellations(relay(1));
    await Promise.resolve();
    const call = a.track("laptop", 5);
    expect(b.cancel("laptop", 5)).toBe(false);
    await Promise.resolve();
    expect(call.signal.aborted).toBe(true);
    // Held here, even ambiguously: not passed on (the one-call rule decides here).
    a.track("shared", 1);
    b.track("shared", 1);
    b.track("shared", 1);
    expect(b.cancel("shared", 1)).toBe(false);
    expect(sent).toHaveLength(1);
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
