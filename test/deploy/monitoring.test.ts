// The chart's alerts and dashboard (charts/local-ccm/monitoring/, metrics.prometheusRule and
// metrics.grafanaDashboard): off by default; on, the PrometheusRule's groups are a rule file Prometheus's own reader
// (rulefmt, as `promtool check rules`, in the Go oracle) accepts, and every metric an alert or a dashboard panel
// queries, as Prometheus's PromQL parser finds the selectors, is one the programs register (the generated metrics
// tables' source). A renamed or removed metric fails here rather than leaving an alert that never fires.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { parseAllDocuments, stringify } from "yaml";
import { createMetrics as createAgentMetrics } from "../../src/agent/metrics.ts";
import { createMetrics as createManagerMetrics } from "../../src/manager/metrics.ts";
import { ensureBinaries } from "../../localcluster/build.ts";
import { CHART_DIR, helmTemplate } from "../../scripts/render-manifests.ts";
import { type Oracle, startOracle } from "../oracle/oracle.ts";

interface KubeObject {
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  spec?: { groups?: { name: string; rules: unknown[] }[] };
  data?: Record<string, string>;
}

interface Parsed {
  error?: string;
  metrics: string[];
}

/** Every series name the programs expose: a histogram's as its _bucket, _sum and _count. */
const EXPOSED = new Set(
  [createAgentMetrics().registry, createManagerMetrics().registry].flatMap((registry) =>
    registry
      .describe()
      .flatMap(({ name, type }) => (type === "histogram" ? ["_bucket", "_sum", "_count"].map((s) => name + s) : [name])),
  ),
);

let helm: string;
let oracle: Oracle;
before(async () => {
  ({ helm } = await ensureBinaries());
  oracle = await startOracle();
});
after(() => oracle?.close());

const render = async (values: Record<string, unknown>): Promise<KubeObject[]> => {
  const args = Object.entries(values).flatMap(([key, value]) => ["--set-json", `${key}=${JSON.stringify(value)}`]);
  return parseAllDocuments(await helmTemplate(helm, args))
    .map((doc) => doc.toJS() as KubeObject | null)
    .filter((obj): obj is KubeObject => obj !== null);
};

const ON = { "metrics.prometheusRule.enabled": true, "metrics.grafanaDashboard.enabled": true };

/** The metric names of `expr` that no program registers ("" for a selector naming none), or its parse error. */
async function unknownMetrics(expr: string): Promise<string[]> {
  const { error, metrics } = await oracle.ask<Parsed>("promql", expr);
  if (error !== undefined) return [`parse error: ${error}`];
  assert.ok(metrics.length > 0, `${expr}: queries no metric`);
  return metrics.filter((name) => !EXPOSED.has(name));
}

describe("the chart's alerts and dashboard", () => {
  test("off by default: no PrometheusRule, no dashboard ConfigMap", async () => {
    const kinds = (await render({})).map(({ kind, metadata }) => `${kind}/${metadata.name}`);
    assert.ok(kinds.length > 0);
    assert.deepEqual(kinds.filter((kind) => /^PrometheusRule\/|^ConfigMap\/local-ccm-dashboard$/.test(kind)), []);
  });

  test("the PrometheusRule: a rule file Prometheus accepts, every metric registered, labels added", async () => {
    const objects = await render({ ...ON, "metrics.prometheusRule.labels": { release: "kps" } });
    const rule = objects.find(({ kind }) => kind === "PrometheusRule");
    assert.ok(rule, "rendered");
    assert.equal(rule.metadata.labels?.release, "kps");
    const groups = rule.spec?.groups ?? [];
    assert.deepEqual(groups.map(({ name }) => name), ["local-ccm", "node-lifecycle-controller"]);
    const checked = await oracle.ask<{ errors: string[]; rules: (Parsed & { name: string })[] }>(
      "prometheus-rules",
      stringify({ groups }),
    );
    assert.deepEqual(checked.errors, []);
    assert.deepEqual(checked.rules.map(({ name }) => name).sort(), [
      "LocalCCMKubeletServingCSRDenied",
      "LocalCCMNoLeader",
      "LocalCCMNodeUninitialized",
      "LocalCCMPoolExhausted",
      "LocalCCMPoolNearlyExhausted",
      "LocalCCMServicesRefusedPoolExhausted",
    ]);
    for (const { name, error, metrics } of checked.rules) {
      assert.equal(error, undefined, name);
      assert.deepEqual(metrics.filter((metric) => !EXPOSED.has(metric)), [], `${name} queries unregistered metrics`);
    }
    // The rendered groups are the chart's file, unchanged.
    const file = parseAllDocuments(await readFile(path.join(CHART_DIR, "monitoring/alerts.yaml"), "utf8"))[0]?.toJS();
    assert.deepEqual(groups, file.groups);
  });

  test("without node-lifecycle-controller, only the agent's alerts", async () => {
    const objects = await render({ ...ON, "nodeLifecycleController.enabled": false });
    const rule = objects.find(({ kind }) => kind === "PrometheusRule");
    assert.deepEqual(rule?.spec?.groups?.map(({ name }) => name), ["local-ccm"]);
  });

  test("the dashboard: the chart's JSON in a ConfigMap the sidecar finds; every panel's query parses and is registered", async () => {
    const objects = await render(ON);
    const map = objects.find(({ kind, metadata }) => kind === "ConfigMap" && metadata.name === "local-ccm-dashboard");
    assert.ok(map, "rendered");
    assert.equal(map.metadata.labels?.grafana_dashboard, "1");
    const text = await readFile(path.join(CHART_DIR, "monitoring/dashboard.json"), "utf8");
    assert.deepEqual(JSON.parse(map.data?.["local-ccm.json"] ?? ""), JSON.parse(text));
    const dashboard = JSON.parse(text) as { panels: { title: string; targets: { expr: string }[] }[] };
    const exprs = dashboard.panels.flatMap(({ title, targets }) => targets.map(({ expr }) => ({ title, expr })));
    assert.ok(exprs.length >= dashboard.panels.length, "a query per panel at least");
    for (const { title, expr } of exprs) assert.deepEqual(await unknownMetrics(expr), [], `${title}: ${expr}`);
  });

  test("the check itself: a misspelt metric, an unparsable query and a rule file with a bad field are caught", async () => {
    assert.deepEqual(await unknownMetrics("sum(node_lifecycle_controller_leaders)"), [
      "node_lifecycle_controller_leaders",
    ]);
    assert.match((await unknownMetrics("sum(node_lifecycle_controller_leader"))[0] ?? "", /^parse error: /);
    assert.deepEqual(await unknownMetrics('{__name__=~"local_ccm_.*"}'), [""]);
    const bad = stringify({ groups: [{ name: "g", rules: [{ alert: "A", expr: "up", fro: "5m" }] }] });
    const checked = await oracle.ask<{ errors: string[] }>("prometheus-rules", bad);
    assert.match(checked.errors.join("\n"), /field fro not found/);
  });
});
