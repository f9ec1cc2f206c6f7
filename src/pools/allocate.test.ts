import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import {
  type Allocation,
  allocate,
  announcing,
  BGP_CLASS,
  isOurs,
  type L2ServiceFacts,
  L2_CLASS,
  l2ServiceFacts,
  poolHolds,
} from "./allocate.ts";
import { ExclusionSet, exclusions, type NetworkFacts } from "./exclusions.ts";
import { type LoadBalancerIPPool, type PoolFacts, poolFacts } from "./pool.ts";
import { ipNumber, ipText, isBuggyIp } from "./ranges.ts";
import { poolStatus } from "./status.ts";

/** The classes served: l2 only, or bgp too (--lb-bgp). */
const L2_ONLY = { claimClassless: false, bgp: false, bgpClaimClassless: false };
const WITH_BGP = { claimClassless: false, bgp: true, bgpClaimClassless: false };

let seconds = 0;
/** A Service of ours, created a second after the one before. */
function service(name: string, fields: Partial<L2ServiceFacts> = {}): L2ServiceFacts {
  seconds++;
  return {
    key: `ns/${name}`,
    namespace: "ns",
    uid: name,
    created: new Date(Date.UTC(2026, 0, 1, 0, 0, seconds)).toISOString().replace(".000", ""),
    type: "LoadBalancer",
    class: L2_CLASS,
    deleting: false,
    labels: {},
    ipFamilies: ["IPv4"],
    ports: [{ protocol: "TCP", port: 80 }],
    requestedIps: undefined,
    loadBalancerIP: undefined,
    pool: undefined,
    sharingKey: undefined,
    finalizer: false,
    allocatedFrom: undefined,
    ingress: [],
    ...fields,
  };
}

const pool = (name: string, addresses: string[], spec: LoadBalancerIPPool["spec"] = {}) =>
  poolFacts({ metadata: { name }, spec: { addresses, ...spec } });

/** What the network uses: `nodes` maps an address to its node; `network` adds to it. */
function excluded(nodes: Record<string, string> = {}, network: Partial<NetworkFacts> = {}): ExclusionSet {
  const byNode = Object.entries(nodes).map(([address, name]) => ({ name, podCidrs: [], addresses: [address] }));
  const facts = { announcers: [], serviceCidrs: [], apiServers: [], ...network, nodes: [...byNode, ...(network.nodes ?? [])] };
  return new ExclusionSet(exclusions(facts));
}

function run(
  services: L2ServiceFacts[],
  pools: PoolFacts[],
  nodes: Record<string, string> = {},
  network: Partial<NetworkFacts> = {},
  served = WITH_BGP,
) {
  return allocate({ services, pools, exclusions: excluded(nodes, network), served });
}

/** "ns/a → 198.51.100.1 (kept)" or "ns/a ✗ pool-exhausted: …". */
function summary(allocations: Map<string, Allocation>): string[] {
  return [...allocations].map(([key, allocation]) =>
    allocation.action === "allocate"
      ? `${key} → ${allocation.ips.join(",")} (${allocation.rule})`
      : `${key} ✗ ${allocation.rule}: ${allocation.reason}`,
  );
}

/** The Services as a controller would have written them: the allocation's addresses in status, pools recorded. */
function written(services: L2ServiceFacts[], allocations: Map<string, Allocation>): L2ServiceFacts[] {
  return services.map((facts) => {
    const allocation = allocations.get(facts.key);
    if (!allocation || facts.deleting) return facts;
    if (allocation.action === "refuse") return { ...facts, ingress: [] };
    return { ...facts, ingress: allocation.ips, allocatedFrom: allocation.pools.join(","), finalizer: true };
  });
}

describe("allocate", () => {
  const small = pool("a", ["198.51.100.0/30"]);

  test("lowest free address, oldest first; exhaustion refused with the pools named", () => {
    const services = ["one", "two", "three", "four", "five"].map((name) => service(name));
    assert.deepEqual(summary(run(services, [small]).services), [
      "ns/one → 198.51.100.0 (allocated)",
      "ns/two → 198.51.100.1 (allocated)",
      "ns/three → 198.51.100.2 (allocated)",
      "ns/four → 198.51.100.3 (allocated)",
      "ns/five ✗ pool-exhausted: no free IPv4 address in pool(s) a",
    ]);
  });

  test("held addresses are kept, even when an older Service has none; a restart is the same", () => {
    const older = service("older");
    const newer = service("newer", { ingress: ["198.51.100.0"], allocatedFrom: "a" });
    assert.deepEqual(summary(run([older, newer], [small]).services), [
      "ns/older → 198.51.100.1 (allocated)",
      "ns/newer → 198.51.100.0 (kept)",
    ]);
  });

  test("two Services on one address: the older keeps it, the newer moves and is told why", () => {
    const older = service("older", { ingress: ["198.51.100.2"] });
    const newer = service("newer", { ingress: ["198.51.100.2"] });
    const { services } = run([newer, older], [small]);
    assert.deepEqual(summary(services), ["ns/older → 198.51.100.2 (kept)", "ns/newer → 198.51.100.0 (allocated)"]);
    assert.equal(services.get("ns/newer")?.moved, "198.51.100.2 is held by the older Service ns/older");
  });

  test("requested addresses: annotation (both families) or spec.loadBalancerIP; refusals name the problem", () => {
    const dual = pool("dual", ["198.51.100.0/30", "2001:db8::/126"]);
    const services = [
      service("both", { ipFamilies: ["IPv6", "IPv4"], requestedIps: "198.51.100.2, 2001:db8::3" }),
      service("legacy", { loadBalancerIP: "198.51.100.1" }),
      service("taken", { loadBalancerIP: "198.51.100.1" }),
      service("outside", { requestedIps: "192.0.2.1" }),
      service("garbled", { requestedIps: "198.51.100.300" }),
      service("family", { requestedIps: "2001:db8::1" }),
      service("node", { requestedIps: "198.51.100.3" }),
    ];
    assert.deepEqual(summary(run(services, [dual], { "198.51.100.3": "n1" }).services), [
      "ns/both → 2001:db8::3,198.51.100.2 (allocated)",
      "ns/legacy → 198.51.100.1 (allocated)",
      "ns/taken ✗ address-held: 198.51.100.1 is held by the Service ns/legacy",
      "ns/outside ✗ address-in-no-pool: 192.0.2.1 is in no pool this Service may use",
      'ns/garbled ✗ bad-request: annotation local-ccm.io/load-balancer-ips: "198.51.100.300" is not an IP address',
      "ns/family ✗ bad-request: annotation local-ccm.io/load-balancer-ips: 2001:db8::1 is IPv6, not of " +
        "spec.ipFamilies (IPv4)",
      "ns/node ✗ node-address: 198.51.100.3 is an address of node n1",
    ]);
  });

  test("MetalLB's annotations (metallb.io, then metallb.universe.tf) are read where ours are unset; ours win", () => {
    const facts = (annotations: Record<string, string>) =>
      l2ServiceFacts({ metadata: { name: "s", namespace: "ns", annotations }, spec: { type: "LoadBalancer" } });
    const settings = ({ requestedIps, pool, sharingKey, readFrom }: L2ServiceFacts) =>
      ({ requestedIps, pool, sharingKey, readFrom });
    assert.deepEqual(
      settings(
        facts({
          "metallb.io/loadBalancerIPs": "198.51.100.1",
          "metallb.universe.tf/loadBalancerIPs": "198.51.100.2",
          "metallb.universe.tf/address-pool": "old",
          "local-ccm.io/allow-shared-ip": "ours",
          "metallb.io/allow-shared-ip": "theirs",
        }),
      ),
      {
        requestedIps: "198.51.100.1",
        pool: "old",
        sharingKey: "ours",
        readFrom: { requestedIps: "metallb.io/loadBalancerIPs", pool: "metallb.universe.tf/address-pool" },
      },
    );
    assert.deepEqual(settings(facts({})), { requestedIps: undefined, pool: undefined, sharingKey: undefined, readFrom: undefined });
    // Refusals name the annotation the value came from, so the user edits the right one.
    const dual = pool("dual", ["198.51.100.0/30"]);
    const garbled = { ...service("garbled"), ...settings(facts({ "metallb.io/loadBalancerIPs": "198.51.100.300" })) };
    const unknown = { ...service("unknown"), ...settings(facts({ "metallb.universe.tf/address-pool": "gone" })) };
    assert.deepEqual(summary(run([garbled, unknown], [dual]).services), [
      'ns/garbled ✗ bad-request: annotation metallb.io/loadBalancerIPs: "198.51.100.300" is not an IP address',
      "ns/unknown ✗ no-pool: annotation metallb.universe.tf/address-pool: pool gone does not exist",
    ]);
  });

  test("sharing: same key and no common port share; overlapping ports or another key do not", () => {
    const web = service("web", { sharingKey: "k", ports: [{ protocol: "TCP", port: 80 }] });
    const dns = service("dns", { sharingKey: "k", ports: [{ protocol: "UDP", port: 80 }] });
    const clash = service("clash", { sharingKey: "k", ports: [{ protocol: "TCP", port: 80 }] });
    const other = service("other", { sharingKey: "j", ports: [{ protocol: "TCP", port: 443 }] });
    const asks = service("asks", { sharingKey: "k", requestedIps: "198.51.100.0" });
    assert.deepEqual(summary(run([web, dns, clash, other, asks], [small]).services), [
      "ns/web → 198.51.100.0 (allocated)",
      "ns/dns → 198.51.100.0 (allocated)",
      "ns/clash → 198.51.100.1 (allocated)",
      "ns/other → 198.51.100.2 (allocated)",
      "ns/asks ✗ port-overlap: 198.51.100.0 is shared with ns/web, whose ports overlap this Service's",
    ]);
  });

  test("sharing: a key is its namespace's; another namespace's Service with it gets an address of its own", () => {
    const tenant = (name: string, fields: Partial<L2ServiceFacts>) =>
      service(name, { key: `tenant/${name}`, namespace: "tenant", sharingKey: "k", ...fields });
    const held = { ingress: ["198.51.100.0"], allocatedFrom: "a" };
    const web = service("web", { sharingKey: "k", ports: [{ protocol: "TCP", port: 80 }], ...held });
    const other = tenant("other", { ports: [{ protocol: "TCP", port: 81 }] });
    const asks = tenant("asks", { ports: [{ protocol: "TCP", port: 82 }], requestedIps: "198.51.100.0" });
    // Found sharing across namespaces (allocated before the rule): the older keeps it, the newer joins its own.
    const found = tenant("found", { ports: [{ protocol: "TCP", port: 83 }], ...held });
    const mate = service("mate", { sharingKey: "k", ports: [{ protocol: "TCP", port: 84 }] });
    const { services } = run([web, other, asks, found, mate], [small]);
    assert.deepEqual(summary(services), [
      "ns/web → 198.51.100.0 (kept)",
      "tenant/other → 198.51.100.1 (allocated)",
      "tenant/asks ✗ sharing-namespace: 198.51.100.0 is shared under key k by Services of namespace ns only, not " +
        "tenant",
      "tenant/found → 198.51.100.1 (allocated)",
      "ns/mate → 198.51.100.0 (allocated)",
    ]);
    assert.equal(services.get("tenant/found")?.moved, "198.51.100.0 is held by the older Service ns/web");
  });

  test("class local-ccm.io/bgp: served with --lb-bgp by the l2 rules, announced by every node; no sharing with l2", () => {
    const one = [pool("a", ["198.51.100.0/30"])];
    const bgp = (name: string, fields: Partial<L2ServiceFacts> = {}) => service(name, { class: BGP_CLASS, ...fields });
    const world = [
      service("l2", { sharingKey: "k" }),
      bgp("routed", { sharingKey: "k", ports: [{ protocol: "TCP", port: 443 }] }),
      bgp("asks", { sharingKey: "k", requestedIps: "198.51.100.0", ports: [{ protocol: "UDP", port: 53 }] }),
      bgp("mate", { sharingKey: "k", ports: [{ protocol: "TCP", port: 8080 }] }),
    ];
    assert.deepEqual(summary(run(world, one).services), [
      "ns/l2 → 198.51.100.0 (allocated)",
      "ns/routed → 198.51.100.1 (allocated)",
      "ns/asks ✗ sharing-class: 198.51.100.0 is shared under key k by ns/l2, announced over layer 2: an l2 and a " +
        "bgp Service never share",
      "ns/mate → 198.51.100.1 (allocated)",
    ]);
    // Off, they are another controller's: nothing allocated, nothing held.
    const off = run(world, one, {}, {}, L2_ONLY);
    assert.deepEqual(summary(off.services), ["ns/l2 → 198.51.100.0 (allocated)"]);
    assert.equal(isOurs(bgp("x"), L2_ONLY), false);
    assert.equal(isOurs(bgp("x", { class: "example.com/bgp" }), WITH_BGP), false);
    assert.equal(isOurs(bgp("x", { type: "NodePort" }), WITH_BGP), false);
    const classless = service("z", { class: undefined });
    assert.deepEqual([announcing(bgp("x"), L2_ONLY), announcing(service("y"), L2_ONLY), announcing(classless, L2_ONLY)], [
      "every-node",
      "assigned-node",
      "assigned-node",
    ]);
  });

  test("class-less Services over BGP (bgpClaimClassless): ours, announced by every node, sharing with bgp only", () => {
    const served = { ...WITH_BGP, bgpClaimClassless: true };
    const classless = (name: string) => service(name, { class: undefined, sharingKey: "k" });
    assert.equal(isOurs(classless("x"), served), true);
    assert.equal(isOurs(classless("x"), WITH_BGP), false);
    assert.equal(announcing(classless("x"), served), "every-node");
    assert.equal(announcing(service("y"), served), "assigned-node", "class local-ccm.io/l2 stays layer 2");
    const shared = { sharingKey: "k", requestedIps: "198.51.100.0" };
    const world = [
      classless("plain"),
      service("routed", { ...shared, class: BGP_CLASS, ports: [{ protocol: "TCP", port: 81 }] }),
      service("l2", { ...shared, ports: [{ protocol: "TCP", port: 82 }] }),
    ];
    assert.deepEqual(summary(run(world, [pool("a", ["198.51.100.0/30"])], {}, {}, served).services), [
      "ns/plain → 198.51.100.0 (allocated)",
      "ns/routed → 198.51.100.0 (allocated)",
      "ns/l2 ✗ sharing-class: 198.51.100.0 is shared under key k by ns/plain, announced over BGP: an l2 and a bgp " +
        "Service never share",
    ]);
  });

  test("pools: selector, namespaces, autoAssign off (only when named), named pool, .0/.255 avoided", () => {
    const pools = [
      pool("a-manual", ["192.0.2.0/24"], { autoAssign: false }),
      pool("b-selected", ["203.0.113.0/24"], {
        serviceSelector: { matchLabels: { tier: "edge" } },
        avoidBuggyIPs: true,
      }),
      pool("c-other-ns", ["198.51.100.0/24"], { namespaces: ["other"] }),
      pool("d-broken", ["198.51.100.9-198.51.100.1"]),
    ];
    const services = [
      service("edge", { labels: { tier: "edge" } }),
      service("plain"),
      service("manual", { pool: "a-manual" }),
      service("missing", { pool: "nope" }),
      service("broken", { pool: "d-broken" }),
    ];
    assert.deepEqual(summary(run(services, pools).services), [
      "ns/edge → 203.0.113.1 (allocated)",
      "ns/plain ✗ no-pool: no pool offers IPv4 addresses to this Service",
      "ns/manual → 192.0.2.0 (allocated)",
      "ns/missing ✗ no-pool: annotation local-ccm.io/address-pool: pool nope does not exist",
      "ns/broken ✗ no-pool: no pool offers IPv4 addresses to this Service; pool d-broken cannot serve " +
        '"198.51.100.9-198.51.100.1" ends before it starts',
    ]);
  });

  test("all families or none for a Service that holds nothing; one that holds keeps it, told what it lacks", () => {
    const v4only = pool("a", ["198.51.100.0/31"]);
    const fresh = service("fresh", { ipFamilies: ["IPv4", "IPv6"] });
    const dual = service("dual", { ipFamilies: ["IPv4", "IPv6"], ingress: ["198.51.100.0"], allocatedFrom: "a" });
    const later = service("later");
    const { services } = run([fresh, dual, later], [v4only]);
    assert.deepEqual(summary(services), [
      "ns/fresh ✗ no-pool: no pool offers IPv6 addresses to this Service",
      "ns/dual → 198.51.100.0 (kept)",
      "ns/later → 198.51.100.1 (allocated)",
    ]);
    const kept = services.get("ns/dual");
    assert.deepEqual(kept?.action === "allocate" && kept.notices, [
      { rule: "no-pool", reason: "no pool offers IPv6 addresses to this Service" },
    ]);
  });

  test("a Service keeps what it holds when the rest of its request is refused; the older one asking waits", () => {
    const dual = pool("a", ["198.51.100.0/31", "2001:db8::/127"]);
    const older = service("older", { ipFamilies: ["IPv6"], requestedIps: "2001:db8::1" });
    const taker = service("taker", { requestedIps: "198.51.100.0" });
    const newer = service("newer", {
      ipFamilies: ["IPv4", "IPv6"],
      requestedIps: "198.51.100.0",
      ingress: ["2001:db8::1"],
      allocatedFrom: "a",
    });
    const { services } = run([older, taker, newer], [dual]);
    assert.deepEqual(summary(services), [
      "ns/older ✗ address-held: 2001:db8::1 is held by the Service ns/newer",
      "ns/taker → 198.51.100.0 (allocated)",
      "ns/newer → 2001:db8::1 (kept)",
    ]);
    const kept = services.get("ns/newer");
    assert.deepEqual(kept?.action === "allocate" && kept.notices, [
      { rule: "address-held", reason: "198.51.100.0 is held by the Service ns/taker" },
    ]);
  });

  test("a Service being deleted keeps its address until it is gone; other classes are not ours", () => {
    const going = service("going", { deleting: true, ingress: ["198.51.100.0"] });
    const theirs = service("theirs", { class: "example.com/other" });
    const fresh = service("fresh");
    const { services, used } = run([going, theirs, fresh], [small]);
    assert.deepEqual(summary(services), ["ns/fresh → 198.51.100.1 (allocated)"]);
    assert.deepEqual([...(used.get("a") ?? [])].sort(), ["198.51.100.0", "198.51.100.1"]);
    assert.equal(isOurs(service("x", { class: undefined }), { ...L2_ONLY, claimClassless: true }), true);
    assert.equal(isOurs(service("x", { class: undefined }), L2_ONLY), false);
  });

  test("what the network uses is never handed out; a request for it is refused by its rule, naming the value", () => {
    const whole = pool("lan", ["198.51.100.0/24", "10.96.0.0-10.96.0.3"]); // an operator's slip: the whole segment
    const network: Partial<NetworkFacts> = {
      announcers: [{ node: "n1", segments: ["198.51.100.0/24"], gateways: ["198.51.100.1"] }],
      serviceCidrs: [{ name: "kubernetes", cidrs: ["10.96.0.0/12"] }],
      nodes: [{ name: "n1", podCidrs: ["10.244.0.0/24"], addresses: ["198.51.100.2"] }],
      apiServers: ["198.51.100.3"],
    };
    const services = [
      service("first"),
      service("gateway", { requestedIps: "198.51.100.1" }),
      service("legacy", { loadBalancerIP: "198.51.100.255" }),
      service("cluster-ip", { requestedIps: "10.96.0.1" }),
    ];
    assert.deepEqual(summary(run(services, [whole], {}, network).services), [
      "ns/first → 198.51.100.4 (allocated)",
      "ns/gateway ✗ gateway: 198.51.100.1 is the default gateway of segment 198.51.100.0/24 (node n1)",
      "ns/legacy ✗ broadcast-address: 198.51.100.255 is the broadcast address of segment 198.51.100.0/24 (node n1)",
      "ns/cluster-ip ✗ service-cidr: 10.96.0.1 is in Service CIDR 10.96.0.0/12 (ServiceCIDR kubernetes)",
    ]);
  });

  test("held addresses stay whatever the pools become; the Service and the pool are told why", () => {
    const recorded = (name: string, ip: string, from: string, fields: Partial<L2ServiceFacts> = {}) =>
      service(name, { ingress: [ip], allocatedFrom: from, finalizer: true, ...fields });
    const services = [
      recorded("gone", "198.51.100.1", "deleted"),
      recorded("deleting", "198.51.101.1", "b"),
      recorded("narrowed", "198.51.102.1", "c"),
      recorded("shrunk", "198.51.103.9", "d"),
      recorded("bad-entry", "198.51.104.1", "e"),
      recorded("gateway", "198.51.103.1", "d"),
      recorded("renamed", "198.51.103.2", "d", { pool: "e" }),
      recorded("asks", "198.51.103.3", "d", { requestedIps: "198.51.104.7" }),
      service("new"),
    ];
    const pools = [
      pool("b", ["198.51.101.0/24"]),
      pool("c", ["198.51.102.0/24"], { namespaces: ["other"] }),
      pool("d", ["198.51.103.0/29"]),
      pool("e", ["198.51.104.0/29", "198.51.104.9-198.51.104.1"]),
    ];
    pools[0] = { ...(pools[0] as PoolFacts), deleting: true };
    const network = { announcers: [{ node: "n1", segments: ["198.51.103.0/24"], gateways: ["198.51.103.1"] }] };
    const { services: result, retained, used } = run(services, pools, {}, network);
    assert.deepEqual(summary(result), [
      "ns/gone → 198.51.100.1 (kept)",
      "ns/deleting → 198.51.101.1 (kept)",
      "ns/narrowed → 198.51.102.1 (kept)",
      "ns/shrunk → 198.51.103.9 (kept)",
      "ns/bad-entry → 198.51.104.1 (kept)",
      "ns/gateway → 198.51.103.1 (kept)",
      "ns/renamed → 198.51.104.0 (allocated)",
      "ns/asks → 198.51.104.7 (allocated)",
      "ns/new → 198.51.103.2 (allocated)", // given up by ns/renamed just now
    ]);
    const told = (key: string) => {
      const allocation = result.get(key);
      return allocation?.action === "allocate" ? [allocation.moved, ...allocation.notices.map(({ rule }) => rule)] : [];
    };
    assert.deepEqual(
      ["gone", "deleting", "narrowed", "shrunk", "bad-entry", "gateway", "renamed", "asks"].map((name) => told(`ns/${name}`)),
      [
        [undefined, "pool-gone"],
        [undefined, "pool-deleting"],
        [undefined, "pool-changed"],
        [undefined, "pool-changed"],
        [undefined],
        [undefined, "gateway"],
        ["198.51.103.2 is not of pool e, which it names"],
        ["198.51.103.3 is not the address it requests"],
      ],
    );
    assert.deepEqual(Object.fromEntries(retained), {
      b: ["198.51.101.1 (Service ns/deleting): pool b is being deleted"],
      c: ["198.51.102.1 (Service ns/narrowed): pool c no longer admits the Service (its namespaces or serviceSelector)"],
      d: [
        "198.51.103.9 (Service ns/shrunk): pool d no longer offers it",
        "198.51.103.1 (Service ns/gateway): it is the default gateway of segment 198.51.103.0/24 (node n1)",
      ],
    });
    assert.deepEqual([...(used.get("b") ?? [])], ["198.51.101.1"]);
  });

  test("a Service's own edit that is refused moves nothing: it keeps what it holds and is told", () => {
    const d = pool("d", ["198.51.103.0/29"]);
    const network = { announcers: [{ node: "n1", segments: ["198.51.103.0/24"], gateways: ["198.51.103.1"] }] };
    const held = { ingress: ["198.51.103.2"], allocatedFrom: "d", finalizer: true };
    const services = [
      service("to-gateway", { ...held, requestedIps: "198.51.103.1" }),
      service("garbled", { ...held, ingress: ["198.51.103.3"], requestedIps: "nonsense" }),
      service("no-such-pool", { ...held, ingress: ["198.51.103.4"], pool: "nope" }),
    ];
    const { services: result } = run(services, [d], {}, network);
    assert.deepEqual(
      [...result.values()].map((each) => (each.action === "allocate" ? [each.ips, each.notices] : each.reason)),
      [
        [["198.51.103.2"], [{ rule: "gateway", reason: "198.51.103.1 is the default gateway of segment 198.51.103.0/24 (node n1)" }]],
        [["198.51.103.3"], [{ rule: "bad-request", reason: 'annotation local-ccm.io/load-balancer-ips: "nonsense" is not an IP address' }]],
        [
          ["198.51.103.4"],
          [
            { rule: "pool-changed", reason: "198.51.103.4 is kept while the Service exists, though the Service names pool nope" },
            { rule: "no-pool", reason: "annotation local-ccm.io/address-pool: pool nope does not exist" },
          ],
        ],
      ],
    );
  });

  test("pool status: size, used, free, overlaps and node addresses as conflicts", () => {
    const a = pool("a", ["198.51.100.0/29"]);
    const b = pool("b", ["198.51.100.6-198.51.100.10", "2001:db8::/64"]);
    const nodes = excluded({ "198.51.100.1": "n1" });
    const now = new Date("2026-11-27T12:00:00.123Z");
    const status = (facts: PoolFacts, used: string[]) =>
      poolStatus({
        ...{ pool: facts, pools: [a, b], used: new Set(used), retained: [], exclusions: nodes },
        ...{ inUse: [], current: undefined, now },
      });
    assert.deepEqual(status(a, ["198.51.100.0"]), {
      size: "8",
      used: "1",
      free: "6",
      conflicts: [
        "overlaps pool b at 198.51.100.6-198.51.100.7",
        "never hands out 198.51.100.1: it is an address of node n1",
      ],
      retained: [],
      conditions: [
        {
          type: "Ready",
          status: "True",
          reason: "Serving",
          message: "serves its addresses",
          lastTransitionTime: "2026-11-27T12:00:00Z",
          observedGeneration: undefined,
        },
      ],
    });
    assert.equal(status(b, []).size, String(5n + 2n ** 64n));
  });

  test("pool status: entries it cannot serve, what the network uses in it, what is retained, Ready while deleted", () => {
    const a = pool("a", ["198.51.100.0/29", "198.51.100.9-198.51.100.1"]);
    const network = excluded({}, { serviceCidrs: [{ name: "kubernetes", cidrs: ["198.51.100.4/30"] }] });
    const now = new Date("2026-11-27T12:00:00Z");
    const current = {
      type: "Ready",
      status: "True" as const,
      reason: "Serving",
      message: "serves its addresses",
      lastTransitionTime: "2026-11-01T00:00:00Z",
    };
    const retained = ["198.51.100.5 (Service ns/old): it is in Service CIDR 198.51.100.4/30 (ServiceCIDR kubernetes)"];
    const used = new Set(["198.51.100.0", "198.51.100.5"]);
    const input = { pool: a, pools: [a], used, retained, exclusions: network, inUse: [], current, now };
    const serving = poolStatus(input);
    assert.deepEqual([serving.size, serving.used, serving.free], ["8", "2", "3"]); // 8 - 4 excluded - 1 used
    assert.deepEqual(serving.conflicts, [
      'cannot serve the entry "198.51.100.9-198.51.100.1" ends before it starts',
      "never hands out 198.51.100.4-198.51.100.7: it is in Service CIDR 198.51.100.4/30 (ServiceCIDR kubernetes)",
    ]);
    assert.deepEqual(serving.retained, retained);
    const ready = serving.conditions?.[0];
    assert.deepEqual([ready?.status, ready?.reason, ready?.lastTransitionTime], ["True", "EntriesUnservable", "2026-11-01T00:00:00Z"]);
    const deleting = poolStatus({ ...input, pool: { ...a, deleting: true, generation: 3 } });
    assert.deepEqual(deleting.conditions, [
      {
        type: "Ready",
        status: "False",
        reason: "Deleting",
        message: "being deleted; waits until Services release the 2 address(es) they hold of it: 198.51.100.0, 198.51.100.5",
        lastTransitionTime: "2026-11-27T12:00:00Z",
        observedGeneration: 3,
      },
    ]);
    assert.equal(deleting.free, "0");
  });
});

// ---- properties ----

const POOLS = [
  pool("p1", ["10.0.0.0/29", "fd00::/126"]),
  pool("p2", ["10.0.0.6-10.0.0.9"], { avoidBuggyIPs: true }),
  pool("p3", ["10.0.1.0/30"], { autoAssign: false }),
];
const ADDRESSES = ["10.0.0.0", "10.0.0.3", "10.0.0.7", "10.0.0.9", "10.0.1.1", "10.0.2.1", "fd00::1", "fd00::9"];

const arbitraryService = (index: number) =>
  fc
    .record({
      ipFamilies: fc.constantFrom<L2ServiceFacts["ipFamilies"][]>(["IPv4"], ["IPv6"], ["IPv4", "IPv6"]),
      namespace: fc.constantFrom("ns", "tenant"),
      class: fc.constantFrom(L2_CLASS, BGP_CLASS),
      port: fc.constantFrom(80, 443),
      sharingKey: fc.option(fc.constantFrom("k", "j"), { nil: undefined }),
      requestedIps: fc.option(fc.constantFrom(...ADDRESSES), { nil: undefined }),
      pool: fc.option(fc.constantFrom("p1", "p2", "p3", "p4"), { nil: undefined }),
      ingress: fc.subarray(ADDRESSES, { maxLength: 2 }),
      deleting: fc.boolean(),
      created: fc.integer({ min: 0, max: 5 }),
    })
    .map(({ port, created, ...fields }) => ({
      ...service(`s${index}`, fields),
      key: `${fields.namespace}/s${index}`,
      created: `2026-01-01T00:00:0${created}Z`,
      ports: [{ protocol: "TCP", port }],
    }));

const arbitraryWorld = fc.integer({ min: 1, max: 12 }).chain((count) =>
  fc.tuple(...Array.from({ length: count }, (_, index) => arbitraryService(index))),
);

/** Pool edits an operator can make: deleted, being deleted, shrunk, narrowed, a bad entry added. */
const arbitraryPools = fc
  .tuple(
    ...POOLS.map((facts) =>
      fc.constantFrom<(facts: PoolFacts) => PoolFacts | undefined>(
        (same) => same,
        () => undefined,
        (same) => ({ ...same, deleting: true }),
        (same) => ({ ...same, ranges: same.ranges.slice(1), unservable: ['"10.0.0.9-10.0.0.1" ends before it starts'] }),
        (same) => ({ ...same, namespaces: ["other"] }),
        (same) => ({ ...same, serviceSelector: { text: "tier=edge", requirements: [{ key: "tier", operator: "=", values: ["edge"] }] } }),
        (same) => ({ ...same, problem: "serviceSelector: unknown operator" }),
        (same) => ({ ...same, avoidBuggyIps: true }),
      ).map((edit) => edit(facts)),
    ),
  )
  .map((pools) => pools.filter((each): each is PoolFacts => each !== undefined));

/** What the network may come to use: node addresses, a segment with its gateway, a Service CIDR, pod CIDRs. */
const arbitraryNetwork = fc.record({
  nodes: fc.subarray(ADDRESSES).map((addresses) => [{ name: "n1", podCidrs: [], addresses }]),
  announcers: fc.subarray([
    { node: "n1", segments: ["10.0.0.0/29"], gateways: ["10.0.0.1"] },
    { node: "n2", segments: ["fd00::/126"], gateways: ["fd00::2"] },
  ]),
  serviceCidrs: fc.subarray([{ name: "kubernetes", cidrs: ["10.0.1.0/31", "fd00::/127"] }]),
  apiServers: fc.subarray(["10.0.0.8", "10.0.1.3"]),
});

describe("allocate: properties", () => {
  test("no two Services on one address unless of one namespace and class, with one key and no port in common", () => {
    fc.assert(
      fc.property(arbitraryWorld, (services) => {
        const { services: result } = run(services, POOLS);
        const byIp = new Map<string, L2ServiceFacts[]>();
        for (const facts of services) {
          const allocation = result.get(facts.key);
          const ips = allocation?.action === "allocate" ? allocation.ips : facts.deleting ? facts.ingress : [];
          for (const ip of ips) byIp.set(ip, [...(byIp.get(ip) ?? []), facts]);
          if (allocation?.action !== "allocate") continue;
          const heldBefore = allocation.ips.some((ip) => facts.ingress.includes(ip));
          if (!heldBefore) assert.equal(allocation.ips.length, facts.ipFamilies.length, "every family or nothing");
          allocation.ips.forEach((ip, index) => {
            if (facts.ingress.includes(ip)) return; // kept
            const number = ipNumber(ip);
            const owner = POOLS.find(({ name }) => name === allocation.pools[index]);
            assert.ok(number && owner && poolHolds(owner, number.family, number.value), `${ip} outside its pool`);
          });
        }
        for (const [ip, holders] of byIp)
          for (const a of holders)
            for (const b of holders) {
              if (a === b || a.deleting || b.deleting) continue;
              const sharing =
                a.sharingKey !== undefined &&
                a.sharingKey === b.sharingKey &&
                a.namespace === b.namespace &&
                a.class === b.class;
              assert.ok(sharing && a.ports[0]?.port !== b.ports[0]?.port, `${ip} held by ${a.key} and ${b.key}`);
            }
      }),
      { numRuns: 500 },
    );
  });

  test("allocate never gives an address the network uses, unless the Service held it already", () => {
    fc.assert(
      fc.property(arbitraryWorld, arbitraryNetwork, (services, network) => {
        const exclusionSet = new ExclusionSet(exclusions(network));
        const { services: result } = allocate({ services, pools: POOLS, exclusions: exclusionSet, served: WITH_BGP });
        for (const facts of services) {
          const allocation = result.get(facts.key);
          if (allocation?.action !== "allocate") continue;
          for (const ip of allocation.ips)
            if (!facts.ingress.includes(ip))
              assert.equal(exclusionSet.findIp(ip), undefined, `${facts.key} got ${ip}, which ${exclusionSet.findIp(ip)?.reason}`);
        }
      }),
      { numRuns: 500 },
    );
  });

  test("no sequence of pool edits and network changes changes a held address while its Service exists", () => {
    fc.assert(
      fc.property(
        arbitraryWorld,
        fc.array(fc.tuple(arbitraryPools, arbitraryNetwork), { minLength: 1, maxLength: 4 }),
        (services, edits) => {
          let current = written(services, run(services, POOLS).services);
          const held = new Map(current.map((facts) => [facts.key, facts.ingress]));
          for (const [pools, network] of edits) {
            const exclusionSet = new ExclusionSet(exclusions(network));
            const input = { services: current, pools, exclusions: exclusionSet, served: WITH_BGP };
            const { services: result } = allocate(input);
            for (const facts of current) {
              const before = held.get(facts.key) ?? [];
              if (facts.deleting || !before.length) continue;
              const allocation = result.get(facts.key);
              assert.ok(allocation?.action === "allocate", `${facts.key} lost ${before.join(",")}: ${allocation?.reason}`);
              assert.deepEqual(allocation.ips.filter((ip) => before.includes(ip)), before, `${facts.key} moved`);
            }
            current = written(current, result);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  test("an address drawn from a pool is its lowest free one: every address below it ends up held", () => {
    fc.assert(
      fc.property(arbitraryWorld, (services) => {
        const { services: result, used } = run(services, POOLS);
        // A Service being deleted holds its addresses until it is gone, in a pool or not.
        const deleting = services.flatMap((facts) => (facts.deleting && isOurs(facts, WITH_BGP) ? facts.ingress : []));
        const held = new Set([...[...used.values()].flatMap((ips) => [...ips]), ...deleting]);
        for (const facts of services) {
          const allocation = result.get(facts.key);
          const drawn = facts.requestedIps === undefined && facts.sharingKey === undefined;
          if (allocation?.action !== "allocate" || !drawn) continue;
          allocation.ips.forEach((ip, index) => {
            if (facts.ingress.includes(ip)) return; // kept, not drawn
            const { family, value } = ipNumber(ip) as NonNullable<ReturnType<typeof ipNumber>>;
            const owner = POOLS.find(({ name }) => name === allocation.pools[index]) as PoolFacts;
            for (const range of owner.ranges.filter((each) => each.family === family))
              for (let below = range.first; below <= range.last && below < value; below++) {
                if (owner.avoidBuggyIps && isBuggyIp(family, below)) continue;
                assert.ok(held.has(ipText(family, below)), `${facts.key} got ${ip}, but ${ipText(family, below)} is free`);
              }
          });
        }
      }),
      { numRuns: 500 },
    );
  });

  test("a restart (allocate again on what was written) changes nothing", () => {
    fc.assert(
      fc.property(arbitraryWorld, (services) => {
        const first = run(services, POOLS).services;
        const again = run(written(services, first), POOLS).services;
        const strip = (map: Map<string, Allocation>) =>
          [...map].map(([key, each]) => [key, each.action, each.action === "allocate" ? each.ips : each.rule]);
        assert.deepEqual(strip(again), strip(first));
        for (const each of again.values()) if (each.action === "allocate") assert.equal(each.rule, "kept");
      }),
      { numRuns: 500 },
    );
  });
});
