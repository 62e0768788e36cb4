import { Counter, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { SeriesCounter, SeriesHistogram } from "./series";

const BUCKETS = [0.001, 0.01, 0.1, 1];
const OBSERVED: Array<[Record<string, string>, number]> = [
  [{ method: "chat.send" }, 0.0004],
  [{ method: "chat.send" }, 0.001],
  [{ method: "chat.send" }, 0.05],
  [{ method: 'we"ird\\name\n' }, 3],
  [{ method: "tools.invoke" }, 0.5],
  [{ method: "chat.send" }, 7],
];

describe("series metrics", () => {
  it("expose exactly what prom-client's own counter and histogram expose for the same updates", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const counter = new SeriesCounter({
      name: "t_total",
      help: "h",
      labelNames: ["method"],
      registers: [ours],
    });
    const histogram = new SeriesHistogram({
      name: "t_seconds",
      help: "h",
      labelNames: ["method"],
      buckets: BUCKETS,
      registers: [ours],
    });
    const referenceCounter = new Counter({
      name: "t_total",
      help: "h",
      labelNames: ["method"],
      registers: [theirs],
    });
    const referenceHistogram = new Histogram({
      name: "t_seconds",
      help: "h",
      labelNames: ["method"],
      buckets: BUCKETS,
      registers: [theirs],
    });
    for (const [labels, value] of OBSERVED) {
      counter.inc(labels);
      referenceCounter.inc(labels);
      histogram.observe(labels, value);
      referenceHistogram.observe(labels, value);
    }
    counter.inc({ method: "chat.send" }, 5);
    referenceCounter.inc({ method: "chat.send" }, 5);

    const text = await ours.metrics();
    expect(text).toBe(await theirs.metrics());
    expect(text).toContain('t_seconds_bucket{le="0.001",method="chat.send"} 2');
    expect(text).toContain('t_seconds_bucket{le="+Inf",method="chat.send"} 4');
    expect(text).toContain('t_total{method="chat.send"} 9');
  });

  it("start again from nothing on reset", async () => {
    const registry = new Registry();
    const counter = new SeriesCounter({
      name: "r_total",
      help: "h",
      labelNames: ["op"],
      registers: [registry],
    });
    counter.inc({ op: "a" });
    registry.resetMetrics();
    expect(await registry.metrics()).not.toContain('r_total{op="a"}');
  });
});
