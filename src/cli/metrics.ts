// Prometheus metrics in text exposition format 0.0.4: counters, gauges and fixed-bucket histograms with
// labels. Our own because importing prom-client alone costs ~9 MiB RSS, a fifth of the agent's budget.
import { markdownTable } from "./markdown.ts";
import { BUILD } from "./version.ts";

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type Labels<L extends string> = Readonly<Record<L, string | number>>;

export interface CounterSeries {
  inc(by?: number): void;
  get(): number;
}
export interface GaugeSeries {
  set(value: number): void;
  inc(by?: number): void;
  get(): number;
}
export interface HistogramSeries {
  observe(value: number): void;
}

/** A metric is its own series when it has no labels; `with(labels)` picks a labelled series. */
export interface Counter<L extends string = never> extends CounterSeries {
  with(labels: Labels<L>): CounterSeries;
}
export interface Gauge<L extends string = never> extends GaugeSeries {
  with(labels: Labels<L>): GaugeSeries;
  /** Drops a labelled series, so that what is gone (a pool) stops being exposed. */
  remove(labels: Labels<L>): void;
}
export interface Histogram<L extends string = never> extends HistogramSeries {
  with(labels: Labels<L>): HistogramSeries;
}

export interface MetricOptions<L extends string> {
  name: string;
  help: string;
  labels?: readonly L[];
}
/** `collect` computes an unlabelled value at scrape time (memory, CPU) instead of it being pushed. */
export interface CollectedOptions {
  name: string;
  help: string;
  collect: () => number;
}

type MetricType = "counter" | "gauge" | "histogram";

export interface MetricDescription {
  name: string;
  type: MetricType;
  help: string;
  labels: readonly string[];
}

/** A series knows how to print itself, given the metric name and its rendered label set. */
interface Series {
  lines(name: string, labels: string): string[];
}

interface Family {
  name: string;
  help: string;
  type: MetricType;
  labelNames: readonly string[];
  /** By joined label values, in creation order. */
  series: Map<string, { labels: string; series: Series }>;
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

export class Registry {
  readonly #families = new Map<string, Family>();

  counter<L extends string = never>(options: MetricOptions<L> | CollectedOptions): Counter<L> {
    const collect = "collect" in options ? options.collect : undefined;
    const metric = this.#register(options, "counter", (): CounterSeries & Series => {
      let value = 0;
      const get = () => collect?.() ?? value;
      return {
        inc(by = 1) {
          if (!(by >= 0)) throw new Error(`counter ${options.name}: increment must be >= 0, got ${by}`);
          value += by;
        },
        get,
        lines: (name, labels) => [`${name}${labels} ${formatNumber(get())}`],
      };
    });
    return { inc: (by) => metric.own().inc(by), get: () => metric.own().get(), with: metric.with };
  }

  gauge<L extends string = never>(options: MetricOptions<L> | CollectedOptions): Gauge<L> {
    const collect = "collect" in options ? options.collect : undefined;
    const metric = this.#register(options, "gauge", (): GaugeSeries & Series => {
      let value = 0;
      const get = () => collect?.() ?? value;
      return {
        set(next) {
          value = next;
        },
        inc(by = 1) {
          value += by;
        },
        get,
        lines: (name, labels) => [`${name}${labels} ${formatNumber(get())}`],
      };
    });
    return {
      set: (value) => metric.own().set(value),
      inc: (by) => metric.own().inc(by),
      get: () => metric.own().get(),
      with: metric.with,
      remove: metric.remove,
    };
  }

  /** `buckets`: upper bounds, finite and strictly increasing; +Inf is implied. */
  histogram<L extends string = never>(
    options: MetricOptions<L> & { buckets: readonly number[] },
  ): Histogram<L> {
    const { buckets } = options;
    const increasing = buckets.every(
      (bound, i) => Number.isFinite(bound) && (i === 0 || bound > (buckets[i - 1] as number)),
    );
    if (!increasing)
      throw new Error(`histogram ${options.name}: buckets must be finite and strictly increasing`);
    if (options.labels?.some((label) => label === "le"))
      throw new Error(`histogram ${options.name}: label "le" is reserved`);
    const metric = this.#register(options, "histogram", (): HistogramSeries & Series => {
      const counts = new Array<number>(buckets.length).fill(0);
      let sum = 0;
      let count = 0;
      return {
        observe(value) {
          const bucket = buckets.findIndex((bound) => value <= bound);
          if (bucket >= 0) counts[bucket] = (counts[bucket] as number) + 1;
          sum += value;
          count++;
        },
        lines(name, labels) {
          const withLe = (bound: string) =>
            labels ? `${labels.slice(0, -1)},le="${bound}"}` : `{le="${bound}"}`;
          let cumulative = 0;
          const lines = buckets.map((bound, i) => {
            cumulative += counts[i] as number;
            return `${name}_bucket${withLe(formatNumber(bound))} ${cumulative}`;
          });
          lines.push(`${name}_bucket${withLe("+Inf")} ${count}`);
          lines.push(`${name}_sum${labels} ${formatNumber(sum)}`, `${name}_count${labels} ${count}`);
          return lines;
        },
      };
    });
    return { observe: (value) => metric.own().observe(value), with: metric.with };
  }

  /** Every metric, in registration order, as the /metrics body. */
  expose(): string {
    let text = "";
    for (const family of this.#families.values()) {
      text += `# HELP ${family.name} ${escapeHelp(family.help)}\n# TYPE ${family.name} ${family.type}\n`;
      for (const { labels, series } of family.series.values()) {
        for (const line of series.lines(family.name, labels)) text += `${line}\n`;
      }
    }
    return text;
  }

  /** Every metric's name, type, help and label names, in registration order. */
  describe(): MetricDescription[] {
    return [...this.#families.values()].map(({ name, type, help, labelNames }) => ({
      name,
      type,
      help,
      labels: labelNames,
    }));
  }

  /** Registers a family; `with` finds or creates a labelled series, `own` is the unlabelled one. */
  #register<S extends Series, L extends string>(
    options: MetricOptions<L> | CollectedOptions,
    type: MetricType,
    create: () => S,
  ): { with(labels: Labels<L>): S; own(): S; remove(labels: Labels<L>): void } {
    const { name } = options;
    const labelNames: readonly string[] = ("labels" in options && options.labels) || [];
    if (!METRIC_NAME.test(name)) throw new Error(`invalid metric name "${name}"`);
    if (this.#families.has(name)) throw new Error(`metric ${name} is already registered`);
    const bad = labelNames.find((label) => !LABEL_NAME.test(label) || label.startsWith("__"));
    if (bad !== undefined) throw new Error(`metric ${name}: invalid label name "${bad}"`);
    const family: Family = { name, help: options.help, type, labelNames, series: new Map() };
    this.#families.set(name, family);

    const valuesOf = (labels: Labels<L>) =>
      labelNames.map((label) => {
        const value = (labels as Record<string, string | number | undefined>)[label];
        if (value === undefined) throw new Error(`metric ${name}: label "${label}" is missing`);
        return String(value);
      });
    const seriesFor = (labels: Labels<L>): S => {
      const values = valuesOf(labels);
      const key = values.join("\u0000");
      let entry = family.series.get(key);
      if (!entry) {
        const pairs = values.map((value, i) => `${labelNames[i]}="${escapeLabelValue(value)}"`);
        entry = { labels: pairs.length ? `{${pairs.join(",")}}` : "", series: create() };
        family.series.set(key, entry);
      }
      return entry.series as S;
    };
    // An unlabelled metric is exposed (as 0) from the start, so a scrape sees it before its first event.
    const unlabelled = labelNames.length === 0 ? seriesFor({} as Labels<L>) : undefined;
    return {
      with: seriesFor,
      remove: (labels) => void family.series.delete(valuesOf(labels).join("\u0000")),
      own: () => {
        if (!unlabelled) throw new Error(`metric ${name} needs labels: ${labelNames.join(", ")}`);
        return unlabelled;
      },
    };
  }
}

/** Go's float formatting as Prometheus parses it. */
export function formatNumber(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Number.POSITIVE_INFINITY) return "+Inf";
  if (value === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(value);
}

function escapeHelp(text: string): string {
  return text.replaceAll("\\", "\\\\").replaceAll("\n", "\\n");
}

function escapeLabelValue(text: string): string {
  return text.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

/** Standard process_* metrics, computed at scrape time. */
export function registerProcessMetrics(registry: Registry): void {
  const startSeconds = Math.round((Date.now() - performance.now()) / 1000);
  registry.gauge({
    name: "process_resident_memory_bytes",
    help: "Resident memory size in bytes.",
    collect: () => process.memoryUsage.rss(),
  });
  registry.counter({
    name: "process_cpu_seconds_total",
    help: "Total user and system CPU time spent in seconds.",
    collect: () => {
      const { user, system } = process.cpuUsage();
      return (user + system) / 1e6;
    },
  });
  registry.gauge({
    name: "process_start_time_seconds",
    help: "Start time of the process since unix epoch in seconds.",
    collect: () => startSeconds,
  });
  registry.gauge({
    name: "nodejs_heap_size_used_bytes",
    help: "Process heap size used from Node.js in bytes.",
    collect: () => process.memoryUsage().heapUsed,
  });
}

/**
 * What every program serves, created once by the program: process metrics and its API requests,
 * named after the program ("local-ccm" → local_ccm_api_requests_total). Each controller adds its
 * own with a factory of the same shape, `createXMetrics(registry)`.
 */
export function createProgramMetrics(program: string, registry = new Registry()) {
  registerProcessMetrics(registry);
  const prefix = program.replaceAll("-", "_");
  registry
    .gauge({
      name: `${prefix}_build_info`,
      help: "Always 1; its labels say which build runs: version, commit and runtime (as --version prints them).",
      labels: ["version", "revision", "runtime"],
    })
    .with(BUILD)
    .set(1);
  return {
    registry,
    apiRequests: registry.counter({
      name: `${prefix}_api_requests_total`,
      help: "Requests to the Kubernetes API, by verb and HTTP status code (0: no answer).",
      labels: ["verb", "code"],
    }),
    metricsRefusals: registry.counter({
      name: `${prefix}_metrics_requests_refused_total`,
      help:
        "Secure /metrics requests refused, by HTTP status code and rule (bearer-token, authentication, audience, " +
        "authorization, review-rate-source: a source address past its token-review budget, review-rate: all " +
        "sources past theirs, review: the reviews failed).",
      labels: ["code", "rule"],
    }),
  };
}

/** The docs table (docs/reference.md): metric | type | labels | description. */
export function metricsMarkdown(registry: Registry): string {
  const code = (text: string) => `\`${text}\``;
  return markdownTable(
    ["metric", "type", "labels", "description"],
    registry.describe().map((m) => [code(m.name), m.type, m.labels.map(code).join(", "), m.help]),
  );
}
