import { describe, expect, it } from "vitest";
import { GatewayMetrics } from "./metrics";
import { sample } from "./telemetry-test-gateway";

describe("GatewayMetrics", () => {
  it("bounds the tool label: names past the first 200 are counted as other", async () => {
    const metrics = new GatewayMetrics();
    for (let index = 0; index < 250; index++) metrics.toolCall(`worker_tool_${index}`, "allow");
    metrics.toolCall("worker_tool_3", "block");
    const text = await metrics.scrape();
    const series = text.split("\n").filter((line) => line.startsWith("switchboard_tool_calls_total{"));
    expect(series).toHaveLength(202);
    expect(sample(text, "switchboard_tool_calls_total", { tool: "other", decision: "allow" })).toBe(50);
    expect(sample(text, "switchboard_tool_calls_total", { tool: "worker_tool_3", decision: "block" })).toBe(
      1,
    );
  });
});
