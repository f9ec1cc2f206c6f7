// What the network uses, from plain data (tables): each exclusion's rule and reason, and the searchable set.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { ExclusionSet, exclusions, type NetworkFacts } from "./exclusions.ts";
import { ipNumber, ipText } from "./ranges.ts";

const BASE = ipNumber("10.0.0.0")?.value ?? 0n;
const none: NetworkFacts = { announcers: [], serviceCidrs: [], nodes: [], apiServers: [] };

/** "198.51.100.1 gateway: is the default gateway of …" per address asked. */
function told(facts: Partial<NetworkFacts>, ips: string[]): string[] {
  const set = new ExclusionSet(exclusions({ ...none, ...facts }));
  return ips.map((ip) => {
    const found = set.findIp(ip);
    return found ? `${ip} ${found.rule}: ${found.reason}` : `${ip} free`;
  });
}

test("segments: gateway, network and broadcast (IPv4), subnet-router anycast (IPv6); none for /31, /127", () => {
  const announcers = [
    {
      node: "n1",
      segments: ["198.51.100.0/24", "2001:db8::/64", "192.0.2.0/31"],
      gateways: ["198.51.100.1", "fe80::1"],
    },
    { node: "n2", segments: ["203.0.113.7/30"], gateways: ["203.0.113.5"] },
  ];
  const ips = ["198.51.100.0", "198.51.100.1", "198.51.100.2", "198.51.100.255", "2001:db8::", "2001:db8::1"];
  assert.deepEqual(told({ announcers }, [...ips, "fe80::1", "192.0.2.0", "192.0.2.1", "203.0.113.4", "203.0.113.5"]), [
    "198.51.100.0 network-address: is the network address of segment 198.51.100.0/24 (node n1)",
    "198.51.100.1 gateway: is the default gateway of segment 198.51.100.0/24 (node n1)",
    "198.51.100.2 free",
    "198.51.100.255 broadcast-address: is the broadcast address of segment 198.51.100.0/24 (node n1)",
    "2001:db8:: network-address: is the subnet-router anycast address of segment 2001:db8::/64 (node n1)",
    "2001:db8::1 free",
    "fe80::1 gateway: is a default gateway of node n1",
    "192.0.2.0 free",
    "192.0.2.1 free",
    "203.0.113.4 network-address: is the network address of segment 203.0.113.4/30 (node n2)",
    "203.0.113.5 gateway: is the default gateway of segment 203.0.113.4/30 (node n2)",
  ]);
});

test("Service CIDRs, pod CIDRs, API server endpoints and node addresses; what does not parse is left out", () => {
  const facts = {
    serviceCidrs: [{ name: "kubernetes", cidrs: ["10.96.0.0/12", "fd00:10:96::/112"] }],
    nodes: [{ name: "n1", podCidrs: ["10.244.1.0/24", "garbage"], addresses: ["192.168.1.10", "n1.example"] }],
    apiServers: ["192.168.1.2"],
  };
  const ips = ["10.111.255.255", "10.112.0.0", "fd00:10:96::ff", "10.244.1.77", "192.168.1.10", "192.168.1.2"];
  assert.deepEqual(told(facts, ips), [
    "10.111.255.255 service-cidr: is in Service CIDR 10.96.0.0/12 (ServiceCIDR kubernetes)",
    "10.112.0.0 free",
    "fd00:10:96::ff service-cidr: is in Service CIDR fd00:10:96::/112 (ServiceCIDR kubernetes)",
    "10.244.1.77 pod-cidr: is in pod CIDR 10.244.1.0/24 of node n1",
    "192.168.1.10 node-address: is an address of node n1",
    "192.168.1.2 api-server: is an endpoint of the API server (EndpointSlices of default/kubernetes)",
  ]);
});

test("overlapping exclusions: the lowest-starting one is told, whatever the order they came in", () => {
  const facts = {
    nodes: [{ name: "n1", podCidrs: ["10.0.0.0/16"], addresses: ["10.0.3.4"] }],
    serviceCidrs: [{ name: "wide", cidrs: ["10.0.2.0/23"] }],
  };
  assert.deepEqual(told(facts, ["10.0.3.4", "10.1.0.0"]), [
    "10.0.3.4 pod-cidr: is in pod CIDR 10.0.0.0/16 of node n1",
    "10.1.0.0 free",
  ]);
});

test("find() agrees with a scan of every exclusion, for any set of ranges", () => {
  const range = fc
    .tuple(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 40 }))
    .map(([first, length]) => `${ipText("IPv4", BASE + BigInt(first))}-${ipText("IPv4", BASE + BigInt(first + length))}`);
  fc.assert(
    fc.property(fc.array(range, { maxLength: 12 }), fc.integer({ min: 0, max: 400 }), (ranges, probe) => {
      const facts = { ...none, serviceCidrs: ranges.map((cidr, index) => ({ name: `s${index}`, cidrs: [cidr] })) };
      const list = exclusions(facts);
      const set = new ExclusionSet(list);
      const value = BASE + BigInt(probe);
      const covering = set.all.filter((each) => each.family === "IPv4" && each.first <= value && value <= each.last);
      assert.equal(set.find("IPv4", value), covering[0], ipText("IPv4", value));
    }),
    { numRuns: 500 },
  );
});
