// The BGP method's decisions from plain data: which nodes a BGPPeer selects, which Services a node announces (rule
// by rule), a pool's attributes on its addresses' routes, a peer's session settings and what restarts a session.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import { type BGPPeer, peerFacts } from "../../../bgppeers/peer.ts";
import { loadBalancerNode } from "../../../loadbalancer/nodes.ts";
import type { HostAddress } from "../../../net/rtnetlink.ts";
import {
  type BgpRefusalRule,
  type BgpSelectionRule,
  bgpRefusal,
  decideBgpSelection,
  nextHopsFor,
  peerSession,
  poolAttributes,
  routerId,
  selectedPeers,
} from "./decide.ts";

const peer = (name: string, spec: Partial<NonNullable<BGPPeer["spec"]>> = {}) =>
  peerFacts({ metadata: { name }, spec: { peerAddress: "192.0.2.1", peerASN: 64512, myASN: 64513, ...spec } });

test("selection: a node speaks BGP while a sound BGPPeer's nodeSelector matches its labels (unset: every node)", () => {
  const edge = peer("edge", { nodeSelector: { matchLabels: { role: "edge" } } });
  const all = peer("all");
  const broken = peer("broken", { peerASN: 0 });
  const cases: [string, ReturnType<typeof peer>[], Record<string, string> | undefined, BgpSelectionRule, string[]][] =
    [
      ["no peers", [], { role: "edge" }, "no-peer-selects", []],
      ["the Node not known", [all], undefined, "node-unknown", []],
      ["a peer without selector", [all], {}, "peer-selects", ["all"]],
      ["the selector matches", [edge], { role: "edge" }, "peer-selects", ["edge"]],
      ["the selector does not match", [edge], { role: "core" }, "no-peer-selects", []],
      ["an unsound peer selects nobody", [broken], {}, "no-peer-selects", []],
      ["one of two", [edge, all, broken], { role: "core" }, "peer-selects", ["all"]],
    ];
  for (const [name, peers, labels, rule, selected] of cases) {
    const selection = decideBgpSelection(peers, labels);
    assert.equal(selection.rule, rule, name);
    assert.equal(selection.announce, rule === "peer-selects", name);
    assert.deepEqual(
      selectedPeers(peers, labels).map((p) => p.name),
      selected,
      name,
    );
  }
});

const readyNode = (extra: Partial<Node> = {}): Node => ({
  metadata: { name: "n1", labels: {} },
  status: { conditions: [{ type: "Ready", status: "True" }] },
  ...extra,
});
const service = (name: string, loadBalancerClass: string | undefined, policy = "Cluster"): Service => ({
  metadata: { namespace: "default", name },
  spec: { type: "LoadBalancer", ...(loadBalancerClass ? { loadBalancerClass } : {}), externalTrafficPolicy: policy },
});

test("refusal: the class (class-less only with --bgp-claim-classless), then this node's eligibility, then (Local) a ready endpoint here", () => {
  const bgp = "local-ccm.io/bgp";
  const excluded = readyNode({
    metadata: { name: "n1", labels: { "node.kubernetes.io/exclude-from-external-load-balancers": "true" } },
  });
  const notReady = readyNode({ status: { conditions: [{ type: "Ready", status: "False" }] } });
  const deleting = readyNode({ metadata: { name: "n1", deletionTimestamp: "2026-01-01T00:00:00Z" } });
  const autoscaler = readyNode({ spec: { taints: [{ key: "ToBeDeletedByClusterAutoscaler", effect: "NoSchedule" }] } });
  const cases: [string, Service, Node | undefined, boolean, BgpRefusalRule | undefined, boolean?][] = [
    ["class l2", service("a", "local-ccm.io/l2"), readyNode(), true, "other-class"],
    ["class l2, class-less claimed", service("a", "local-ccm.io/l2"), readyNode(), true, "other-class", true],
    ["no class", service("a", undefined), readyNode(), true, "other-class"],
    ["no class, claimed", service("a", undefined), readyNode(), true, undefined, true],
    ["no class, claimed, excluded", service("a", undefined), excluded, true, "not-eligible", true],
    ["bgp, Cluster, eligible", service("a", bgp), readyNode(), false, undefined],
    ["bgp, the Node not known", service("a", bgp), undefined, true, "not-eligible"],
    ["bgp, excluded", service("a", bgp), excluded, true, "not-eligible"],
    ["bgp, NotReady (also: shutting down)", service("a", bgp), notReady, true, "not-eligible"],
    ["bgp, Node being deleted", service("a", bgp), deleting, true, "not-eligible"],
    ["bgp, autoscaler taint", service("a", bgp), autoscaler, true, "not-eligible"],
    ["bgp, Local, endpoint here", service("a", bgp, "Local"), readyNode(), true, undefined],
    ["bgp, Local, no endpoint here", service("a", bgp, "Local"), readyNode(), false, "no-ready-endpoint"],
    ["bgp, Local, ineligible first", service("a", bgp, "Local"), notReady, true, "not-eligible"],
  ];
  for (const [name, svc, node, ready, rule, claimClassless = false] of cases) {
    const readyHere = (key: string) => ready && key === "default/a";
    const view = { node: node && loadBalancerNode(node, undefined), readyHere };
    assert.equal(bgpRefusal(svc, view, claimClassless)?.rule, rule, name);
  }
});

test("attributes: the pool of each ingress address (allocated-from, same order) gives communities and localPref", () => {
  const svc: Service = {
    metadata: { annotations: { "local-ccm.io/allocated-from": "blue,green" } },
    status: { loadBalancer: { ingress: [{ ip: "198.51.100.7" }, { ip: "2001:DB8::7" }] } },
  };
  const pools: Record<string, { spec: { bgp?: { communities?: string[]; localPref?: number } } }> = {
    blue: { spec: { bgp: { communities: ["65000:1"], localPref: 200 } } },
    green: { spec: {} },
  };
  const pool = (name: string) => pools[name];
  assert.deepEqual(poolAttributes(svc, "198.51.100.7", pool), { communities: ["65000:1"], localPref: 200 });
  assert.deepEqual(poolAttributes(svc, "2001:db8::7", pool), {}, "a pool without spec.bgp (canonical match)");
  assert.deepEqual(poolAttributes(svc, "198.51.100.9", pool), {}, "an address not of the Service");
  assert.deepEqual(poolAttributes(undefined, "198.51.100.7", pool), {}, "no Service");
  assert.deepEqual(poolAttributes(svc, "198.51.100.7", () => undefined), {}, "the pool not known");
});

test("session: settings from the peer and this node's next hop; only session fields change the key", () => {
  const facts = peer("tor", { holdTime: "9s", gracefulRestart: { restartTime: "60s" } });
  const session = peerSession(facts, { 4: "198.19.136.10" }, "secret", 0x0a0b0c0d);
  assert.deepEqual(session, {
    config: {
      myAsn: 64513,
      peerAsn: 64512,
      routerId: "198.19.136.10",
      holdTime: 9,
      families: [4],
      gracefulRestart: { restartTime: 60, restarting: true },
    },
    peerAddress: "192.0.2.1",
    peerPort: 179,
    localAddress: "198.19.136.10",
    password: "secret",
  });
  assert.equal(routerId("fd00::10", 0x0a0b0c0d), "10.11.12.13", "IPv6 only: from the node name's hash");
  const key = (spec: Partial<NonNullable<BGPPeer["spec"]>>, nextHop = "198.19.136.10") =>
    JSON.stringify(peerSession(peer("tor", spec), { 4: nextHop }, undefined, 1));
  assert.equal(key({}), key({ nodeSelector: { matchLabels: { a: "b" } } }), "the selector is no session setting");
  assert.notEqual(key({}), key({ holdTime: "30s" }));
  assert.notEqual(key({}), key({}, "198.19.136.11"));
  fc.assert(
    fc.property(fc.integer({ min: 3, max: 600 }), fc.integer({ min: 3, max: 600 }), (a, b) => {
      assert.equal(key({ holdTime: `${a}s` }) === key({ holdTime: `${b}s` }), a === b);
    }),
  );
});

/** A host address on interface `index`, settled and global unless `extra` says otherwise. */
const hostAddress = (address: string, index: number, extra: Partial<HostAddress> = {}): HostAddress => ({
  address,
  prefixLength: address.includes(":") ? 64 : 24,
  family: address.includes(":") ? 6 : 4,
  interfaceName: `eth${index}`,
  interfaceIndex: index,
  scope: "global",
  flags: { secondary: false, tentative: false, deprecated: false, dadFailed: false },
  ...extra,
});

test("next hops: the other family's from the source's interface, only a settled global address", () => {
  const flags = { secondary: false, tentative: false, deprecated: false, dadFailed: false };
  const v4 = hostAddress("198.19.136.10", 2);
  const v6 = (extra: Partial<HostAddress> = {}, address = "fd00::10") => hostAddress(address, 2, extra);
  const alone = { 4: "198.19.136.10" };
  const both = { 4: "198.19.136.10", 6: "fd00::10" };
  const temporary = v6({ flags: { ...flags, secondary: true } }, "fd00::9");
  const cases: [string, string, HostAddress[], { 4?: string; 6?: string }][] = [
    ["IPv4 source, IPv6 beside it", "198.19.136.10", [v4, v6()], both],
    ["IPv6 on another interface only", "198.19.136.10", [v4, hostAddress("fd00::10", 3)], alone],
    ["link-local IPv6 only", "198.19.136.10", [v4, v6({ scope: "link" }, "fe80::1")], alone],
    ["tentative (DAD under way)", "198.19.136.10", [v4, v6({ flags: { ...flags, tentative: true } })], alone],
    ["DAD failed", "198.19.136.10", [v4, v6({ flags: { ...flags, dadFailed: true } })], alone],
    ["deprecated", "198.19.136.10", [v4, v6({ flags: { ...flags, deprecated: true } })], alone],
    ["a temporary address skipped", "198.19.136.10", [v4, temporary, v6()], both],
    ["IPv6 source (as written), IPv4 beside it", "FD00::0010", [v4, v6()], both],
    ["a source no interface holds", "198.19.136.99", [v4, v6()], { 4: "198.19.136.99" }],
  ];
  for (const [name, source, addresses, expected] of cases)
    assert.deepEqual(nextHopsFor(source, addresses), expected, name);
});

test("session families: the peer's address's family first, the other where this node has a next hop of it", () => {
  const families = (peerAddress: string, nextHops: { 4?: string; 6?: string }) =>
    peerSession(peer("tor", { peerAddress }), nextHops, undefined, 0x0a0b0c0d).config;
  assert.deepEqual(families("192.0.2.1", { 4: "198.19.136.10" }).families, [4]);
  assert.deepEqual(families("192.0.2.1", { 4: "198.19.136.10", 6: "fd00::10" }).families, [4, 6]);
  assert.deepEqual(families("2001:db8::1", { 6: "fd00::10" }).families, [6]);
  const both = families("2001:db8::1", { 6: "fd00::10", 4: "198.19.136.10" });
  assert.deepEqual([both.families, both.routerId], [[6, 4], "198.19.136.10"], "an IPv4 address is the identifier");
  assert.equal(families("2001:db8::1", { 6: "fd00::10" }).routerId, "10.11.12.13", "IPv6 only: the hash");
  assert.throws(() => families("2001:db8::1", { 4: "198.19.136.10" }), /no IPv6 next hop towards 2001:db8::1/);
});
