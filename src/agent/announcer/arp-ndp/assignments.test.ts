// The node's segments and what it announces where, from plain data (tables).
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { Service } from "kubernetes-types/core/v1.js";
import { cidrContains } from "../../../net/ip.ts";
import type { HostAddress, HostLink } from "../../../net/rtnetlink.ts";
import { ANNOUNCER_ANNOTATION } from "../../../pools/announcement.ts";
import { decideDesired } from "../desired.ts";
import { assignedHere, decideAssignments, type AssignmentInput } from "./assignments.ts";
import { nodeSegments, segmentsAnnotation, unusableInterfaces } from "./segments.ts";

const links: HostLink[] = [
  { index: 1, name: "lo", up: true },
  { index: 2, name: "eth0", mac: "02:00:00:00:00:02", up: true },
  { index: 3, name: "eth1", mac: "02:00:00:00:00:03", up: true },
  { index: 4, name: "wg0", up: true },
];

/** An address as netlink lists it: "198.18.0.2/24@2", scope global unless given, no flags unless given. */
function listed(text: string, scope: HostAddress["scope"] = "global", flags: Partial<HostAddress["flags"]> = {}) {
  const [cidr = "", index = ""] = text.split("@");
  const [address = "", length = ""] = cidr.split("/");
  return {
    address,
    prefixLength: Number(length),
    family: address.includes(":") ? 6 : 4,
    interfaceIndex: Number(index),
    interfaceName: links.find((link) => link.index === Number(index))?.name ?? "",
    scope,
    flags: { secondary: false, tentative: false, deprecated: false, dadFailed: false, ...flags },
  } satisfies HostAddress;
}

const host: HostAddress[] = [
  listed("127.0.0.1/8@1", "host"),
  listed("198.18.0.2/24@2"),
  listed("198.18.0.3/24@2", "global", { secondary: true }), // same prefix: one segment
  listed("198.18.7.9/20@3"),
  listed("198.18.7.10/28@3"),
  listed("10.9.0.1/24@4"), // no MAC
  listed("fe80::2/64@2", "link"),
  listed("fd00:198:18::2/64@2"),
  listed("fd00:198:19::2/64@3", "global", { tentative: true }),
  listed("fd00:198:20::2/64@3", "global", { dadFailed: true }),
  listed("fd00:198:21::2/64@3", "global", { deprecated: true }),
];

test("segments: global, settled addresses on links with a MAC (within --lb-l2-interfaces), masked, unique, sorted", () => {
  const cases: [string, string[], string][] = [
    ["every link with a MAC", [], "198.18.0.0/20,198.18.0.0/24,198.18.7.0/28,fd00:198:18::/64,fd00:198:21::/64"],
    ["eth0 only", ["eth0"], "198.18.0.0/24,fd00:198:18::/64"],
    ["a link without a MAC", ["wg0"], ""],
    ["an absent link", ["eth9"], ""],
  ];
  for (const [name, interfaces, expected] of cases)
    assert.equal(segmentsAnnotation(nodeSegments(host, links, interfaces)), expected, name);
  assert.deepEqual(unusableInterfaces(links, ["eth1", "wg0", "eth9"]), ["wg0", "eth9"]);
});

test("segments: a link that is down (no carrier, or set down) has none: what was announced there moves", () => {
  const down = links.map((link) => (link.name === "eth1" ? { ...link, up: false } : link));
  assert.equal(segmentsAnnotation(nodeSegments(host, down, [])), "198.18.0.0/24,fd00:198:18::/64");
  assert.equal(segmentsAnnotation(nodeSegments(host, down, ["eth1"])), "");
  assert.deepEqual(unusableInterfaces(down, ["eth1"]), [], "down, not unusable: it may come back");
  const services = [service("web", ["198.18.7.20"])];
  const decision = assign({ services, segments: nodeSegments(host, down, []), hostAddresses: [] });
  assert.deepEqual(
    decision.skipped.map((skip) => skip.rule),
    ["no-segment"],
    "assigned to this node, its link down: not announced anywhere",
  );
});

const NODE = "node-a";
/** What the loop hands the method (desired.ts, with the method's own rule), placed on the node's links. */
function assign({ services, ...rest }: Omit<AssignmentInput, "desired"> & { services: Service[] }) {
  return decideAssignments({ desired: decideDesired(services, assignedHere(NODE)), ...rest });
}
function service(name: string, ips: string[], changes: { announcer?: string; type?: string; deleting?: boolean } = {}) {
  return {
    metadata: {
      namespace: "default",
      name,
      annotations: { [ANNOUNCER_ANNOTATION]: changes.announcer ?? NODE },
      ...(changes.deleting ? { deletionTimestamp: "2026-01-01T00:00:00Z" } : {}),
    },
    spec: { type: changes.type ?? "LoadBalancer" },
    status: { loadBalancer: { ingress: ips.map((ip) => ({ ip })) } },
  } satisfies Service;
}

test("assignments: an address goes to the link whose (longest) prefix holds it; the rest is skipped by rule", () => {
  const services = [
    service("web", ["198.18.0.50", "fd00:198:18::50"]),
    service("shared", ["198.18.0.50"]), // a sharing key: announced once
    service("narrow", ["198.18.7.5"]), // in eth1's /28 and /20: one link either way
    service("other", ["198.18.0.60"], { announcer: "node-b" }),
    service("cluster-ip", ["198.18.0.61"], { type: "ClusterIP" }),
    service("gone", ["198.18.0.62"], { deleting: true }),
    service("odd", ["198.18.0.063", "::ffff:198.18.0.64", "198.18.0.2", "203.0.113.1"]),
  ];
  const segments = nodeSegments(host, links, []);
  const hostAddresses = host.map((address) => address.address);
  const decision = assign({ services, segments, hostAddresses });
  assert.deepEqual(
    Object.fromEntries([...decision.byLink].map(([name, entry]) => [name, entry.addresses])),
    { eth0: ["198.18.0.50", "fd00:198:18::50"], eth1: ["198.18.7.5"] },
  );
  assert.deepEqual(decision.byLink.get("eth1")?.link, { index: 3, name: "eth1", mac: "02:00:00:00:00:03" });
  assert.deepEqual(
    decision.skipped.map((skip) => [skip.service, skip.address, skip.rule]),
    [
      ["default/other", undefined, "other-announcer"],
      ["default/cluster-ip", undefined, "not-load-balancer"],
      ["default/gone", undefined, "deleting"],
      ["default/odd", "198.18.0.063", "not-an-ip"],
      ["default/odd", "::ffff:198.18.0.64", "not-an-ip"],
      ["default/odd", "198.18.0.2", "host-address"],
      ["default/odd", "203.0.113.1", "no-segment"],
    ],
  );
  assert.equal(decision.skipped.at(-1)?.reason, "no link of this node has a prefix holding 203.0.113.1");
});

test("assignments: only an exact annotation counts (the label may be a hash shared with another node)", () => {
  const segments = nodeSegments(host, links, []);
  for (const announcer of ["node-a ", "Node-a", "node-a.example", ""]) {
    const services = [service("web", ["198.18.0.50"], { announcer })];
    const decision = assign({ services, segments, hostAddresses: [] });
    assert.equal(decision.byLink.size, 0, JSON.stringify(announcer));
    assert.equal(decision.skipped[0]?.rule, "other-announcer");
  }
});

test("assignments (property): each address once, on a link with the longest prefix holding it, or skipped", () => {
  const octet = fc.integer({ min: 0, max: 255 });
  const length = fc.integer({ min: 16, max: 30 });
  const hostAddress = fc.record({ third: octet, fourth: octet, length, index: fc.constantFrom(2, 3) });
  const ingress = fc.array(fc.tuple(octet, octet), { maxLength: 4 });
  fc.assert(
    fc.property(fc.array(hostAddress, { maxLength: 5 }), fc.array(ingress, { maxLength: 4 }), (hosts, ips) => {
      const listing = hosts.map((h) => listed(`198.18.${h.third}.${h.fourth}/${h.length}@${h.index}`));
      const segments = nodeSegments(listing, links, []);
      const services = ips.map((pairs, i) => service(`s${i}`, pairs.map(([a, b]) => `198.18.${a}.${b}`)));
      const hostAddresses = listing.map((address) => address.address);
      const decision = assign({ services, segments, hostAddresses });
      const announced = [...decision.byLink.values()].flatMap(({ link, addresses }) =>
        addresses.map((address) => [link, address] as const),
      );
      assert.equal(new Set(announced.map(([, address]) => address)).size, announced.length, "each address once");
      for (const [link, address] of announced) {
        const holding = segments.filter((segment) => cidrContains(segment.cidr, address));
        const longest = Math.max(...holding.map((segment) => segment.cidr.prefixLength));
        assert.ok(holding.some((s) => s.link.index === link.index && s.cidr.prefixLength === longest), address);
      }
      const all = new Set(ips.flat().map(([a, b]) => `198.18.${a}.${b}`));
      const skipped = new Set(decision.skipped.map((skip) => skip.address));
      for (const address of all) assert.ok(announced.some(([, a]) => a === address) !== skipped.has(address), address);
    }),
  );
});
