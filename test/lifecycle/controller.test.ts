// The controller against fakes of its adapters (cache, API, probe, events): what it probes, what it
// deletes and with which preconditions, what it events, and its bounds (leadership, probe concurrency,
// one probe per node, rate limit, guard, dry-run), what queues a node (changes, passes, its expiry) and
// how a failure is retried.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import type { Preconditions } from "kubernetes-types/meta/v1.js";
import { createLogger } from "../../src/cli/log.ts";
import { Registry } from "../../src/cli/metrics.ts";
import { ApiError } from "../../src/kube/errors.ts";
import { parseKeyValueList, parseLabelSelector } from "../../src/kube/labelselector.ts";
import type { ProbeResult } from "../../src/net/probe.ts";
import {
  Controller,
  type ControllerOptions,
  decisionInputsChanged,
  probeAddresses,
} from "../../src/lifecycle/controller.ts";
import { nodeTransform } from "../../src/lifecycle/definition.ts";
import { decide, type LifecycleConfig } from "../../src/lifecycle/decide.ts";
import { createNodeLifecycleMetrics } from "../../src/lifecycle/metrics.ts";
import { waitFor } from "../../localcluster/wait.ts";

const NOW = new Date("2026-01-01T12:00:00Z");
const MINUTE = 60_000;
const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();
const AUTOSCALER = { key: "ToBeDeletedByClusterAutoscaler", effect: "NoSchedule" };

const CONFIG: LifecycleConfig = {
  watchAutoscalerTaint: true,
  protectedLabels: parseKeyValueList("keep"),
  protectedAnnotations: parseKeyValueList("example.com/hold", "annotation"),
  notReadyTimeoutMs: 5 * MINUTE,
  maxDeletionsPerMinute: 10,
  unhealthyThreshold: 0.55,
};

let uids = 0;
interface NodeSpec {
  ready?: "True" | "False" | "Unknown";
  notReadyForMs?: number;
  tainted?: boolean;
  address?: string;
  labels?: Record<string, string>;
}

/** A node as kubelet writes it: heartbeats, more conditions, capacity, images; most of it decides nothing. */
function kubeletNode(name: string, spec: NodeSpec = {}): Node {
  const ready = spec.ready ?? "Unknown";
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name,
      uid: `uid-${name}-${uids++}`,
      resourceVersion: String(1000 + uids),
      creationTimestamp: ago(60 * MINUTE),
      labels: { "kubernetes.io/hostname": name, ...spec.labels },
      annotations: { "node.alpha.kubernetes.io/ttl": "0", "example.com/hold-not": "x" },
      managedFields: [{ manager: "kubelet", operation: "Update", time: ago(MINUTE) }],
    },
    spec: {
      podCIDR: "10.244.1.0/24",
      taints: spec.tainted === false ? [] : [{ ...AUTOSCALER, value: "1767268800" }],
    },
    status: {
      addresses: [
        { type: "InternalIP", address: spec.address ?? "198.18.5.9" },
        { type: "Hostname", address: name },
      ],
      conditions: [
        {
          type: "MemoryPressure",
          status: "False",
          lastHeartbeatTime: ago(1000),
          lastTransitionTime: ago(MINUTE),
        },
        {
          type: "Ready",
          status: ready,
          reason: "KubeletNotReady",
          message: "container runtime is down",
          lastHeartbeatTime: ago(1000),
          lastTransitionTime: ago(spec.notReadyForMs ?? 10 * MINUTE),
        },
      ],
      capacity: { cpu: "4", memory: "8Gi" },
      images: [{ names: ["registry.example/app:v1"], sizeBytes: 123456789 }],
    },
  };
}

/** Ready nodes outside the filter, so that the guard sees a healthy cluster. */
const healthy = (count: number) =>
  Array.from({ length: count }, (_, i) => kubeletNode(`healthy-${i}`, { ready: "True", tainted: false }));

const UNREACHABLE: ProbeResult = { alive: false, detail: "unreachable: no answer" };
const REACHABLE: ProbeResult = { alive: true, detail: "reachable: icmp answered" };

interface Harness {
  controller: Controller;
  /** The API's objects (full), by name; the cache shows them trimmed. */
  api: Map<string, Node>;
  deletes: { name: string; preconditions?: Preconditions }[];
  gets: string[];
  probes: string[][];
  events: { name?: string; type: string; reason: string; message: string }[];
  logs: string[];
  registry: Registry;
  leader: { value: boolean };
  metric(name: string): number;
}

function harness(
  nodes: Node[],
  options: Partial<ControllerOptions> & {
    probeResult?: (addresses: string[]) => ProbeResult | Promise<ProbeResult>;
    onDelete?: (name: string) => void;
  } = {},
): Harness {
  const api = new Map(nodes.map((node) => [node.metadata?.name as string, node]));
  const config = options.config ?? CONFIG;
  const trim = nodeTransform(config);
  const registry = new Registry();
  const h: Omit<Harness, "controller"> = {
    api,
    deletes: [],
    gets: [],
    probes: [],
    events: [],
    logs: [],
    registry,
    leader: { value: true },
    metric(series) {
      const line = registry
        .expose()
        .split("\n")
        .find((l) => l.startsWith(`${series} `));
      return line ? Number(line.split(" ")[1]) : 0;
    },
  };
  const controller = new Controller({
    config,
    reconcileIntervalMs: 3_600_000,
    dryRun: false,
    cache: {
      get: (name) => {
        const node = api.get(name);
        return node && trim(node);
      },
      list: () => [...api.values()].map(trim),
    },
    nodes: {
      get: async (name) => {
        h.gets.push(name);
        const node = api.get(name);
        if (!node) throw new ApiError(404, undefined, `get ${name}`);
        return structuredClone(node);
      },
      delete: async (name, deleteOptions = {}) => {
        h.deletes.push({ name, preconditions: deleteOptions.preconditions });
        options.onDelete?.(name);
        const node = api.get(name);
        if (!node) throw new ApiError(404, undefined, `delete ${name}`);
        const { uid, resourceVersion } = deleteOptions.preconditions ?? {};
        if (uid !== node.metadata?.uid || resourceVersion !== node.metadata?.resourceVersion)
          throw new ApiError(409, { reason: "Conflict" }, `delete ${name}`);
        api.delete(name);
        return { status: "Success" };
      },
    },
    probe: async (addresses) => {
      h.probes.push(addresses);
      return (options.probeResult ?? (() => UNREACHABLE))(addresses);
    },
    isLeader: () => h.leader.value,
    events: {
      record: (object, type, reason, message) => h.events.push({ name: object.name, type, reason, message }),
    },
    log: createLogger({ verbosity: 2, format: "text", write: (line) => h.logs.push(line) }),
    metrics: createNodeLifecycleMetrics(registry, "node_lifecycle_controller_"),
    now: () => NOW,
    // Retries at once (a test waits for them, not for a delay).
    retryBackoff: { baseMs: 1, capMs: 1 },
    ...options,
  });
  running.push(controller);
  return { ...h, controller };
}

const running: Controller[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((controller) => controller.stop()));
});

/** Runs passes (the first by start(), later ones by trigger()) and lets every sync they queued finish. */
async function settle(h: Harness, passes = 1): Promise<void> {
  for (let i = 0; i < passes; i++) {
    if (started.has(h.controller)) h.controller.trigger();
    else start(h);
    await h.controller.idle();
  }
}

const started = new WeakSet<Controller>();
function start(h: Harness): void {
  started.add(h.controller);
  h.controller.start();
}

test("probe addresses: InternalIP and ExternalIP of both families, once each; never names", () => {
  const node: Node = {
    status: {
      addresses: [
        { type: "Hostname", address: "n1" },
        { type: "InternalIP", address: "198.18.0.1" },
        { type: "InternalIP", address: "fd00:198:18::1" },
        { type: "ExternalIP", address: "198.18.0.1" },
        { type: "ExternalIP", address: "198.19.0.1" },
        { type: "InternalDNS", address: "n1.internal" },
      ],
    },
  };
  assert.deepEqual(probeAddresses(node), ["198.18.0.1", "fd00:198:18::1", "198.19.0.1"]);
  assert.deepEqual(probeAddresses({}), []);
});

test("the cache keeps only what decisions read, and decides exactly as the full object would", () => {
  const trim = nodeTransform(CONFIG);
  const full = kubeletNode("n1", { labels: { keep: "" } });
  const trimmed = trim(full);
  assert.deepEqual(trimmed, {
    metadata: {
      name: "n1",
      uid: full.metadata?.uid,
      resourceVersion: full.metadata?.resourceVersion,
      labels: { "kubernetes.io/hostname": "n1", keep: "" },
      annotations: {},
      creationTimestamp: full.metadata?.creationTimestamp,
    },
    spec: { taints: [AUTOSCALER] },
    status: {
      conditions: [{ type: "Ready", status: "Unknown", lastTransitionTime: ago(10 * MINUTE) }],
      addresses: [
        { type: "InternalIP", address: "198.18.5.9" },
        { type: "Hostname", address: "n1" },
      ],
    },
  });
  // A protected annotation is kept; others are not.
  const held = kubeletNode("n2");
  (held.metadata as { annotations: Record<string, string> }).annotations["example.com/hold"] = "yes";
  assert.deepEqual(trim(held).metadata?.annotations, { "example.com/hold": "yes" });

  const variants: Node[] = [
    full,
    held,
    kubeletNode("a"),
    kubeletNode("b", { ready: "True" }),
    kubeletNode("c", { notReadyForMs: MINUTE }),
    kubeletNode("d", { tainted: false }),
    { ...kubeletNode("e"), status: { addresses: [{ type: "InternalIP", address: "198.18.0.5" }] } },
    { ...kubeletNode("f"), metadata: { ...kubeletNode("f").metadata, deletionTimestamp: ago(0) } },
  ];
  const configs: LifecycleConfig[] = [
    CONFIG,
    { ...CONFIG, watchAutoscalerTaint: false },
    { ...CONFIG, nodeSelector: parseLabelSelector("kubernetes.io/hostname in (a,c)") },
  ];
  const health = { considered: 10, notReady: 1, paused: false, reason: "ok" };
  for (const config of configs) {
    for (const node of variants) {
      for (const probe of [undefined, UNREACHABLE, REACHABLE]) {
        const context = { health, deletionTimes: [], ...(probe ? { probe } : {}) };
        assert.deepEqual(
          decide(nodeTransform(config)(node), NOW, config, context),
          decide(node, NOW, config, context),
          `${node.metadata?.name} ${JSON.stringify(config.nodeSelector?.text)} ${probe?.detail}`,
        );
      }
    }
  }
});

test("a heartbeat or a new resourceVersion alone is no change; a Ready flip, a label or a taint is", () => {
  const trim = nodeTransform(CONFIG);
  const before = kubeletNode("n1");
  const after = structuredClone(before);
  (after.metadata as { resourceVersion: string }).resourceVersion = "999999";
  for (const condition of after.status?.conditions ?? []) condition.lastHeartbeatTime = ago(0);
  assert.equal(decisionInputsChanged(trim(before), trim(after)), false);

  const flipped = structuredClone(after);
  const ready = flipped.status?.conditions?.find((c) => c.type === "Ready");
  Object.assign(ready ?? {}, { status: "True", lastTransitionTime: ago(0) });
  assert.equal(decisionInputsChanged(trim(before), trim(flipped)), true);
  const labelled = structuredClone(after);
  (labelled.metadata as { labels: Record<string, string> }).labels.keep = "";
  assert.equal(decisionInputsChanged(trim(before), trim(labelled)), true);
  const untainted = structuredClone(after);
  (untainted.spec as { taints: unknown[] }).taints = [];
  assert.equal(decisionInputsChanged(trim(before), trim(untainted)), true);
});

test("only the expired, watched, unreachable node is deleted, with preconditions", async () => {
  const dead = kubeletNode("dead", { address: "198.18.5.1" });
  const alive = kubeletNode("alive", { address: "198.18.5.2" });
  const nodes = [
    dead,
    alive,
    kubeletNode("recent", { notReadyForMs: MINUTE }),
    kubeletNode("ready", { ready: "True" }),
    kubeletNode("untainted", { tainted: false }),
    kubeletNode("kept", { labels: { keep: "" } }),
    ...healthy(4),
  ];
  const h = harness(nodes, {
    probeResult: (addresses) => (addresses.includes("198.18.5.2") ? REACHABLE : UNREACHABLE),
  });
  await settle(h);
  assert.deepEqual(h.probes.sort(), [["198.18.5.1"], ["198.18.5.2"]]);
  assert.deepEqual(h.gets.sort(), ["alive", "dead"]);
  assert.deepEqual(h.deletes, [
    {
      name: "dead",
      preconditions: { uid: dead.metadata?.uid, resourceVersion: dead.metadata?.resourceVersion },
    },
  ]);
  assert.deepEqual(
    h.events.map((e) => [e.name, e.type, e.reason, e.message]).sort(),
    [
      ["alive", "Normal", "DeletionSkipped", "reachable: icmp answered"],
      ["kept", "Normal", "DeletionSkipped", "protected by label keep (NotReady for 10m0s, timeout 5m0s)"],
      [
        "dead",
        "Normal",
        "DeletingNode",
        "Deleting node: NotReady for 10m0s, timeout 5m0s; unreachable: no answer",
      ],
    ].sort(),
  );
  assert.equal(h.metric('node_lifecycle_controller_deletions_total{result="deleted"}'), 1);
  assert.equal(h.metric('node_lifecycle_controller_probes_total{result="alive"}'), 1);
  assert.equal(h.metric('node_lifecycle_controller_skipped_total{class="reachable"}'), 1);
  assert.equal(h.metric('node_lifecycle_controller_skipped_total{class="not-expired"}'), 1);
  assert.equal(h.metric('node_lifecycle_controller_skipped_total{class="protected"}'), 1);
  assert.equal(h.metric('node_lifecycle_controller_skipped_total{class="unwatched"}'), 0, "not even decided");

  // The reachable node is probed again each pass, but evented only once; healthy nodes never.
  await settle(h, 3);
  assert.equal(h.probes.length, 5);
  assert.equal(h.events.filter((e) => e.name === "alive").length, 1);
  assert.equal(h.events.filter((e) => e.name === "kept").length, 1, "a protected node is evented once, not every pass");
  assert.equal(h.metric("node_lifecycle_controller_reconciles_total"), 4);
});

test("a protected node is evented when it would otherwise be deleted: once, and again after it came back and died", async () => {
  const kept = () => kubeletNode("kept", { labels: { keep: "" } });
  const h = harness([kept(), ...healthy(4)]);
  await settle(h, 3);
  assert.deepEqual(h.probes, [], "never probed");
  const skipped = ["kept", "Normal", "DeletionSkipped", "protected by label keep (NotReady for 10m0s, timeout 5m0s)"];
  assert.deepEqual(h.events.map((e) => [e.name, e.type, e.reason, e.message]), [skipped]);
  assert.equal(h.metric('node_lifecycle_controller_skipped_total{class="protected"}'), 3);

  // Ready: no longer kept by its protection (and not counted as such); NotReady past the timeout again: news again.
  h.api.set("kept", kubeletNode("kept", { labels: { keep: "" }, ready: "True" }));
  await settle(h);
  assert.equal(h.metric('node_lifecycle_controller_skipped_total{class="protected"}'), 3);
  h.api.set("kept", kept());
  await settle(h, 2);
  assert.deepEqual(h.events.map((e) => [e.name, e.type, e.reason, e.message]), [skipped, skipped]);
  assert.deepEqual(h.deletes, []);
});

test("Nodes sharing a providerID: a Warning on each once, a gauge, a log line; followers only count", async () => {
  const CLONED = "local://4c4c4544-0042-3510-8052-b4c04f384e32";
  const withID = (node: Node, providerID: string): Node => ({ ...node, spec: { ...node.spec, providerID } });
  const nodes = [
    withID(kubeletNode("w1", { ready: "True", tainted: false }), CLONED),
    withID(kubeletNode("w2", { ready: "True", tainted: false }), CLONED),
    withID(kubeletNode("w3", { ready: "True", tainted: false }), "local://other"),
    kubeletNode("w4", { ready: "True", tainted: false }),
  ];
  const h = harness(nodes);
  h.leader.value = false;
  await settle(h, 2);
  assert.equal(h.metric("node_lifecycle_controller_nodes_sharing_provider_id"), 2);
  assert.equal(h.events.length, 0, "a follower's Events would repeat the leader's");

  h.leader.value = true;
  await settle(h, 3);
  const reason =
    `spec.providerID ${CLONED} is shared by 2 Nodes (w1, w2); tools that find a node by its providerID ` +
    "(cluster-autoscaler, cloud controllers) may act on the wrong one: give each machine its own";
  assert.deepEqual(
    h.events.map((e) => [e.name, e.type, e.reason, e.message]),
    [
      ["w1", "Warning", "DuplicateProviderID", reason],
      ["w2", "Warning", "DuplicateProviderID", reason],
    ],
  );
  assert.equal(h.logs.filter((l) => /^W.*nodes share a providerID/.test(l)).length, 1);
  assert.match(h.logs.find((l) => l.includes("nodes share a providerID")) ?? "", / providerID=local:\/\/4c4c\S+ nodes=w1,w2$/);

  // A third clone joins: only it is news; the others are not evented again.
  h.api.set("w4", withID(kubeletNode("w4", { ready: "True", tainted: false }), CLONED));
  await settle(h, 2);
  assert.equal(h.metric("node_lifecycle_controller_nodes_sharing_provider_id"), 3);
  assert.deepEqual(h.events.slice(2).map((e) => [e.name, e.reason]), [["w4", "DuplicateProviderID"]]);
  assert.match(h.events[2]?.message ?? "", /is shared by 3 Nodes \(w1, w2, w4\)/);

  // Two leave: nothing shared any more.
  h.api.delete("w1");
  h.api.delete("w2");
  await settle(h);
  assert.equal(h.metric("node_lifecycle_controller_nodes_sharing_provider_id"), 0);
  assert.equal(h.events.length, 3);
});

test("the DELETE's preconditions are the fresh copy's, not the cache's", async () => {
  const cached = kubeletNode("n1");
  const trimmed = nodeTransform(CONFIG)(cached);
  const h = harness([cached], { cache: { get: () => trimmed, list: () => [trimmed] } });
  const moved = structuredClone(cached);
  (moved.metadata as { resourceVersion: string }).resourceVersion = "5000"; // e.g. a status update since
  h.api.set("n1", moved);
  await settle(h);
  assert.deepEqual(h.deletes, [
    { name: "n1", preconditions: { uid: cached.metadata?.uid, resourceVersion: "5000" } },
  ]);
});

test("a node it deleted is not probed again while the cache still shows it", async () => {
  const dead = kubeletNode("n1");
  const trimmed = nodeTransform(CONFIG)(dead);
  let cached: Node | undefined = trimmed; // the watch's DELETED event is on its way
  const h = harness([dead], { cache: { get: () => cached, list: () => (cached ? [cached] : []) } });
  await settle(h, 3);
  assert.deepEqual([h.probes.length, h.deletes.length], [1, 1]);
  cached = undefined; // the event arrives, then the machine registers again under the name
  await settle(h);
  const reborn = kubeletNode("n1");
  h.api.set("n1", reborn);
  cached = nodeTransform(CONFIG)(reborn);
  await settle(h);
  assert.deepEqual([h.probes.length, h.deletes.length], [2, 2], "the new object is decided as any other");
});

test("the fresh copy is decided again: a node now Ready, or another object, is not deleted", async () => {
  const recovered = kubeletNode("recovered");
  const replaced = kubeletNode("replaced");
  const h = harness([recovered, replaced], {
    probeResult: () => {
      // While the probes run, one node comes back and the other re-registers under its name.
      const ready = structuredClone(recovered);
      Object.assign(ready.status?.conditions?.[1] ?? {}, { status: "True", lastTransitionTime: ago(0) });
      h.api.set("recovered", ready);
      h.api.set("replaced", kubeletNode("replaced"));
      return UNREACHABLE;
    },
  });
  await settle(h);
  assert.deepEqual(h.deletes, []);
  const messages = Object.fromEntries(h.events.map((e) => [e.name, `${e.reason}: ${e.message}`]));
  assert.deepEqual(messages, {
    recovered: "DeletionSkipped: Ready",
    replaced: "DeletionSkipped: changed while it was probed (uid or addresses)",
  });
  assert.equal(h.metric('node_lifecycle_controller_skipped_total{class="changed"}'), 1);
});

test("a node re-registered between the check and the DELETE survives: the preconditions refuse", async () => {
  const h = harness([kubeletNode("n1")], {
    onDelete: (name) => h.api.set(name, kubeletNode(name)), // new uid, just before the DELETE lands
  });
  await settle(h);
  assert.equal(h.deletes.length, 1);
  assert.ok(h.api.has("n1"));
  assert.equal(h.metric('node_lifecycle_controller_deletions_total{result="changed"}'), 1);
  assert.match(h.events[0]?.message ?? "", /changed since it was checked/);
});

test("only the leader probes, and leadership is checked again right before the DELETE", async () => {
  const h = harness([kubeletNode("n1")]);
  h.leader.value = false;
  await settle(h, 2);
  assert.deepEqual([h.probes.length, h.gets.length, h.deletes.length], [0, 0, 0]);
  assert.equal(h.metric("node_lifecycle_controller_reconciles_total"), 2, "followers still reconcile health");

  let calls = 0;
  const lost = harness([kubeletNode("n1")], {
    isLeader: () => ++calls < 3, // the sync, after the probe: leader; at the DELETE: not
  });
  await settle(lost);
  assert.equal(lost.gets.length, 1);
  assert.deepEqual(lost.deletes, []);
  assert.equal(calls, 3);
});

test("probes run concurrently but at most 10 at once, and never twice at once for one node", async () => {
  const nodes = [
    ...Array.from({ length: 25 }, (_, i) => kubeletNode(`n${i}`, { address: `198.18.6.${i}` })),
    ...healthy(25),
  ];
  const pending: (() => void)[] = [];
  const inFlight = new Set<string>();
  const twice: string[] = [];
  let most = 0;
  const h = harness(nodes, {
    probeResult: ([address = ""]) =>
      new Promise<ProbeResult>((resolve) => {
        if (inFlight.has(address)) twice.push(address);
        inFlight.add(address);
        most = Math.max(most, inFlight.size);
        pending.push(() => {
          inFlight.delete(address);
          resolve(REACHABLE);
        });
      }),
  });
  start(h);
  await waitFor("10 probes to start", () => pending.length === 10);
  // Two more passes while they run: a node being probed is synced once more after, the others once.
  h.controller.trigger();
  h.controller.trigger();
  for (let released = 0; released < 35; released++) {
    await waitFor(`probe ${released + 1}`, () => pending.length > 0);
    pending.shift()?.();
  }
  await h.controller.idle();
  assert.deepEqual([most, twice, pending.length], [10, [], 0]);
  assert.equal(h.probes.length, 35);
  assert.equal(new Set(h.probes.map((a) => a[0])).size, 25);
});

test("the rate limit holds across concurrent checks, and a refused DELETE gives its slot back", async () => {
  let refused = false;
  const h = harness([kubeletNode("n0"), kubeletNode("n1")], {
    config: { ...CONFIG, maxDeletionsPerMinute: 1 },
    onDelete: (name) => {
      if (!refused) h.api.set(name, kubeletNode(name)); // the first DELETE meets a re-registered node
      refused = true;
    },
  });
  await settle(h);
  assert.equal(h.deletes.length, 1, "the other check found the slot taken");
  assert.equal(h.api.size, 2);
  await settle(h);
  assert.equal(h.api.size, 1, "the refused DELETE gave its slot back");
  const [probes, events] = [h.probes.length, h.events.length];
  await settle(h, 2);
  assert.equal(h.api.size, 1);
  assert.equal(h.probes.length, probes, "the limit holds nodes back before any probe");
  assert.equal(h.events.length, events, "and their event is not repeated");
  assert.ok(
    h.events.some((e) => e.reason === "DeletionSkipped" && e.message.startsWith("rate limit: 1 deletions")),
  );
  assert.equal(h.metric('node_lifecycle_controller_deletions_total{result="changed"}'), 1);
  assert.equal(h.metric('node_lifecycle_controller_deletions_total{result="deleted"}'), 1);
});

test("the guard pauses deletions with an event per held node, a gauge and a log line", async () => {
  const trim = nodeTransform(CONFIG);
  const h = harness([
    kubeletNode("dead"),
    kubeletNode("w1", { tainted: false }),
    kubeletNode("w2", { tainted: false }),
    kubeletNode("w3", { ready: "True", tainted: false }),
  ]);
  await settle(h, 3);
  assert.deepEqual([h.probes.length, h.deletes.length], [0, 0]);
  assert.equal(h.metric("node_lifecycle_controller_deletions_paused"), 1);
  assert.deepEqual(h.events, [
    {
      name: "dead",
      type: "Warning",
      reason: "DeletionsPaused",
      message: "deletions paused: 3 of 4 nodes NotReady (≥ 55%)",
    },
  ]);
  assert.equal(h.logs.filter((l) => /^W.*mass-deletion guard state="deletions paused/.test(l)).length, 1);

  // Only w1's own event: the guard's new verdict queues every node.
  const w1 = h.api.get("w1") as Node;
  h.api.set("w1", kubeletNode("w1", { ready: "True", tainted: false }));
  h.controller.handlers.onUpdate?.(trim(w1), trim(h.api.get("w1") as Node));
  await waitFor("the held node deleted", () => h.deletes.length === 1);
  assert.equal(h.metric("node_lifecycle_controller_deletions_paused"), 0);
  assert.deepEqual(h.deletes.map((d) => d.name), ["dead"]);
  assert.ok(h.logs.some((l) => /^I.*mass-deletion guard state="deletions allowed/.test(l)));
});

test("dry-run: never a DELETE; one 'would delete' event and log line per node", async () => {
  const h = harness([kubeletNode("n1")], { dryRun: true });
  await settle(h, 3);
  assert.deepEqual(h.deletes, []);
  assert.equal(h.probes.length, 3);
  assert.deepEqual(
    h.events.map((e) => [e.reason, e.message]),
    [["WouldDeleteNode", "would delete (dry run): NotReady for 10m0s, timeout 5m0s; unreachable: no answer"]],
  );
  assert.equal(h.logs.filter((l) => l.includes("would delete node (dry run)")).length, 1);
  assert.equal(h.metric('node_lifecycle_controller_deletions_total{result="dry-run"}'), 3);
});

test("ICMP unavailable is logged once, as a warning; TCP's answer still decides", async () => {
  const nodes = [...Array.from({ length: 3 }, (_, i) => kubeletNode(`n${i}`)), ...healthy(3)];
  const h = harness(nodes, {
    probeResult: () => ({ alive: true, icmpUnavailable: true, detail: "reachable: tcp answered" }),
  });
  await settle(h, 2);
  assert.equal(h.logs.filter((l) => l.includes("ICMP probes unavailable")).length, 1);
  assert.match(h.logs.find((l) => l.includes("ICMP probes unavailable")) ?? "", /^W/);
  assert.deepEqual(h.deletes, []);
});

test("a visible change queues its node, a heartbeat none; a NotReady node is decided at its expiry", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "setInterval", "Date"], now: NOW });
  const node = kubeletNode("n1", { ready: "True" });
  const h = harness([node, ...healthy(3)], { reconcileIntervalMs: 30 * MINUTE, now: () => new Date() });
  const trim = nodeTransform(CONFIG);
  const skipped = (rule: string) => h.metric(`node_lifecycle_controller_skipped_total{class="${rule}"}`);
  h.controller.handlers.onAdd?.(trim(node)); // before start (the initial list): start()'s pass takes it in
  h.controller.trigger(); // nor a pass: the guard is never computed over a cache still filling
  await h.controller.idle();
  assert.equal(skipped("ready"), 0);
  h.controller.start();
  await h.controller.idle();
  assert.equal(skipped("ready"), 1);

  const heartbeat = structuredClone(node);
  (heartbeat.metadata as { resourceVersion: string }).resourceVersion = "77777";
  h.api.set("n1", heartbeat);
  h.controller.handlers.onUpdate?.(trim(node), trim(heartbeat));
  await h.controller.idle();
  assert.equal(skipped("ready"), 1, "a heartbeat decides nothing");

  // Its kubelet stops: decided at once (not expired), then at its expiry and not a millisecond before.
  const notReady = kubeletNode("n1", { notReadyForMs: 0 });
  h.api.set("n1", notReady);
  h.controller.handlers.onUpdate?.(trim(heartbeat), trim(notReady));
  await h.controller.idle();
  assert.equal(skipped("not-expired"), 1);
  t.mock.timers.tick(5 * MINUTE - 1);
  await h.controller.idle();
  assert.deepEqual(h.probes, []);
  t.mock.timers.tick(2);
  await h.controller.idle();
  assert.deepEqual(h.probes, [["198.18.5.9"]]);
  assert.deepEqual(h.deletes.map((d) => d.name), ["n1"]);

  const reconciles = () => h.metric("node_lifecycle_controller_reconciles_total");
  assert.equal(reconciles(), 1);
  h.api.set("n2", kubeletNode("n2", { ready: "True" })); // an event the informer missed
  t.mock.timers.tick(30 * MINUTE);
  await h.controller.idle();
  assert.equal(reconciles(), 2);
  assert.equal(skipped("ready"), 2, "the interval's pass queues every cached node");
  await h.controller.stop();
  h.controller.handlers.onAdd?.(trim(kubeletNode("n2")));
  t.mock.timers.tick(60 * MINUTE);
  await h.controller.idle();
  assert.equal(reconciles(), 2, "nothing after stop");
  assert.equal(h.probes.length, 1);
});

test("a probe that throws is retried with the queue's backoff, and logged with the node", async () => {
  let failures = 1;
  const h = harness([kubeletNode("n1"), ...healthy(3)], {
    probeResult: () => {
      if (failures-- > 0) throw new Error("socket exploded");
      return UNREACHABLE;
    },
  });
  start(h);
  await waitFor("the retry's DELETE", () => h.deletes.length === 1);
  assert.equal(h.probes.length, 2);
  assert.ok(
    h.logs.some((line) => /^E.* checking node failed node=n1 err="socket exploded" retryInMs=\d+$/.test(line)),
    h.logs.join("\n"),
  );
});

test("a refused DELETE gives its rate slot back and is retried; one that may have happened keeps it", async () => {
  const refused = new ApiError(403, { reason: "Forbidden", message: "policy says no" }, "delete nodes/n1");
  let refusals = 2;
  const h = harness([kubeletNode("n1"), ...healthy(3)], {
    config: { ...CONFIG, maxDeletionsPerMinute: 1 },
    onDelete: () => {
      if (refusals-- > 0) throw refused;
    },
  });
  start(h);
  await waitFor("deleted on the third attempt", () => !h.api.has("n1"));
  assert.equal(h.deletes.length, 3);
  assert.equal(h.metric('node_lifecycle_controller_deletions_total{result="error"}'), 2);
  assert.equal(h.events.filter((e) => e.reason === "DeletionFailed").length, 2);
  assert.match(h.events.find((e) => e.reason === "DeletionFailed")?.message ?? "", /Forbidden \(403\): policy says no/);

  // A 503 (or a timeout) may have deleted it: the slot stays taken, so the retry meets the rate limit.
  let unavailable = 1;
  const unsure = harness([kubeletNode("n1"), ...healthy(3)], {
    config: { ...CONFIG, maxDeletionsPerMinute: 1 },
    onDelete: () => {
      if (unavailable-- > 0) throw new ApiError(503, undefined, "delete nodes/n1");
    },
  });
  start(unsure);
  const limited = 'node_lifecycle_controller_skipped_total{class="rate-limited"}';
  await waitFor("the retry held by the rate limit", () => unsure.metric(limited) === 1);
  assert.equal(unsure.deletes.length, 1);
  assert.ok(unsure.api.has("n1"));
});
