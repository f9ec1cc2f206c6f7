import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import { parseLabelSelector } from "../kube/labelselector.ts";
import { UNINITIALIZED_TAINT } from "../kube/nodes.ts";
import { AUTOSCALER_TAINT, EXCLUDE_LABEL, type LoadBalancerNode, loadBalancerNode } from "../loadbalancer/nodes.ts";
import { byAge, LB_FINALIZER, NODE_SELECTOR_ANNOTATION } from "../loadbalancer/service.ts";
import {
  claimOrder,
  decide,
  type DecisionContext,
  type HolderRule,
  type Intent,
  NODE_ADDRESS_CLASS,
  NO_HOLDERS,
  planIngress,
  type PortHolder,
  type PortHolders,
  type ServiceConfig,
  type ServiceFacts,
  sameIngress,
  serviceFacts,
} from "./decide.ts";
import { DEFAULT_NODE_PORT_RANGE, DEFAULT_RESERVED_PORTS, parseNodePortRange, parsePortRange } from "./flags.ts";

const CONFIG: ServiceConfig = {
  claimClassless: false,
  maxNodes: 16,
  reservedPorts: DEFAULT_RESERVED_PORTS.split(",").map(parsePortRange),
  nodePortRange: parseNodePortRange(DEFAULT_NODE_PORT_RANGE),
  unknownGuard: { threshold: 0.55, graceMs: 20_000 },
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
  options: { config?: ServiceConfig; ready?: (service: string) => string[]; holders?: PortHolders } = {},
): Map<string, Intent> {
  return planIngress({
    services,
    nodes: nodes.filter((each) => !each.ineligible),
    readyNodes: (key) => options.ready?.(key) ?? [],
    holders: options.holders ?? NO_HOLDERS,
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
    ["Ready Unknown", { ready: "Unknown" }, "ready-unknown"],
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
  const ensure: Intent = {
    action: "ensure",
    rule: "ensured",
    ingress: [],
    nodes: [],
    missingFamilies: [],
    newerHolders: [],
    reason: "",
  };
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

interface Entry {
  /** A node's name, or "*": every node (NodePorts). */
  where: string;
  /** "TCP/8443" */
  claim: string;
  holder: PortHolder;
}

function holderTable(entries: Entry[]): PortHolders {
  const everywhere = new Map<string, PortHolder[]>();
  const onNode = new Map<string, Map<string, PortHolder[]>>();
  for (const { where, claim, holder } of entries) {
    const table = where === "*" ? everywhere : (onNode.get(where) ?? onNode.set(where, new Map()).get(where));
    table?.set(claim, [...(table.get(claim) ?? []), holder]);
  }
  return { everywhere, onNode };
}

describe("planIngress: ports others hold on the nodes (NodePorts, hostPorts, hostNetwork pods, the NodePort range)", () => {
  const nodes = [node("n1", { internal: ["10.0.0.1"] }), node("n2", { internal: ["10.0.0.2"] })];
  const day = (n: number) => `2026-01-0${n}T00:00:00Z`;
  const holder = (rule: HolderRule, key: string, created: number): PortHolder => ({
    rule,
    kind: rule === "node-port" ? "Service" : "Pod",
    key,
    created: day(created),
  });
  const holders = (entries: [string, string, PortHolder][]) =>
    holderTable(entries.map(([where, claim, holder]) => ({ where, claim, holder })));
  const a = (ports: [string, number][] = [["TCP", 8443]]) => service("a", { created: day(5), ports });
  const outcome = (intent: Intent | undefined) =>
    intent?.action === "refuse"
      ? [intent.rule, intent.reason]
      : intent?.action === "ensure"
        ? [intent.rule, intent.newerHolders]
        : intent;
  const cases: [string, [string, number][], [string, string, PortHolder][], unknown[]][] = [
    ["no holder", [["TCP", 8443]], [], ["ensured", []]],
    [
      "an older Service's NodePort, on every node",
      [["TCP", 8443]],
      [["*", "TCP/8443", holder("node-port", "other/victim", 4)]],
      ["node-port", "port TCP/8443 is the NodePort of the older Service/other/victim, open on every node"],
    ],
    [
      "an older pod's hostPort on a chosen node",
      [["TCP", 8443]],
      [["n2", "TCP/8443", holder("host-port", "other/proxy", 1)]],
      ["host-port", "port TCP/8443 on node n2 is a hostPort of the older Pod/other/proxy"],
    ],
    [
      "an older hostNetwork pod's port on a chosen node",
      [["TCP", 80], ["TCP", 8443]],
      [["n1", "TCP/8443", holder("host-network-port", "kube-system/agent", 3)]],
      ["host-network-port", "port TCP/8443 on node n1 is a port of the older Pod/kube-system/agent, which uses the node's network"],
    ],
    ["a pod on a node the Service is not on", [["TCP", 8443]], [["n9", "TCP/8443", holder("host-port", "o/p", 1)]], ["ensured", []]],
    ["another protocol", [["UDP", 8443]], [["n1", "TCP/8443", holder("host-port", "o/p", 1)]], ["ensured", []]],
    [
      "a newer pod: the Service keeps the port, and is told whose it also is",
      [["TCP", 8443]],
      [["n1", "TCP/8443", holder("host-network-port", "o/late", 6)]],
      ["ensured", ["port TCP/8443 on node n1 is also a port of the newer Pod/o/late, which uses the node's network"]],
    ],
    [
      "the same second: a pod wins",
      [["TCP", 8443]],
      [["n1", "TCP/8443", holder("host-port", "zz/p", 5)]],
      ["host-port", "port TCP/8443 on node n1 is a hostPort of the older Pod/zz/p"],
    ],
    [
      "the same second: Services by namespace/name",
      [["TCP", 8443]],
      [["*", "TCP/8443", holder("node-port", "ns/b", 5)], ["*", "TCP/8443", holder("node-port", "aa/z", 9)]],
      ["ensured", [
        "port TCP/8443 is also the NodePort of the newer Service/ns/b, open on every node",
        "port TCP/8443 is also the NodePort of the newer Service/aa/z, open on every node",
      ]],
    ],
    ["its own NodePort", [["TCP", 8443]], [["*", "TCP/8443", holder("node-port", "ns/a", 5)]], ["ensured", []]],
    [
      "several older holders: the oldest is named",
      [["TCP", 8443]],
      [
        ["n2", "TCP/8443", holder("host-port", "o/second", 3)],
        ["n1", "TCP/8443", holder("host-network-port", "o/first", 2)],
        ["*", "TCP/8443", holder("node-port", "o/third", 4)],
      ],
      ["host-network-port", "port TCP/8443 on node n1 is a port of the older Pod/o/first, which uses the node's network"],
    ],
    [
      "in the NodePort range, no holder",
      [["UDP", 30053]],
      [],
      ["node-port-range", "port UDP/30053 is in the NodePort range (30000-32767), from which kube-apiserver gives " +
        "any Service a NodePort on every node"],
    ],
    [
      "in the NodePort range, an older NodePort: the holder is named",
      [["TCP", 30080]],
      [["*", "TCP/30080", holder("node-port", "other/victim", 1)]],
      ["node-port", "port TCP/30080 is the NodePort of the older Service/other/victim, open on every node"],
    ],
    [
      "in the NodePort range, only a newer NodePort: the range refuses",
      [["TCP", 30080]],
      [["*", "TCP/30080", holder("node-port", "other/late", 7)]],
      ["node-port-range", "port TCP/30080 is in the NodePort range (30000-32767), from which kube-apiserver gives " +
        "any Service a NodePort on every node"],
    ],
  ];
  for (const [name, ports, entries, expected] of cases)
    test(name, () => {
      assert.deepEqual(outcome(plan([a(ports)], nodes, { holders: holders(entries) }).get("ns/a")), expected);
    });

  test("no node eligible: an older NodePort still refuses (it is open on every node), a pod does not", () => {
    const nodePort = holders([["*", "TCP/8443", holder("node-port", "o/v", 1)]]);
    assert.equal(plan([a()], [], { holders: nodePort }).get("ns/a")?.rule, "node-port");
    const pod = holders([["n1", "TCP/8443", holder("host-port", "o/p", 1)]]);
    assert.equal(plan([a()], [], { holders: pod }).get("ns/a")?.rule, "no-nodes");
  });

  test("a narrower --lb-node-port-range leaves the port to the holder check alone", () => {
    const config = { ...CONFIG, nodePortRange: { from: 40000, to: 40010 } };
    assert.equal(plan([a([["TCP", 30080]])], nodes, { config }).get("ns/a")?.rule, "ensured");
    assert.equal(plan([a([["TCP", 40010]])], nodes, { config }).get("ns/a")?.rule, "node-port-range");
  });

  test("a Service refused for a holder claims none of its ports: a newer Service of ours may have them", () => {
    const older = service("older", { created: day(2), ports: [["TCP", 8443], ["TCP", 9000]] });
    const newer = service("newer", { created: day(3), ports: [["TCP", 8443]] });
    const pod = holders([["n1", "TCP/9000", holder("host-port", "o/p", 1)]]);
    const result = plan([older, newer], nodes, { holders: pod });
    assert.equal(result.get("ns/older")?.rule, "host-port");
    assert.equal(result.get("ns/newer")?.rule, "ensured");
    assert.equal(plan([older, newer], nodes).get("ns/newer")?.rule, "port-conflict");
  });
});

describe("planIngress: ports others hold, properties", () => {
  const NODES = ["n1", "n2", "n3"].map((name, i) => node(name, { internal: [`10.0.0.${i + 1}`] }));
  const PORTS: [string, number][] = [["TCP", 80], ["TCP", 8443], ["UDP", 8443], ["TCP", 30080]];
  const claimOf = ([protocol, port]: [string, number]) => `${protocol}/${port}`;
  const arbitraryServices = fc.uniqueArray(
    fc.record({
      name: fc.constantFrom("a", "b", "c", "d", "e"),
      day: fc.integer({ min: 1, max: 9 }),
      ports: fc.uniqueArray(fc.constantFrom(...PORTS), { minLength: 1, maxLength: 2 }),
    }),
    { selector: ({ name }) => name, maxLength: 5 },
  ).map((list) => list.map(({ name, day, ports }) => service(name, { created: `2026-01-0${day}T00:00:00Z`, ports })));
  const arbitraryHolders = fc.array(
    fc.record({
      rule: fc.constantFrom<HolderRule>("node-port", "host-port", "host-network-port"),
      name: fc.constantFrom("a", "b", "x", "y"),
      day: fc.integer({ min: 1, max: 9 }),
      port: fc.constantFrom(...PORTS),
      node: fc.constantFrom("n1", "n2", "n3", "n4"),
    }),
    { maxLength: 8 },
  );
  type Generated = { rule: HolderRule; name: string; day: number; port: [string, number]; node: string };
  const entriesOf = (list: Generated[]) =>
    list.map(({ rule, name, day, port, node: where }): Entry => ({
      where: rule === "node-port" ? "*" : where,
      claim: claimOf(port),
      holder: { rule, kind: rule === "node-port" ? "Service" : "Pod", key: `ns/${name}`, created: `2026-01-0${day}T00:00:00Z` },
    }));
  const self = (facts: ServiceFacts) => ({ kind: "Service" as const, key: facts.key, created: facts.created });
  const names = (reason: string, holder: PortHolder) => {
    const text = `older ${holder.kind}/${holder.key}`;
    const at = reason.indexOf(text);
    return at >= 0 && [",", undefined].includes(reason[at + text.length]);
  };
  const options = (maxNodes: number, entries: Entry[]) => ({ config: { ...CONFIG, maxNodes }, holders: holderTable(entries) });

  test("an ensured Service has no port in the range and none an older holder holds where it is", () => {
    fc.assert(
      fc.property(arbitraryServices, arbitraryHolders, fc.integer({ min: 1, max: 3 }), (services, list, maxNodes) => {
        const entries = entriesOf(list);
        const result = plan(services, NODES, options(maxNodes, entries));
        for (const facts of services) {
          const intent = result.get(facts.key);
          if (intent?.action !== "ensure") continue;
          for (const port of facts.ports) {
            assert.ok(port.port < 30000 || port.port > 32767, `${facts.key}: ${port.port} in the NodePort range`);
            for (const { where, claim, holder } of entries) {
              const there = where === "*" || intent.nodes.includes(where);
              const other = !(holder.kind === "Service" && holder.key === facts.key);
              if (there && other && claim === `${port.protocol}/${port.port}`)
                assert.ok(claimOrder(holder, self(facts)) > 0, `${facts.key} took ${claim} of ${holder.key}`);
            }
          }
        }
      }),
    );
  });

  test("a refusal for a holder names an older one holding that port where the Service would be", () => {
    fc.assert(
      fc.property(arbitraryServices, arbitraryHolders, fc.integer({ min: 1, max: 3 }), (services, list, maxNodes) => {
        const entries = entriesOf(list);
        const result = plan(services, NODES, options(maxNodes, entries));
        // Each Service's intent before holders and port conflicts: where it would be.
        const unheld = new Map<string, Intent>();
        planIngress({ services, nodes: NODES, readyNodes: () => [], ...options(maxNodes, []) }, unheld);
        for (const facts of services) {
          const intent = result.get(facts.key);
          if (intent?.action !== "refuse" || !["node-port", "host-port", "host-network-port"].includes(intent.rule))
            continue;
          const alone = unheld.get(facts.key);
          const wouldBe = alone?.action === "ensure" ? alone.nodes : [];
          const named = entries.filter(({ where, claim, holder }) =>
            holder.rule === intent.rule &&
            names(intent.reason, holder) &&
            intent.reason.startsWith(`port ${claim}${where === "*" ? "" : ` on node ${where}`} is `) &&
            (where === "*" || wouldBe.includes(where)) &&
            claimOrder(holder, self(facts)) < 0,
          );
          assert.ok(named.length > 0, `${facts.key}: ${intent.reason}`);
        }
      }),
    );
  });

  test("holders newer than a Service change nothing of what it gets; their order changes nothing at all", () => {
    fc.assert(
      fc.property(arbitraryServices, arbitraryHolders, fc.integer({ min: 1, max: 3 }), (services, list, maxNodes) => {
        const entries = entriesOf(list);
        const result = plan(services, NODES, options(maxNodes, entries));
        assert.deepEqual(plan([...services].reverse(), NODES, options(maxNodes, [...entries].reverse())), result);
        const gets = (intent: Intent | undefined) =>
          intent?.action === "ensure" ? [intent.rule, intent.ingress] : [intent?.action, intent?.rule, intent?.reason];
        for (const facts of services) {
          const older = entries.filter(({ holder }) => claimOrder(holder, self(facts)) < 0);
          const without = plan(services, NODES, options(maxNodes, older)).get(facts.key);
          assert.deepEqual(gets(result.get(facts.key)), gets(without), facts.key);
        }
      }),
    );
  });

  test("the refusal lifts when its holder goes: with no holders, no holder rule refuses", () => {
    fc.assert(
      fc.property(arbitraryServices, fc.integer({ min: 1, max: 3 }), (services, maxNodes) => {
        for (const intent of plan(services, NODES, options(maxNodes, [])).values())
          assert.ok(!["node-port", "host-port", "host-network-port"].includes(intent.rule), intent.rule);
      }),
    );
  });
});
