import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import { defaultWebSocket } from "./client";

describe("the default WebSocket implementation", () => {
  it("is the ws package in Node, even where the platform has a global WebSocket", () => {
    class PlatformSocket {}
    expect(defaultWebSocket(WebSocket, PlatformSocket)).toBe(WebSocket);
  });

  it("is the platform's WebSocket in a browser bundle, where ws is its throwing stub", () => {
    // What bundlers substitute for `ws` in a browser build (ws/browser.js).
    const stub = () => {
      throw new Error("ws does not work in the browser");
    };
    class PlatformSocket {}
    expect(defaultWebSocket(stub, PlatformSocket)).toBe(PlatformSocket);
  });

  it("stays ws's stub when there is no platform WebSocket, so the error says why", () => {
    const stub = () => undefined;
    expect(defaultWebSocket(stub, undefined)).toBe(stub);
  });
});
