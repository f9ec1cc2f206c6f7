import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  createProgramMetrics,
  formatNumber,
  metricsMarkdown,
  Registry,
  registerProcessMetrics,
} from "./metrics.ts";
import { BUILD } from "./version.ts";

describe("exposition format 0.0.4", () => {
  test("counter without labels is exposed as 0 before its first increment", () => {
    const registry = new Registry();
    const reconciles = registry.counter({ name: "reconciles_total", help: "Reconciles run." });
    assert.equal(
      registry.expose(),
      "# HELP reconciles_total Reconciles run.\n# TYPE reconciles_total counter\nreconciles_total 0\n",
    );
    reconciles.inc();
    reconciles.inc(2);
    assert.equal(reconciles.get(), 3);
    assert.match(registry.expose(), /\nreconciles_total 3\n$/);
  });

  test("labelled counter: one line per label set, in creation order", () => {
    const registry = new Registry();
    const requests = registry.counter({
      name: "api_requests_total",
      help: "Requests.",
      labels: ["verb", "code"],
    });
    requests.with({ verb: "get", code: 200 }).inc();
    requests.with({ verb: "patch", code: 409 }).inc();
    requests.with({ verb: "get", code: 200 }).inc();
    assert.equal(
      registry.expose(),
      [
        "# HELP api_requests_total Requests.",
        "# TYPE api_requests_total counter",
        'api_requests_total{verb="get",code="200"} 2',
        'api_requests_total{verb="patch",code="409"} 1',
        "",
      ].join("\n"),
    );
  });

  test("label values and help text are escaped", () => {
    const registry = new Registry();
    const errors = registry.counter({
      name: "errors_total",
      help: 'Errors \\ by "reason"\nsecond line',
      labels: ["reason"],
    });
    errors.with({ reason: 'a "quoted" \\ back\nslash' }).inc();
    const lines = registry.expose().split("\n");
    assert.equal(lines[0], '# HELP errors_total Errors \\\\ by "reason"\\nsecond line');
    assert.equal(lines[2], 'errors_total{reason="a \\"quoted\\" \\\\ back\\nslash"} 1');
  });

  test("gauge: set, inc, negative and special values", () => {
    const registry = new Registry();
    const gauge = registry.gauge({ name: "last_success_timestamp_seconds", help: "Last success." });
    gauge.set(1732255628.5);
    assert.match(registry.expose(), /\nlast_success_timestamp_seconds 1732255628\.5\n/);
    gauge.inc(-0.5);
    assert.equal(gauge.get(), 1732255628);
    gauge.set(Number.NaN);
    assert.match(registry.expose(), /\nlast_success_timestamp_seconds NaN\n/);
    const paused = registry.gauge({ name: "paused", help: "Paused.", labels: ["reason"] });
    paused.with({ reason: "unhealthy" }).set(1);
    assert.match(registry.expose(), /\npaused\{reason="unhealthy"\} 1\n$/);
  });

  test("a removed gauge series is no longer exposed; the others stay, and it comes back when set", () => {
    const registry = new Registry();
    const free = registry.gauge({ name: "free", help: "Free.", labels: ["pool"] });
    free.with({ pool: "a" }).set(3);
    free.with({ pool: "b" }).set(4);
    free.remove({ pool: "a" });
    free.remove({ pool: "never-set" });
    assert.equal(registry.expose(), '# HELP free Free.\n# TYPE free gauge\nfree{pool="b"} 4\n');
    free.with({ pool: "a" }).set(1);
    assert.match(registry.expose(), /\nfree\{pool="a"\} 1\n$/);
  });

  test("histogram: cumulative buckets, +Inf, sum and count", () => {
    const registry = new Registry();
    const latency = registry.histogram({
      name: "detect_seconds",
      help: "Detection latency.",
      buckets: [0.01, 0.1, 1],
    });
    for (const value of [0.005, 0.01, 0.05, 2]) latency.observe(value);
    assert.equal(
      registry.expose(),
      [
        "# HELP detect_seconds Detection latency.",
        "# TYPE detect_seconds histogram",
        'detect_seconds_bucket{le="0.01"} 2',
        'detect_seconds_bucket{le="0.1"} 3',
        'detect_seconds_bucket{le="1"} 3',
        'detect_seconds_bucket{le="+Inf"} 4',
        "detect_seconds_sum 2.065",
        "detect_seconds_count 4",
        "",
      ].join("\n"),
    );
  });

  test("labelled histogram puts le after the other labels", () => {
    const registry = new Registry();
    const latency = registry.histogram({ name: "req_seconds", help: "h", labels: ["verb"], buckets: [1] });
    latency.with({ verb: "get" }).observe(0.5);
    assert.deepEqual(registry.expose().split("\n").slice(2, 6), [
      'req_seconds_bucket{verb="get",le="1"} 1',
      'req_seconds_bucket{verb="get",le="+Inf"} 1',
      'req_seconds_sum{verb="get"} 0.5',
      'req_seconds_count{verb="get"} 1',
    ]);
  });

  test("collected metrics are computed at scrape time", () => {
    const registry = new Registry();
    let value = 1;
    registry.gauge({ name: "g", help: "h", collect: () => value });
    value = 42;
    assert.match(registry.expose(), /\ng 42\n$/);
  });

  test("metrics appear in registration order", () => {
    const registry = new Registry();
    registry.gauge({ name: "b", help: "h" });
    registry.counter({ name: "a", help: "h" });
    const names = registry
      .expose()
      .split("\n")
      .filter((line) => line.startsWith("# TYPE"));
    assert.deepEqual(names, ["# TYPE b gauge", "# TYPE a counter"]);
  });

  test("numbers format the way Prometheus parses them", () => {
    assert.equal(formatNumber(1), "1");
    assert.equal(formatNumber(0.25), "0.25");
    assert.equal(formatNumber(1e21), "1e+21");
    assert.equal(formatNumber(Number.POSITIVE_INFINITY), "+Inf");
    assert.equal(formatNumber(Number.NEGATIVE_INFINITY), "-Inf");
    assert.equal(formatNumber(Number.NaN), "NaN");
  });
});

describe("misuse is an error, not a bad exposition", () => {
  test("invalid or duplicate names", () => {
    const registry = new Registry();
    assert.throws(() => registry.counter({ name: "bad-name", help: "h" }), /invalid metric name "bad-name"/);
    assert.throws(
      () => registry.counter({ name: "c", help: "h", labels: ["bad-label"] }),
      /invalid label name/,
    );
    assert.throws(
      () => registry.counter({ name: "c2", help: "h", labels: ["__reserved"] }),
      /invalid label name/,
    );
    registry.counter({ name: "dup", help: "h" });
    assert.throws(() => registry.gauge({ name: "dup", help: "h" }), /already registered/);
  });

  test("missing labels, labels on an unlabelled call, negative counter increments", () => {
    const registry = new Registry();
    const labelled = registry.counter({ name: "l", help: "h", labels: ["verb"] });
    assert.throws(() => labelled.inc(), /needs labels: verb/);
    assert.throws(() => labelled.with({} as { verb: string }), /label "verb" is missing/);
    const plain = registry.counter({ name: "p", help: "h" });
    assert.throws(() => plain.inc(-1), /increment must be >= 0/);
    assert.throws(() => plain.inc(Number.NaN), /increment must be >= 0/);
  });

  test("histogram buckets must increase; le is reserved", () => {
    const registry = new Registry();
    assert.throws(
      () => registry.histogram({ name: "h1", help: "h", buckets: [1, 1] }),
      /strictly increasing/,
    );
    assert.throws(
      () => registry.histogram({ name: "h2", help: "h", buckets: [1, Number.POSITIVE_INFINITY] }),
      /strictly increasing/,
    );
    assert.throws(
      () => registry.histogram({ name: "h3", help: "h", labels: ["le"], buckets: [1] }),
      /reserved/,
    );
  });
});

test("process metrics report this process", () => {
  const registry = new Registry();
  registerProcessMetrics(registry);
  const text = registry.expose();
  const value = (name: string) => Number(new RegExp(`\\n${name} (\\S+)\\n`).exec(text)?.[1]);
  assert.ok(value("process_resident_memory_bytes") > 1024 * 1024);
  assert.ok(value("process_cpu_seconds_total") > 0);
  assert.ok(Math.abs(value("process_start_time_seconds") - Date.now() / 1000) < 3600);
  assert.ok(value("nodejs_heap_size_used_bytes") > 0);
  assert.match(text, /# TYPE process_cpu_seconds_total counter\n/);
});

test("a program's own metrics: process metrics, API requests and metrics refusals named after it, on one registry", () => {
  const metrics = createProgramMetrics("node-lifecycle-controller");
  metrics.apiRequests.with({ verb: "list", code: 200 }).inc();
  // A controller's factory adds to the same registry.
  metrics.registry.counter({ name: "node_lifecycle_controller_reconciles_total", help: "Passes." });
  assert.deepEqual(
    metrics.registry.describe().map((m) => m.name),
    [
      "process_resident_memory_bytes",
      "process_cpu_seconds_total",
      "process_start_time_seconds",
      "nodejs_heap_size_used_bytes",
      "node_lifecycle_controller_build_info",
      "node_lifecycle_controller_api_requests_total",
      "node_lifecycle_controller_metrics_requests_refused_total",
      "node_lifecycle_controller_reconciles_total",
    ],
  );
  assert.match(
    metrics.registry.expose(),
    /\nnode_lifecycle_controller_api_requests_total\{verb="list",code="200"\} 1\n/,
  );
  const { version, revision, runtime } = BUILD;
  assert.ok(
    metrics.registry
      .expose()
      .includes(
        `\nnode_lifecycle_controller_build_info{version="${version}",revision="${revision}",runtime="${runtime}"} 1\n`,
      ),
  );
});

test("the docs table: one row per metric, in registration order, with its labels", () => {
  const registry = new Registry();
  registry.counter({ name: "a_total", help: "As | pipes.", labels: ["verb", "code"] });
  registry.gauge({ name: "b", help: "B." });
  registry.histogram({ name: "c_seconds", help: "C.", buckets: [1] });
  assert.deepEqual(metricsMarkdown(registry).trimEnd().split("\n"), [
    "| metric | type | labels | description |",
    "|---|---|---|---|",
    "| `a_total` | counter | `verb`, `code` | As \\| pipes. |",
    "| `b` | gauge |  | B. |",
    "| `c_seconds` | histogram |  | C. |",
  ]);
});
