import { describe, expect, it } from "vitest";
import { repeatedRequestId } from "./mcp-duplicate-ids";

const request = (id: unknown, method = "tools/list") => ({ jsonrpc: "2.0", id, method });

describe("repeatedRequestId", () => {
  it("finds no repeat in a single message or a batch of distinct ids", () => {
    expect(repeatedRequestId(request(1))).toBeUndefined();
    expect(
      repeatedRequestId([request(1), request("1"), { jsonrpc: "2.0", method: "notifications/initialized" }]),
    ).toBeUndefined();
  });

  it("names the first id two requests of a batch share", () => {
    expect(repeatedRequestId([request(1), request("a"), request("a"), request(1)])).toBe("a");
  });

  it("ignores responses the client sends and notifications, which are no requests", () => {
    expect(
      repeatedRequestId([
        { jsonrpc: "2.0", id: 7, result: {} },
        request(7),
        { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 7 } },
      ]),
    ).toBeUndefined();
  });
});
