import type { Registry } from "prom-client";

/**
 * Counters and histograms for the hot path. prom-client's own hash and validate the labels on every
 * update (a few hundred ns each, several per send); these keep one record per label combination,
 * found through one map per label, and hand prom-client's registry the samples only when scraped. Exposition
 * (text format, escaping) stays the library's.
 */
type Labels = Readonly<Record<string, string>>;

interface MetricOptions {
  name: string;
  help: string;
  labelNames: readonly string[];
  registers: Registry[];
}

abstract class SeriesMetric<S extends { labels: Labels }> {
  /** Series by label value, one map level per label name (no key strings built per update). */
  private root = new Map<string, unknown>();
  protected series: S[] = [];
  readonly name: string;
  readonly help: string;
  abstract readonly type: "counter" | "histogram";
  readonly aggregator = "sum";

  constructor(protected readonly options: MetricOptions) {
    this.name = options.name;
    this.help = options.help;
    // The registry takes any object with name, help, type and get() (and reset()).
    for (const registry of options.registers) registry.registerMetric(this as never);
  }

  protected find(labels: Labels): S {
    const names = this.options.labelNames;
    let level = this.root;
    const last = names.length - 1;
    for (let index = 0; index < last; index++) {
      const value = labels[names[index]!] ?? "";
      let next = level.get(value) as Map<string, unknown> | undefined;
      if (next === undefined) {
        next = new Map();
        level.set(value, next);
      }
      level = next;
    }
    const value = last >= 0 ? (labels[names[last]!] ?? "") : "";
    let found = level.get(value) as S | undefined;
    if (found === undefined) {
      found = this.create(labels);
      level.set(value, found);
      this.series.push(found);
    }
    return found;
  }

  protected abstract create(labels: Labels): S;

  reset(): void {
    this.root = new Map();
    this.series = [];
  }
}

export class SeriesCounter extends SeriesMetric<{ labels: Labels; value: number }> {
  readonly type = "counter";

  inc(labels: Labels, by = 1): void {
    this.find(labels).value += by;
  }

  protected create(labels: Labels) {
    return { labels: { ...labels }, value: 0 };
  }

  async get() {
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values: this.series.map(({ labels, value }) => ({ labels, value })),
    };
  }
}

interface HistogramSeries {
  labels: Labels;
  /** Observations per bucket (not cumulative; summed up when scraped). */
  counts: number[];
  sum: number;
  count: number;
}

export class SeriesHistogram extends SeriesMetric<HistogramSeries> {
  readonly type = "histogram";
  private readonly buckets: readonly number[];

  constructor(options: MetricOptions & { buckets: readonly number[] }) {
    super(options);
    this.buckets = [...options.buckets].sort((a, b) => a - b);
  }

  observe(labels: Labels, value: number): void {
    const series = this.find(labels);
    series.sum += value;
    series.count += 1;
    const buckets = this.buckets;
    for (let index = 0; index < buckets.length; index++) {
      if (value <= buckets[index]!) {
        series.counts[index]! += 1;
        return;
      }
    }
  }

  protected create(labels: Labels): HistogramSeries {
    return { labels: { ...labels }, counts: this.buckets.map(() => 0), sum: 0, count: 0 };
  }

  async get() {
    const values: Array<{ metricName: string; labels: Record<string, string | number>; value: number }> = [];
    for (const series of this.series) {
      let cumulative = 0;
      this.buckets.forEach((bound, index) => {
        cumulative += series.counts[index]!;
        values.push({
          metricName: `${this.name}_bucket`,
          labels: { le: bound, ...series.labels },
          value: cumulative,
        });
      });
      values.push({
        metricName: `${this.name}_bucket`,
        labels: { le: "+Inf", ...series.labels },
        value: series.count,
      });
      values.push({ metricName: `${this.name}_sum`, labels: series.labels, value: series.sum });
      values.push({ metricName: `${this.name}_count`, labels: series.labels, value: series.count });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}
