// The route controller's decisions from plain data: which of a Node's pod CIDRs its agent announces (entry by entry,
// hostile ones refused by rule), and what its NetworkUnavailable condition says given which peers hold them.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { Node } from "kubernetes-types/core/v1.js";
import { prefixOf } from "../../../net/ip.ts";
import {
  decideNetworkCondition,
  decidePodCidrs,
  type NetworkConditionRule,
  type PodCidrRefusalRule,
  podCidrRefusal,
  type PodCidrRule,
} from "./podcidrs.ts";

test("an entry: announced only when canonical, a pod range's size, and unicast; each refusal names its rule", () => {
  const cases: [string, PodCidrRefusalRule | undefined][] = [
    ["10.244.1.0/24", undefined],
    ["fd00:10:244:1::/64", undefined],
    ["10.0.0.0/8", undefined], // the widest IPv4 one
    ["2001:db8::/32", undefined], // the widest IPv6 one
    ["10.244.1.0/31", undefined],
    ["garbage", "not-a-cidr"],
    ["10.244.1.0", "not-a-cidr"], // a bare IP, which netip would read as a /32
    ["10.244.1.0/33", "not-a-cidr"],
    ["010.244.1.0/24", "not-a-cidr"], // leading zeros: octal to some readers
    ["10.244.1.0/024", "not-a-cidr"],
    ["::ffff:10.244.0.0/120", "not-a-cidr"], // IPv4-mapped: either family
    ["fe80::/64%eth0", "not-a-cidr"],
    ["10.244.1.5/24", "not-canonical"], // host bits set
    ["FD00:10:244:1::/64", "not-canonical"],
    ["fd00:10:244:1:0:0:0:0/64", "not-canonical"],
    [" 10.244.1.0/24", "not-a-cidr"],
    ["0.0.0.0/0", "too-wide"], // the default route: every packet the router has no better route for
    ["::/0", "too-wide"],
    ["10.0.0.0/7", "too-wide"],
    ["2001:db8::/31", "too-wide"],
    ["10.244.1.7/32", "host-route"], // a host's address, or a LoadBalancer address's route
    ["fd00::7/128", "host-route"],
    ["127.0.0.0/24", "not-unicast"],
    ["169.254.0.0/24", "not-unicast"],
    ["224.1.0.0/16", "not-unicast"],
    ["240.0.0.0/8", "not-unicast"],
    ["fe80::/64", "not-unicast"],
    ["ff02::/64", "not-unicast"],
  ];
  for (const [text, rule] of cases) assert.equal(podCidrRefusal(text)?.rule, rule, text);
  assert.equal(podCidrRefusal("10.244.1.5/24")?.reason, '"10.244.1.5/24" is not canonical: 10.244.1.0/24 is');
});

test("an entry (property): whatever is announced is canonical, of a pod range's size, never a host route", () => {
  const v4 = fc
    .tuple(fc.array(fc.nat(255), { minLength: 4, maxLength: 4 }), fc.nat(32))
    .map(([bytes, length]) => `${bytes.join(".")}/${length}`);
  const v6 = fc
    .tuple(fc.array(fc.nat(0xffff), { minLength: 8, maxLength: 8 }), fc.nat(128))
    .map(([groups, length]) => `${groups.map((g) => g.toString(16)).join(":")}/${length}`);
  fc.assert(
    fc.property(fc.oneof(v4, v6, fc.string()), (text) => {
      if (podCidrRefusal(text)) return;
      const [address = "", length = ""] = text.split("/");
      assert.equal(prefixOf(address, Number(length)), text, "canonical");
      const family = address.includes(":") ? 6 : 4;
      assert.ok(Number(length) >= (family === 4 ? 8 : 32), "not too wide");
      assert.ok(Number(length) < (family === 4 ? 32 : 128), "no host route");
    }),
  );
});

const node = (spec: Node["spec"], deleting = false): Node => ({
  metadata: { name: "node-a", ...(deleting ? { deletionTimestamp: "2026-01-01T00:00:00Z" } : {}) },
  spec,
});

test("a Node: its own pod CIDRs, both families, each once; none while unknown or being deleted", () => {
  const cases: [string, Node | undefined, PodCidrRule, string[], string[]][] = [
    ["not known", undefined, "node-unknown", [], []],
    ["no pod CIDR yet", node({}), "no-pod-cidrs", [], []],
    ["IPv4", node({ podCIDRs: ["10.244.1.0/24"] }), "announce", ["10.244.1.0/24"], []],
    [
      "dual-stack",
      node({ podCIDR: "10.244.1.0/24", podCIDRs: ["10.244.1.0/24", "fd00:10:244:1::/64"] }),
      "announce",
      ["10.244.1.0/24", "fd00:10:244:1::/64"],
      [],
    ],
    ["only the old field", node({ podCIDR: "10.244.2.0/24" }), "announce", ["10.244.2.0/24"], []],
    ["repeated", node({ podCIDRs: ["10.244.1.0/24", "10.244.1.0/24"] }), "announce", ["10.244.1.0/24"], []],
    [
      "one refused, one announced",
      node({ podCIDRs: ["0.0.0.0/0", "fd00:10:244:1::/64"] }),
      "announce",
      ["fd00:10:244:1::/64"],
      ["0.0.0.0/0 too-wide"],
    ],
    [
      "every one refused",
      node({ podCIDRs: ["10.244.1.5/24", "198.18.0.7/32"] }),
      "no-pod-cidrs",
      [],
      ["10.244.1.5/24 not-canonical", "198.18.0.7/32 host-route"],
    ],
    ["being deleted", node({ podCIDRs: ["10.244.1.0/24"] }, true), "node-deleting", [], []],
  ];
  for (const [name, object, rule, cidrs, refused] of cases) {
    const decision = decidePodCidrs(object);
    assert.equal(decision.rule, rule, name);
    assert.deepEqual(decision.cidrs, cidrs, name);
    assert.deepEqual(
      decision.refused.map((skip) => `${skip.address} ${skip.rule}`),
      refused,
      name,
    );
  }
});

test("NetworkUnavailable: False once every pod CIDR is held, True when one is not (after the grace), else untouched", () => {
  const dual = decidePodCidrs(node({ podCIDRs: ["10.244.1.0/24", "fd00:10:244:1::/64"] }));
  const v4 = decidePodCidrs(node({ podCIDRs: ["10.244.1.0/24"] }));
  const held = (entries: Record<string, string[]>) => new Map(Object.entries(entries));
  const cases: [string, Parameters<typeof decideNetworkCondition>[0], NetworkConditionRule, string | undefined][] = [
    ["no pod CIDR", { pod: decidePodCidrs(node({})), held: held({}), settled: true }, "no-pod-cidrs", undefined],
    ["no Node", { pod: decidePodCidrs(undefined), held: held({}), settled: true }, "no-pod-cidrs", undefined],
    [
      "being deleted",
      { pod: decidePodCidrs(node({ podCIDRs: ["10.244.1.0/24"] }, true)), held: held({}), settled: true },
      "no-pod-cidrs",
      undefined,
    ],
    ["one peer holds it", { pod: v4, held: held({ tor: ["10.244.1.0/24"] }), settled: false }, "routed", "False"],
    [
      "each family by another peer",
      { pod: dual, held: held({ a: ["10.244.1.0/24"], b: ["fd00:10:244:1::/64"] }), settled: true },
      "routed",
      "False",
    ],
    ["the IPv6 one by none", { pod: dual, held: held({ a: ["10.244.1.0/24"] }), settled: true }, "not-routed", "True"],
    ["none yet, in the grace", { pod: v4, held: held({}), settled: false }, "settling", undefined],
    ["none, after it", { pod: v4, held: held({ tor: [] }), settled: true }, "not-routed", "True"],
    [
      "a refused entry is never routed",
      { pod: decidePodCidrs(node({ podCIDRs: ["10.244.1.5/24"] })), held: held({}), settled: true },
      "not-routed",
      "True",
    ],
  ];
  for (const [name, input, rule, status] of cases) {
    const decision = decideNetworkCondition(input);
    assert.equal(decision.rule, rule, name);
    assert.equal(decision.status, status, name);
    if (status === "False") assert.equal(decision.reason, "RouteCreated", name);
    if (status === "True") assert.equal(decision.reason, "NoRouteCreated", name);
  }
  const routed = decideNetworkCondition({ pod: v4, held: held({ b: ["10.244.1.0/24"], a: ["10.244.1.0/24"] }), settled: true });
  assert.equal(routed.message, "local-ccm announces 10.244.1.0/24 over BGP to BGPPeer a, b", "peers named, sorted");
  const unrouted = decideNetworkCondition({ pod: dual, held: held({ a: ["10.244.1.0/24"] }), settled: true });
  assert.equal(unrouted.message, "local-ccm has no BGP peer holding fd00:10:244:1::/64");
});
