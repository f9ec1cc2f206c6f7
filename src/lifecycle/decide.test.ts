import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { Node, Taint } from "kubernetes-types/core/v1.js";
import {
  type LabelSelector,
  matchesLabels,
  parseKeyValueList,
  parseLabelSelector,
} from "../kube/labelselector.ts";
import type { ProbeResult } from "../net/probe.ts";
import {
  type ClusterHealth,
  clusterHealth,
  type Decision,
  decide,
  isControlPlane,
  isWatched,
  type LifecycleConfig,
  notReadySince,
} from "./decide.ts";

const NOW = new Date("2026-01-01T12:00:00Z");
const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();
const at = (fromNowMs: number) => new Date(NOW.getTime() + fromNowMs);
const MINUTE = 60_000;

const AUTOSCALER: Taint = { key: "ToBeDeletedByClusterAutoscaler", effect: "NoSchedule" };

interface NodeSpec {
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  taints?: Taint[];
  /** Ready condition status; null: no Ready condition. */
  ready?: "True" | "False" | "Unknown" | null;
  /** lastTransitionTime of the Ready condition; null: none. */
  transition?: string | null;
  created?: string;
  deleting?: boolean;
}

function node(spec: NodeSpec = {}): Node {
  const ready = spec.ready === undefined ? "Unknown" : spec.ready;
  const transition = spec.transition === undefined ? ago(10 * MINUTE) : spec.transition;
  return {
    metadata: {
      name: "n",
      labels: spec.labels ?? {},
      annotations: spec.annotations ?? {},
      ...(spec.created ? { creationTimestamp: spec.created } : {}),
      ...(spec.deleting ? { deletionTimestamp: ago(0) } : {}),
    },
    spec: { taints: spec.taints ?? [AUTOSCALER] },
    status: {
      conditions:
        ready === null
          ? [{ type: "MemoryPressure", status: "False" }]
          : [
              { type: "MemoryPressure", status: "False" },
              {
                type: "Ready",
                status: ready,
                ...(transition === null ? {} : { lastTransitionTime: transition }),
              },
            ],
    },
  };
}

const CONFIG: LifecycleConfig = {
  watchAutoscalerTaint: true,
  protectedLabels: parseKeyValueList("keep,pin=yes"),
  protectedAnnotations: parseKeyValueList("example.com/hold", "annotation"),
  notReadyTimeoutMs: 5 * MINUTE,
  maxDeletionsPerMinute: 2,
  unhealthyThreshold: 0.55,
};
const HEALTHY: ClusterHealth = clusterHealth([node({ ready: "True" })], 0.55);
const UNREACHABLE: ProbeResult = {
  alive: false,
  detail: "unreachable: no answer from icmp, tcp:10250 on 198.18.0.9",
};

test("control-plane nodes carry either the current or the legacy role label, with any value", () => {
  assert.equal(isControlPlane(node({ labels: { "node-role.kubernetes.io/control-plane": "" } })), true);
  assert.equal(isControlPlane(node({ labels: { "node-role.kubernetes.io/master": "true" } })), true);
  assert.equal(isControlPlane(node({ labels: { "node-role.kubernetes.io/worker": "" } })), false);
  assert.equal(isControlPlane({}), false);
});

test("watched nodes follow the filter priority: selector > autoscaler taint > all non-control-plane", () => {
  const selector = parseLabelSelector("pool=spot");
  const cases: [string, Partial<LifecycleConfig>, NodeSpec, boolean][] = [
    [
      "selector matches, no taint",
      { nodeSelector: selector },
      { labels: { pool: "spot" }, taints: [] },
      true,
    ],
    [
      "selector does not match, tainted",
      { nodeSelector: selector },
      { labels: { pool: "on-demand" } },
      false,
    ],
    ["selector set, taint flag off", { nodeSelector: selector, watchAutoscalerTaint: false }, {}, false],
    ["empty selector = unset, tainted", { nodeSelector: parseLabelSelector("") }, {}, true],
    ["empty selector = unset, no taint", { nodeSelector: parseLabelSelector("") }, { taints: [] }, false],
    ["taint flag on, tainted", {}, {}, true],
    ["taint flag on, no taint", {}, { taints: [] }, false],
    ["taint flag on, wrong effect", {}, { taints: [{ ...AUTOSCALER, effect: "PreferNoSchedule" }] }, false],
    ["taint flag on, other taint", {}, { taints: [{ key: "other", effect: "NoSchedule" }] }, false],
    ["taint flag off: all", { watchAutoscalerTaint: false }, { taints: [] }, true],
    [
      "taint flag off: not control plane",
      { watchAutoscalerTaint: false },
      { labels: { "node-role.kubernetes.io/control-plane": "" } },
      false,
    ],
    [
      "selector matching a control-plane node",
      { nodeSelector: parseLabelSelector("node-role.kubernetes.io/master") },
      { labels: { "node-role.kubernetes.io/master": "" } },
      false,
    ],
  ];
  for (const [name, config, spec, expected] of cases)
    assert.equal(isWatched(node(spec), { ...CONFIG, ...config }), expected, name);
});

test("NotReady time comes from the Ready condition, or from creation when there is no Ready condition", () => {
  const cases: [string, NodeSpec, string | undefined][] = [
    ["Ready", { ready: "True" }, undefined],
    ["False", { ready: "False", transition: ago(MINUTE) }, ago(MINUTE)],
    ["Unknown", { ready: "Unknown", transition: ago(2 * MINUTE) }, ago(2 * MINUTE)],
    ["no Ready condition: creation time", { ready: null, created: ago(3 * MINUTE) }, ago(3 * MINUTE)],
    ["no Ready condition, no creation time", { ready: null }, undefined],
    [
      "False without lastTransitionTime",
      { ready: "False", transition: null, created: ago(MINUTE) },
      undefined,
    ],
    ["malformed lastTransitionTime", { ready: "False", transition: "yesterday" }, undefined],
  ];
  for (const [name, spec, expected] of cases)
    assert.equal(notReadySince(node(spec))?.toISOString(), expected, name);
});

test("cluster health: pauses with more than 2 non-control-plane nodes and at least the threshold NotReady", () => {
  const nodes = (ready: number, notReady: number, extra: Node[] = []) => [
    ...Array.from({ length: ready }, () => node({ ready: "True" })),
    ...Array.from({ length: notReady }, () => node({ ready: "False" })),
    ...extra,
  ];
  const controlPlane = node({ ready: "False", labels: { "node-role.kubernetes.io/control-plane": "" } });
  const cases: [string, Node[], number, Omit<ClusterHealth, "reason">][] = [
    ["2 nodes, both NotReady", nodes(0, 2), 0.55, { considered: 2, notReady: 2, paused: false }],
    ["3 nodes, 2 NotReady", nodes(1, 2), 0.55, { considered: 3, notReady: 2, paused: true }],
    ["3 nodes, 1 NotReady", nodes(2, 1), 0.55, { considered: 3, notReady: 1, paused: false }],
    ["exactly the threshold", nodes(9, 11), 0.55, { considered: 20, notReady: 11, paused: true }],
    ["just below", nodes(10, 10), 0.55, { considered: 20, notReady: 10, paused: false }],
    [
      "control plane left out",
      nodes(3, 0, [controlPlane, controlPlane]),
      0.55,
      {
        considered: 3,
        notReady: 0,
        paused: false,
      },
    ],
    [
      "missing Ready counts as NotReady",
      nodes(1, 0, [node({ ready: null }), node({ ready: null })]),
      0.55,
      {
        considered: 3,
        notReady: 2,
        paused: true,
      },
    ],
    ["empty cluster", [], 0.55, { considered: 0, notReady: 0, paused: false }],
  ];
  for (const [name, cluster, threshold, expected] of cases) {
    const { reason: _reason, ...rest } = clusterHealth(cluster, threshold);
    assert.deepEqual(rest, expected, name);
  }
  assert.equal(clusterHealth(nodes(4, 6), 0.55).reason, "deletions paused: 6 of 10 nodes NotReady (≥ 55%)");
  assert.equal(
    clusterHealth(nodes(9, 1), 0.55).reason,
    "deletions allowed: 1 of 10 nodes NotReady (pause at ≥ 55% of more than 2)",
  );
});

test("decide: every rule, with its reason", () => {
  const paused = clusterHealth([node(), node(), node()], 0.55);
  const cases: [
    string,
    NodeSpec,
    Partial<LifecycleConfig>,
    Partial<Parameters<typeof decide>[3]>,
    Decision,
  ][] = [
    [
      "control plane",
      { labels: { "node-role.kubernetes.io/control-plane": "" } },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "unwatched", reason: "control-plane node" },
    ],
    [
      "not tainted",
      { taints: [] },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "unwatched", reason: "no ToBeDeletedByClusterAutoscaler:NoSchedule taint" },
    ],
    [
      "not selected",
      { labels: { pool: "b" } },
      { nodeSelector: parseLabelSelector(" pool in (a) ") },
      { probe: UNREACHABLE },
      { action: "skip", class: "unwatched", reason: "not selected by node selector pool in (a)" },
    ],
    [
      "protected label (key only)",
      { labels: { keep: "" } },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "protected", reason: "protected by label keep (NotReady for 10m0s, timeout 5m0s)" },
    ],
    [
      "protected label (key=value)",
      { labels: { pin: "yes" } },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "protected", reason: "protected by label pin=yes (NotReady for 10m0s, timeout 5m0s)" },
    ],
    [
      "protected annotation",
      { annotations: { "example.com/hold": "until friday" } },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "protected", reason: "protected by annotation example.com/hold (NotReady for 10m0s, timeout 5m0s)" },
    ],
    [
      "protected but Ready: the protection is not what keeps it",
      { labels: { keep: "" }, ready: "True" },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "ready", reason: "Ready" },
    ],
    [
      "protected, NotReady within the timeout",
      { labels: { keep: "" }, transition: ago(2 * MINUTE) },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "not-expired", reason: "NotReady for 2m0s, timeout 5m0s", until: at(3 * MINUTE) },
    ],
    [
      "protected and being deleted (by someone else)",
      { labels: { keep: "" }, deleting: true },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "deleting", reason: "already being deleted" },
    ],
    [
      "protected beats the guard and the rate limit",
      { annotations: { "example.com/hold": "until friday" } },
      { maxDeletionsPerMinute: 0 },
      { health: paused, probe: UNREACHABLE },
      {
        action: "skip",
        class: "protected",
        reason: "protected by annotation example.com/hold (NotReady for 10m0s, timeout 5m0s)",
      },
    ],
    [
      "already being deleted",
      { deleting: true },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "deleting", reason: "already being deleted" },
    ],
    [
      "Ready",
      { ready: "True" },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "ready", reason: "Ready" },
    ],
    [
      "NotReady without a transition time",
      { ready: "Unknown", transition: null, created: ago(60 * MINUTE) },
      {},
      { probe: UNREACHABLE },
      {
        action: "skip",
        class: "not-expired",
        reason: "NotReady since an unknown time (no lastTransitionTime)",
      },
    ],
    [
      "recently NotReady",
      { transition: ago(2 * MINUTE + 10_500) },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "not-expired", reason: "NotReady for 2m10s, timeout 5m0s", until: at(2 * MINUTE + 49_500) },
    ],
    [
      "one millisecond before the timeout",
      { transition: ago(5 * MINUTE - 1) },
      {},
      { probe: UNREACHABLE },
      { action: "skip", class: "not-expired", reason: "NotReady for 4m59s, timeout 5m0s", until: at(1) },
    ],
    [
      "transition in the future (clock skew)",
      { transition: ago(-MINUTE) },
      { notReadyTimeoutMs: 0 },
      {},
      { action: "skip", class: "not-expired", reason: "NotReady for 0s, timeout 0s", until: at(MINUTE) },
    ],
    [
      "paused cluster",
      {},
      {},
      { health: paused, probe: UNREACHABLE },
      { action: "skip", class: "paused", reason: "deletions paused: 3 of 3 nodes NotReady (≥ 55%)" },
    ],
    [
      "rate limit reached",
      {},
      {},
      { deletionTimes: [new Date(ago(59_999)), new Date(ago(1000))], probe: UNREACHABLE },
      {
        action: "skip",
        class: "rate-limited",
        reason: "rate limit: 2 deletions in the last minute",
        until: at(1), // when the older of the two leaves the window
      },
    ],
    [
      "a deletion in the future still counts",
      {},
      { maxDeletionsPerMinute: 1 },
      { deletionTimes: [new Date(ago(-5000))], probe: UNREACHABLE },
      { action: "skip", class: "rate-limited", reason: "rate limit: 1 deletions in the last minute", until: at(65_000) },
    ],
    [
      "no deletion allowed at all",
      {},
      { maxDeletionsPerMinute: 0 },
      { probe: UNREACHABLE },
      { action: "skip", class: "rate-limited", reason: "rate limit: 0 deletions in the last minute" },
    ],
    [
      "phase 1: expired, not yet probed",
      { transition: ago(5 * MINUTE) },
      {},
      { deletionTimes: [new Date(ago(MINUTE)), new Date(ago(2 * MINUTE))] },
      { action: "probe", reason: "NotReady for 5m0s, timeout 5m0s" },
    ],
    [
      "no Ready condition, created long ago",
      { ready: null, created: ago(61 * MINUTE) },
      {},
      {},
      { action: "probe", reason: "NotReady for 1h1m0s, timeout 5m0s" },
    ],
    [
      "phase 2: reachable",
      {},
      {},
      { probe: { alive: true, detail: "reachable: tcp 198.18.0.2:10250 answered" } },
      { action: "skip", class: "reachable", reason: "reachable: tcp 198.18.0.2:10250 answered" },
    ],
    [
      "phase 2: nothing could run",
      {},
      {},
      {
        probe: {
          alive: true,
          inconclusive: true,
          detail: "probe inconclusive: no probe could run on 198.18.0.2",
        },
      },
      {
        action: "skip",
        class: "inconclusive",
        reason: "probe inconclusive: no probe could run on 198.18.0.2",
      },
    ],
    [
      "phase 2: inconclusive even if a caller says alive=false",
      {},
      {},
      { probe: { alive: false, inconclusive: true, detail: "probe inconclusive" } },
      { action: "skip", class: "inconclusive", reason: "probe inconclusive" },
    ],
    [
      "phase 2: unreachable",
      {},
      {},
      { probe: UNREACHABLE },
      {
        action: "delete",
        reason: "NotReady for 10m0s, timeout 5m0s; unreachable: no answer from icmp, tcp:10250 on 198.18.0.9",
      },
    ],
  ];
  for (const [name, spec, config, context, expected] of cases) {
    const decision = decide(
      node(spec),
      NOW,
      { ...CONFIG, ...config },
      {
        health: HEALTHY,
        deletionTimes: [],
        ...context,
      },
    );
    assert.deepEqual(decision, expected, name);
  }
});

// ---- properties over random clusters ----
// The oracle below restates the rules independently of decide.ts's helpers.

const SELECTORS = ["", "pool=a", "pool in (a,b)", "!pool", "keep"];

const taintArb = fc.constantFrom<Taint>(
  AUTOSCALER,
  { ...AUTOSCALER, effect: "PreferNoSchedule" },
  { key: "other", effect: "NoSchedule" },
);
const nodeArb = fc
  .record({
    controlPlane: fc.constantFrom(
      undefined,
      "node-role.kubernetes.io/control-plane",
      "node-role.kubernetes.io/master",
    ),
    pool: fc.constantFrom(undefined, "a", "b"),
    keep: fc.constantFrom(undefined, "", "yes"),
    pin: fc.constantFrom(undefined, "yes", "no"),
    hold: fc.boolean(),
    taints: fc.array(taintArb, { maxLength: 3 }),
    ready: fc.constantFrom<NodeSpec["ready"]>("True", "False", "Unknown", null),
    // Milliseconds, biased to both sides of the timeouts configArb picks from.
    transitionAgoMs: fc.option(
      fc.oneof(fc.integer({ min: -60_000, max: 1_200_000 }), fc.constantFrom(999, 1000, 299_999, 300_000)),
      { nil: null },
    ),
    createdAgoS: fc.option(fc.integer({ min: 0, max: 3600 }), { nil: undefined }),
    deleting: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
  })
  .map((r) =>
    node({
      labels: Object.fromEntries(
        [
          [r.controlPlane, ""],
          ["pool", r.pool],
          ["keep", r.keep],
          ["pin", r.pin],
        ].filter((entry): entry is [string, string] => entry[0] !== undefined && entry[1] !== undefined),
      ),
      annotations: r.hold ? { "example.com/hold": "x" } : {},
      taints: r.taints,
      ready: r.ready,
      transition: r.transitionAgoMs === null ? null : ago(r.transitionAgoMs),
      ...(r.createdAgoS === undefined ? {} : { created: ago(r.createdAgoS * 1000) }),
      deleting: r.deleting,
    }),
  );

const configArb = fc
  .record({
    selector: fc.constantFrom(...SELECTORS),
    watchAutoscalerTaint: fc.boolean(),
    protectedLabels: fc.constantFrom("", "keep", "pin=yes", "keep,pin=no"),
    protectedAnnotations: fc.constantFrom("", "example.com/hold"),
    notReadyTimeoutMs: fc.oneof(fc.integer({ min: 0, max: 900_000 }), fc.constantFrom(1000, 300_000)),
    maxDeletionsPerMinute: fc.integer({ min: 0, max: 4 }),
    unhealthyThreshold: fc.constantFrom(0.1, 0.55, 1),
  })
  .map(
    (r): LifecycleConfig => ({
      ...(r.selector ? { nodeSelector: parseLabelSelector(r.selector) } : {}),
      watchAutoscalerTaint: r.watchAutoscalerTaint,
      protectedLabels: parseKeyValueList(r.protectedLabels),
      protectedAnnotations: parseKeyValueList(r.protectedAnnotations, "annotation"),
      notReadyTimeoutMs: r.notReadyTimeoutMs,
      maxDeletionsPerMinute: r.maxDeletionsPerMinute,
      unhealthyThreshold: r.unhealthyThreshold,
    }),
  );

const probeArb = fc.option(
  fc.oneof(
    fc.constant<ProbeResult>({ alive: true, detail: "reachable" }),
    fc.constant<ProbeResult>({ alive: false, detail: "unreachable" }),
    fc.constant<ProbeResult>({ alive: false, detail: "unreachable", icmpUnavailable: true }),
    fc.constant<ProbeResult>({ alive: true, inconclusive: true, detail: "inconclusive" }),
    fc.constant<ProbeResult>({ alive: false, inconclusive: true, detail: "inconclusive, misreported" }),
  ),
  { nil: undefined },
);
const deletionTimesArb = fc.array(
  fc.integer({ min: -5, max: 120 }).map((s) => new Date(ago(s * 1000))),
  { maxLength: 6 },
);

const labelsOf = (n: Node) => n.metadata?.labels ?? {};
const oracle = {
  controlPlane: (n: Node) =>
    "node-role.kubernetes.io/control-plane" in labelsOf(n) || "node-role.kubernetes.io/master" in labelsOf(n),
  watched(n: Node, config: LifecycleConfig, selector: LabelSelector | undefined) {
    if (selector && selector.requirements.length > 0) return matchesLabels(selector, labelsOf(n));
    if (config.watchAutoscalerTaint)
      return (n.spec?.taints ?? []).some((t) => t.key === AUTOSCALER.key && t.effect === "NoSchedule");
    return true;
  },
  protected: (n: Node, config: LifecycleConfig) =>
    config.protectedLabels.some(
      (m) => m.key in labelsOf(n) && (m.value === undefined || labelsOf(n)[m.key] === m.value),
    ) || config.protectedAnnotations.some((m) => m.key in (n.metadata?.annotations ?? {})),
  ready: (n: Node) => n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false,
  /** Milliseconds NotReady, or undefined where it is not known. */
  notReadyMs(n: Node) {
    const ready = n.status?.conditions?.find((c) => c.type === "Ready");
    const since = ready ? ready.lastTransitionTime : n.metadata?.creationTimestamp;
    if (ready?.status === "True" || since === undefined) return undefined;
    return NOW.getTime() - Date.parse(since);
  },
  unhealthy(cluster: Node[], threshold: number) {
    const workers = cluster.filter((n) => !oracle.controlPlane(n));
    const notReady = workers.filter((n) => !oracle.ready(n)).length;
    return workers.length > 2 && notReady / workers.length >= threshold;
  },
};

test("property: deletes (or probes) only watched, unprotected, expired nodes, within rate and health", () => {
  fc.assert(
    fc.property(
      fc.array(nodeArb, { minLength: 1, maxLength: 12 }),
      configArb,
      deletionTimesArb,
      probeArb,
      (cluster, config, deletionTimes, probe) => {
        const health = clusterHealth(cluster, config.unhealthyThreshold);
        assert.equal(health.paused, oracle.unhealthy(cluster, config.unhealthyThreshold));
        const recent = deletionTimes.filter((t) => t.getTime() > NOW.getTime() - MINUTE).length;
        for (const n of cluster) {
          const decision = decide(n, NOW, config, { health, deletionTimes, ...(probe ? { probe } : {}) });
          assert.ok(decision.reason.length > 0);
          if (decision.action === "skip") continue;
          const notReadyMs = oracle.notReadyMs(n);
          assert.ok(!oracle.controlPlane(n), "control-plane node");
          assert.ok(oracle.watched(n, config, config.nodeSelector), "filtered-out node");
          assert.ok(!oracle.protected(n, config), "protected node");
          assert.ok(!n.metadata?.deletionTimestamp, "node being deleted");
          assert.ok(!oracle.ready(n), "Ready node");
          assert.ok(notReadyMs !== undefined && notReadyMs >= config.notReadyTimeoutMs, "recently NotReady");
          assert.ok(!health.paused, "paused cluster");
          assert.ok(recent < config.maxDeletionsPerMinute, "rate exceeded");
          if (decision.action === "probe") assert.equal(probe, undefined, "probe result ignored");
          else assert.ok(probe && !probe.alive && !probe.inconclusive, "reachable or unprobed node");
        }
      },
    ),
    { numRuns: 2000 },
  );
});

test("property: over a run of reconciles, no 60 s window ever holds more than the allowed deletions", () => {
  const candidate = node({ transition: ago(60 * MINUTE) });
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 5 }),
      fc.array(fc.integer({ min: 0, max: 40_000 }), { minLength: 1, maxLength: 40 }),
      fc.integer({ min: 1, max: 8 }),
      (max, steps, nodesPerRound) => {
        const config = { ...CONFIG, maxDeletionsPerMinute: max };
        const deletionTimes: Date[] = [];
        let time = NOW.getTime();
        for (const step of steps) {
          time += step;
          const now = new Date(time);
          for (let i = 0; i < nodesPerRound; i++) {
            const context = { health: HEALTHY, deletionTimes, probe: UNREACHABLE };
            // Both phases, as the controller runs them: probe-or-skip, then the final check.
            if (decide(candidate, now, config, { ...context, probe: undefined }).action !== "probe") continue;
            if (decide(candidate, now, config, context).action === "delete") deletionTimes.push(now);
          }
        }
        for (const t of deletionTimes) {
          const window = deletionTimes.filter((d) => d.getTime() > t.getTime() - MINUTE && d <= t);
          assert.ok(window.length <= max, `${window.length} deletions within a minute, max ${max}`);
        }
        if (max > 0) assert.ok(deletionTimes.length > 0, "the limit must not block everything");
      },
    ),
    { numRuns: 500 },
  );
});

test("property: a skip's `until` is the moment time alone changes it, never later and never sooner", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 10 * MINUTE }),
      fc.integer({ min: 0, max: 4 }),
      fc.array(fc.integer({ min: -5000, max: 2 * MINUTE }), { maxLength: 6 }),
      (notReadyForMs, max, deletionsAgo) => {
        const config = { ...CONFIG, maxDeletionsPerMinute: max };
        const candidate = node({ transition: ago(notReadyForMs) });
        const context = { health: HEALTHY, deletionTimes: deletionsAgo.map((ms) => new Date(ago(ms))) };
        const decision = decide(candidate, NOW, config, context);
        if (decision.action !== "skip") return;
        const { until } = decision;
        if (until === undefined) {
          // Time alone never ends "no deletion at all"; a known NotReady time always has an expiry.
          assert.notEqual(decision.class, "not-expired");
          if (decision.class === "rate-limited") assert.equal(max, 0);
          return;
        }
        assert.ok(until > NOW);
        const ruleAt = (ms: number) => {
          const later = decide(candidate, new Date(ms), config, context);
          return later.action === "skip" ? later.class : later.action;
        };
        assert.equal(ruleAt(until.getTime() - 1), decision.class, "still held a millisecond before");
        assert.notEqual(ruleAt(until.getTime()), decision.class, "let go at `until`");
      },
    ),
    { numRuns: 1000 },
  );
});
