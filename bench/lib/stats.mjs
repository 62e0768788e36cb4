// Small statistics and formatting helpers shared by the benchmarks.

export function quantile(values, q) {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  const position = (sorted.length - 1) * q;
  const low = Math.floor(position);
  const high = Math.ceil(position);
  return sorted[low] + (sorted[high] - sorted[low]) * (position - low);
}

export const median = (values) => quantile(values, 0.5);
export const max = (values) => values.reduce((a, b) => Math.max(a, b), Number.NEGATIVE_INFINITY);

/** Milliseconds since an arbitrary origin, sub-millisecond resolution. */
export const now = () => performance.now();

/** Times `fn` `count` times (after `warmup` untimed calls); returns each duration in ms. */
export async function timeEach(fn, { count, warmup = 0 }) {
  for (let i = 0; i < warmup; i++) await fn(i);
  const samples = [];
  for (let i = 0; i < count; i++) {
    const start = now();
    await fn(i);
    samples.push(now() - start);
  }
  return samples;
}

/** Median, p99 and max of a latency sample (ms), rounded for the report. */
export function summarise(samples) {
  return {
    n: samples.length,
    median: round(median(samples)),
    p99: round(quantile(samples, 0.99)),
    max: round(max(samples)),
  };
}

export function round(value, digits = 3) {
  if (!Number.isFinite(value)) return value;
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

export function formatMs(ms) {
  if (!Number.isFinite(ms)) return String(ms);
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 100) return `${ms.toFixed(2)} ms`;
  if (ms < 10_000) return `${ms.toFixed(0)} ms`;
  return `${(ms / 1000).toFixed(1)} s`;
}

export function formatBytes(bytes) {
  if (bytes >= 1024 ** 3) return `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
  if (bytes >= 1024 ** 2) return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
  if (bytes >= 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${Math.round(bytes)} B`;
}

export function formatCount(value) {
  if (value >= 10_000) return `${Math.round(value).toLocaleString("en-US")}`;
  return value.toFixed(value >= 100 ? 0 : 1);
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
