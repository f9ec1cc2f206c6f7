import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import { parseLabelSelector } from "../kube/labelselector.ts";
import { UNINITIALIZED_TAINT } from "../kube/nodes.ts";
import {
  byAge,
  decide,
  type DecisionContext,
  type Intent,
  LB_FINALIZER,
  NODE_ADDRESS_CLASS,
  NODE_SELECTOR_ANNOTATION,
  planIngress,
  type ServiceConfig,
  type ServiceFacts,
  sameIngress,
  serviceFacts,
} from "./decide.ts";
import { parsePortRange, DEFAULT_RESERVED_PORTS } from "./flags.ts";
import { AUTOSCALER_TAINT, EXCLUDE_LABEL, type LoadBalancerNode, loadBalancerNode } from "./nodes.ts";

const CONFIG: ServiceConfig = {
  claimClassless: false,
  maxNodes: 16,
  reservedPorts: DEFAULT_RESERVED_PORTS.split(",").map(parsePortRange),
};

interface NodeSpec {
  ready?: string;
  external?: string[];
  internal?: string[];
  labels?: Record<string, string>;
  taints?: string[];
  deleting?: boolean;
  unschedulable?: boolean;
}

function nodeObject(name: string, spec: NodeSpec = {}): Node {
  const { ready = "True", external = [], internal = ["10.0.0.1"], labels = {}, taints = [] } = spec;
  return {
    metadata: { name, labels, ...(spec.deleting ? { deletionTimestamp: "2026-01-01T00:00:00Z" } : {}) },
    spec: { unschedulable: spec.unschedulable, taints: taints.map((key) => ({ key, effect: "NoSchedule" })) },
    status: {
      conditions: ready === "none" ? [] : [{ type: "Ready", status: ready }],
      addresses: [
        { type: "Hostname", address: name },
        ...external.map((address) => ({ type: "ExternalIP", address })),
        ...internal.map((address) => ({ type: "InternalIP", address })),
      ],
    },
  };
}

const node = (name: string, spec?: NodeSpec, config = CONFIG) => loadBalancerNode(nodeObject(name, spec), config.nodeSelector);

interface ServiceSpec {
  type?: string;
  lbClass?: string | null;
  ports?: [string, number][];
  local?: boolean;
  families?: string[];
  created?: string;
  annotation?: string;
  finalizer?: boolean;
  ingress?: string[];
  deleting?: boolean;
  uid?: string;
}

function service(name: string, spec: ServiceSpec = {}): ServiceFacts {
  const { type = "LoadBalancer", lbClass = NODE_ADDRESS_CLASS, ports = [["TCP", 80]] } = spec;
  const object: Service = {
    metadata: {
      namespace: "ns",
      name,
      uid: spec.uid ?? `uid-${name}`,
      creationTimestamp: spec.created ?? "2026-01-01T00:00:00Z",
      ...(spec.deleting ? { deletionTimestamp: "2026-01-02T00:00:00Z" } : {}),
      finalizers: spec.finalizer ? [LB_FINALIZER] : [],
      annotations: spec.annotation === undefined ? {} : { [NODE_SELECTOR_ANNOTATION]: spec.annotation },
    },
    spec: {
      type,
      ...(lbClass === null ? {} : { loadBalancerClass: lbClass }),
      externalTrafficPolicy: spec.local ? "Local" : "Cluster",
      ipFamilies: spec.families ?? ["IPv4"],
      ports: ports.map(([protocol, port]) => ({ protocol, port })),
    },
    status: { loadBalancer: { ingress: (spec.ingress ?? []).map((ip) => ({ ip, ipMode: "VIP" })) } },
  };
  return serviceFacts(object);
}

function plan(
  services: ServiceFacts[],
  nodes: LoadBalancerNode[],
  options: { config?: ServiceConfig; ready?: (service: string) => string[] } = {},
): Map<string, Intent> {
  return planIngress({
    services,
    nodes: nodes.filter((each) => !each.ineligible),
    readyNodes: (key) => options.ready?.(key) ?? [],
    config: options.config ?? CONFIG,
  });
}

const ips = (intent: Intent | undefined) => (intent?.action === "ensure" ? intent.ingress.map(({ ip }) => ip) : intent);

describe("loadBalancerNode: which nodes carry LoadBalancer traffic, by rule", () => {
  const EDGE_ONLY = { ...CONFIG, nodeSelector: parseLabelSelector("edge") };
  const cases: [string, NodeSpec, string | undefined, ServiceConfig?][] = [
    ["Ready", {}, undefined],
    ["cordoned stays (KEP-3836)", { unschedulable: true }, undefined],
    ["NotReady", { ready: "False" }, "not-ready"],
    ["Ready Unknown", { ready: "Unknown" }, "not-ready"],
    ["no Ready condition", { ready: "none" }, "not-ready"],
    ["being deleted", { deleting: true }, "deleting"],
    ["uninitialized", { taints: [UNINITIALIZED_TAINT] }, "uninitialized"],
    ["to be deleted by the autoscaler", { taints: [AUTOSCALER_TAINT] }, "autoscaler"],
    ["other taints stay", { taints: ["node.kubernetes.io/unschedulable"] }, undefined],
    ["exclusion label true", { labels: { [EXCLUDE_LABEL]: "true" } }, "excluded"],
    ["exclusion label True", { labels: { [EXCLUDE_LABEL]: "True" } }, "excluded"],
    ["exclusion label 1", { labels: { [EXCLUDE_LABEL]: "1" } }, "excluded"],
    ["exclusion label empty (ParseBool fails)", { labels: { [EXCLUDE_LABEL]: "" } }, "excluded"],
    ["exclusion label yes (ParseBool fails)", { labels: { [EXCLUDE_LABEL]: "yes" } }, "excluded"],
    ["exclusion label false", { labels: { [EXCLUDE_LABEL]: "false" } }, undefined],
    ["exclusion label F", { labels: { [EXCLUDE_LABEL]: "F" } }, undefined],
    ["exclusion label 0", { labels: { [EXCLUDE_LABEL]: "0" } }, undefined],
    ["outside --lb-node-selector", { labels: {} }, "node-selector", EDGE_ONLY],
    ["inside --lb-node-selector", { labels: { edge: "" } }, undefined, EDGE_ONLY],
  ];
  for (const [what, spec, rule, config] of cases)
    test(what, () => assert.equal(node("n1", spec, config).ineligible?.rule, rule));

  test("the first ExternalIP and InternalIP of each family, canonical; names and other types left out", () => {
    const facts = loadBalancerNode(
      {
        metadata: { name: "n1" },
        status: {
          addresses: [
            { type: "InternalDNS", address: "n1.internal" },
            { type: "ExternalIP", address: "not-an-ip" },
            { type: "ExternalIP", address: "2001:DB8::0:1" },
            { type: "InternalIP", address: "10.0.0.1" },
            { type: "InternalIP", address: "10.0.0.2" },
            { type: "ExternalIP", address: "192.0.2.1" },
          ],
        },
      },
      undefined,
    );
    assert.deepEqual(facts.ips, {
      IPv4: { InternalIP: "10.0.0.1", ExternalIP: "192.0.2.1" },
      IPv6: { ExternalIP: "2001:db8::1" },
    });
  });
});

describe("decide: whose Service, and release", () => {
  const context = (intent?: Intent, extra: Partial<DecisionContext> = {}): DecisionContext => ({
    config: CONFIG,
    intent,
    held: false,
    isNodeAddress: (ip) => ip.startsWith("10."),
    ...extra,
  });
  const ensure: Intent = { action: "ensure", rule: "ensured", ingress: [], nodes: [], missingFamilies: [], reason: "" };
  const claimAll = { config: { ...CONFIG, claimClassless: true } };
  const held = { finalizer: true, lbClass: null };
  const retyped = { ...held, type: "ClusterIP" };
  const cases: [string, ServiceSpec, Partial<DecisionContext>, string, string][] = [
    ["ClusterIP", { type: "ClusterIP", lbClass: null }, {}, "ignore", "type"],
    ["another class, even with the finalizer", { lbClass: "other.io/lb", finalizer: true }, {}, "ignore", "class"],
    ["class-less, not claimed", { lbClass: null }, {}, "ignore", "classless"],
    ["class-less, claimed", { lbClass: null }, claimAll, "ensure", "ensured"],
    ["ours", {}, {}, "ensure", "ensured"],
    ["ours, being deleted", { deleting: true, finalizer: true }, {}, "release", "deleted"],
    ["type changed, held by this process", retyped, { held: true }, "release", "not-load-balancer"],
    ["type changed, class-less claimed", { ...retyped, type: "NodePort" }, claimAll, "release", "not-load-balancer"],
    ["type changed, not known ours", retyped, {}, "ignore", "type"],
    ["class-less, not claimed now, node addresses", { ...held, ingress: ["10.0.0.1"] }, {}, "release", "classless-off"],
    ["class-less, not claimed now, other addresses", { ...held, ingress: ["192.0.2.7"] }, {}, "ignore", "classless"],
    ["class-less, no longer claimed, empty status (whose?)", held, {}, "ignore", "classless"],
  ];
  for (const [what, spec, extra, action, rule] of cases)
    test(what, () => {
      const decision = decide(service("a", spec), context(ensure, extra));
      assert.deepEqual([decision.action, decision.rule], [action, rule]);
    });

  test("a planned Service missing from the plan is a bug, not an empty ingress", () => {
    assert.throws(() => decide(service("a"), context(undefined)), /not in the plan/);
  });
});

describe("planIngress: addresses", () => {
  test("ExternalIPs where a candidate has one; InternalIPs per family where none has; spec.ipFamilies order", () => {
    const nodes = [
      node("n1", { external: ["192.0.2.1"], internal: ["10.0.0.1", "fd00::1"] }),
      node("n2", { internal: ["10.0.0.2", "fd00::2"] }),
    ];
    const result = plan([service("a", { families: ["IPv6", "IPv4"] })], nodes);
    assert.deepEqual(ips(result.get("ns/a")), ["fd00::1", "fd00::2", "192.0.2.1"]);
    const intent = result.get("ns/a");
    assert.equal(intent?.action === "ensure" && intent.ingress.every(({ ipMode }) => ipMode === "VIP"), true);
  });

  test("a family no node has is left out, and said so", () => {
    const result = plan([service("a", { families: ["IPv4", "IPv6"] })], [node("n1", { internal: ["10.0.0.1"] })]);
    const intent = result.get("ns/a");
    assert.deepEqual(intent?.action === "ensure" && [intent.rule, intent.missingFamilies], ["ensured", ["IPv6"]]);
  });

  test("addresses sorted numerically, so an unchanged set is the same list", () => {
    const nodes = ["10.0.0.10", "10.0.0.9", "10.0.0.100"].map((ip, i) => node(`n${i}`, { internal: [ip] }));
    assert.deepEqual(ips(plan([service("a")], nodes).get("ns/a")), ["10.0.0.9", "10.0.0.10", "10.0.0.100"]);
  });

  test("ineligible nodes and other nodes' labels: only eligible nodes matching the annotation", () => {
    const nodes = [
      node("n1", { internal: ["10.0.0.1"], labels: { zone: "a" } }),
      node("n2", { internal: ["10.0.0.2"], labels: { zone: "b" } }),
      node("n3", { internal: ["10.0.0.3"], labels: { zone: "a" }, ready: "False" }),
    ];
    assert.deepEqual(ips(plan([service("a", { annotation: "zone=a" })], nodes).get("ns/a")), ["10.0.0.1"]);
  });

  test("at most --lb-max-nodes nodes", () => {
    const nodes = Array.from({ length: 40 }, (_, i) => node(`n${i}`, { internal: [`10.0.1.${i}`] }));
    const intent = plan([service("a")], nodes, { config: { ...CONFIG, maxNodes: 3 } }).get("ns/a");
    assert.equal(intent?.action === "ensure" && intent.nodes.length, 3);
  });

  test("Local: only eligible nodes with a ready endpoint of the Service", () => {
    const nodes = [
      node("n1", { internal: ["10.0.0.1"] }),
      node("n2", { internal: ["10.0.0.2"] }),
      node("n3", { ready: "False" }),
    ];
    const result = plan([service("a", { local: true })], nodes, { ready: () => ["n2", "n3", "gone"] });
    assert.deepEqual(ips(result.get("ns/a")), ["10.0.0.2"]);
  });

  test("Local with no ready endpoint anywhere yet: every eligible node, as Cluster", () => {
    const nodes = [node("n1", { internal: ["10.0.0.1"] }), node("n2", { internal: ["10.0.0.2"] })];
    const result = plan([service("a", { local: true })], nodes, { ready: () => [] });
    assert.deepEqual(ips(result.get("ns/a")), ["10.0.0.1", "10.0.0.2"]);
  });

  test("Local whose ready endpoints are only on ineligible nodes: an empty ingress, rule no-nodes", () => {
    const nodes = [node("n1", { internal: ["10.0.0.1"] }), node("n3", { ready: "False" })];
    const intent = plan([service("a", { local: true })], nodes, { ready: () => ["n3"] }).get("ns/a");
    assert.deepEqual(intent?.action === "ensure" && [intent.rule, intent.ingress], ["no-nodes", []]);
  });

  test("no node: an empty ingress, rule no-nodes", () => {
    const intent = plan([service("a")], [node("n1", { ready: "False" })]).get("ns/a");
    assert.deepEqual(intent?.action === "ensure" && [intent.rule, intent.ingress], ["no-nodes", []]);
  });

  test("Services not ours, or being deleted, are not planned", () => {
    const result = plan(
      [service("a", { lbClass: "other.io/lb" }), service("b", { lbClass: null }), service("c", { deleting: true })],
      [node("n1")],
    );
    assert.equal(result.size, 0);
  });
});

describe("planIngress: refusals", () => {
  const nodes = [node("n1", { internal: ["10.0.0.1"] })];
  const refusal = (intent: Intent | undefined) => (intent?.action === "refuse" ? [intent.rule, intent.reason] : intent);

  for (const port of [22, 2379, 2380, 6443, 10250, 10256, 10263, 10266])
    test(`reserved port ${port}`, () => {
      const intent = plan([service("a", { ports: [["TCP", 80], ["UDP", port]] })], nodes).get("ns/a");
      assert.equal(intent?.action === "refuse" && intent.rule, "reserved-port");
    });

  test("the reason names the port and the range", () => {
    assert.deepEqual(refusal(plan([service("a", { ports: [["TCP", 2380]] })], nodes).get("ns/a")), [
      "reserved-port",
      "port TCP/2380 is one the nodes serve themselves (reserved: 2379-2380)",
    ]);
  });

  test("an invalid node selector annotation", () => {
    const [rule, reason] = refusal(plan([service("a", { annotation: "a in (" })], nodes).get("ns/a")) as string[];
    assert.equal(rule, "node-selector");
    assert.match(reason as string, /^annotation local-ccm\.io\/node-selector: invalid label selector "a in \("/);
  });

  test("the same protocol/port on the same address: the older holds it, the newer is told which Service", () => {
    const older = service("new-name", { created: "2026-01-01T00:00:00Z" });
    const newer = service("a-name", { created: "2026-01-02T00:00:00Z" });
    const result = plan([newer, older], nodes);
    assert.deepEqual(ips(result.get("ns/new-name")), ["10.0.0.1"]);
    assert.deepEqual(refusal(result.get("ns/a-name")), [
      "port-conflict",
      "TCP/80 on 10.0.0.1 is held by the older Service ns/new-name",
    ]);
  });

  test("created in the same second: the key decides, whatever the input order", () => {
    const [a, b] = [service("a"), service("b")];
    for (const order of [[a, b], [b, a]]) assert.equal(plan(order, nodes).get("ns/b")?.action, "refuse");
  });

  test("another protocol or port on the same address is no conflict", () => {
    const services = [service("a"), service("b", { ports: [["UDP", 80]] }), service("c", { ports: [["TCP", 81]] })];
    const result = plan(services, nodes);
    assert.deepEqual([...result.values()].map(({ action }) => action), ["ensure", "ensure", "ensure"]);
  });
});

describe("sameIngress", () => {
  test("compares what the API keeps, in order", () => {
    const a = [{ ip: "10.0.0.1", ipMode: "VIP" }];
    assert.equal(sameIngress(a, [{ ipMode: "VIP", ip: "10.0.0.1" }]), true);
    assert.equal(sameIngress(a, [{ ip: "10.0.0.1" }]), false);
    assert.equal(sameIngress(a, [...a, { ip: "10.0.0.2", ipMode: "VIP" }]), false);
  });
});

describe("planIngress: properties", () => {
  const arbitraryNodes = fc.uniqueArray(fc.integer({ min: 1, max: 250 }), { minLength: 1, maxLength: 60 }).map((ids) =>
    ids.map((id) => node(`node-${id}`, { internal: [`10.0.0.${id}`] })),
  );

  test("a node joining or leaving changes at most its own entry of each Service", () => {
    fc.assert(
      fc.property(arbitraryNodes, fc.nat(59), fc.uuid(), fc.integer({ min: 1, max: 8 }), (nodes, at, uid, maxNodes) => {
        const config = { ...CONFIG, maxNodes };
        const chosen = (list: LoadBalancerNode[]) => {
          const intent = plan([service("a", { uid })], list, { config }).get("ns/a");
          return new Set(intent?.action === "ensure" ? intent.nodes : []);
        };
        const leaving = nodes[at % nodes.length] as LoadBalancerNode;
        const before = chosen(nodes);
        const after = chosen(nodes.filter((each) => each !== leaving));
        const lost = [...before].filter((name) => !after.has(name));
        const gained = [...after].filter((name) => !before.has(name));
        assert.ok(lost.length === 0 || (lost.length === 1 && lost[0] === leaving.name), `lost ${lost}`);
        assert.ok(gained.length <= (before.has(leaving.name) ? 1 : 0), `gained ${gained}`);
      }),
    );
  });

  const arbitraryServices = fc.uniqueArray(
    fc.record({
      name: fc.stringMatching(/^[a-z]{1,6}$/),
      day: fc.integer({ min: 1, max: 9 }),
      ports: fc.uniqueArray(fc.constantFrom<[string, number]>(["TCP", 80], ["TCP", 443], ["UDP", 53], ["TCP", 22]), {
        minLength: 1,
        maxLength: 2,
      }),
      local: fc.boolean(),
    }),
    { selector: ({ name }) => name, maxLength: 12 },
  ).map((list) =>
    list.map(({ name, day, ports, local }) => service(name, { created: `2026-01-0${day}T00:00:00Z`, ports, local })),
  );
  // Every Local Service has endpoints on the first two nodes.
  const ready = (nodes: LoadBalancerNode[]) => () => nodes.slice(0, 2).map(({ name }) => name);

  test("ensured Services never share a protocol/port on an address, and the input order changes nothing", () => {
    fc.assert(
      fc.property(arbitraryServices, arbitraryNodes, fc.integer({ min: 1, max: 4 }), (services, nodes, maxNodes) => {
        const options = { config: { ...CONFIG, maxNodes }, ready: ready(nodes) };
        const result = plan(services, nodes, options);
        assert.deepEqual([...plan([...services].reverse(), nodes, options)].sort(), [...result].sort());
        const claimed = new Set<string>();
        for (const facts of services) {
          const intent = result.get(facts.key);
          if (intent?.action !== "ensure") continue;
          assert.ok(intent.ingress.length <= maxNodes, "at most maxNodes addresses per family");
          for (const { protocol, port } of facts.ports)
            for (const { ip } of intent.ingress) {
              const claim = `${protocol}/${port} on ${ip}`;
              assert.ok(!claimed.has(claim), claim);
              claimed.add(claim);
            }
        }
      }),
    );
  });

  test("a Service's intent never depends on newer Services (the older always wins)", () => {
    fc.assert(
      fc.property(arbitraryServices, arbitraryNodes, (services, nodes) => {
        const options = { ready: ready(nodes) };
        const all = plan(services, nodes, options);
        const oldest = [...services].sort(byAge);
        const older = oldest.slice(0, Math.ceil(oldest.length / 2));
        for (const [key, intent] of plan(older, nodes, options)) assert.deepEqual(all.get(key), intent);
      }),
    );
  });
});
