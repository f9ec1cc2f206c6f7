import assert from "node:assert/strict";
import { test } from "node:test";
import type { NodeAddress } from "kubernetes-types/core/v1.js";
import { parseProvidedNodeIPs } from "./addresses.ts";
import { checkLocalNode, type LocalNodeVerdict } from "./localnode.ts";

const internalIP = (address: string): NodeAddress => ({ type: "InternalIP", address });
const externalIP = (address: string): NodeAddress => ({ type: "ExternalIP", address });
const hostname = (address: string): NodeAddress => ({ type: "Hostname", address });

// This host: loopback, its LAN address and a public IPv6 address (as netlink lists them).
const HOST = ["127.0.0.1", "198.18.0.10", "::1", "2001:db8::10"];

const cases: [string, { annotation?: string; addresses: NodeAddress[]; host?: string[] }, LocalNodeVerdict][] = [
  [
    "provided-node-ip is ours",
    { annotation: "198.18.0.10", addresses: [internalIP("198.18.0.10"), hostname("n1")] },
    { local: true, rule: "provided-node-ip", reason: "its provided-node-ip 198.18.0.10 is an address of this host" },
  ],
  [
    "provided-node-ip read as Kubernetes reads it (leading zeros are decimal)",
    { annotation: "198.018.000.010", addresses: [] },
    { local: true, rule: "provided-node-ip", reason: "its provided-node-ip 198.18.0.10 is an address of this host" },
  ],
  [
    "dual-stack provided-node-ip: one family ours is enough",
    { annotation: "198.18.9.9,2001:DB8:0::10", addresses: [] },
    { local: true, rule: "provided-node-ip", reason: "its provided-node-ip 2001:db8::10 is an address of this host" },
  ],
  [
    "provided-node-ip of another host: refused, though an address written earlier is ours",
    { annotation: "198.18.0.12", addresses: [internalIP("198.18.0.12"), externalIP("198.18.0.10")] },
    {
      local: false,
      rule: "provided-node-ip",
      reason: "none of its provided-node-ip (198.18.0.12) is an address of this host (127.0.0.1, 198.18.0.10, ::1, 2001:db8::10)",
    },
  ],
  [
    "no annotation: kubelet's InternalIP decides",
    { addresses: [hostname("n1"), internalIP("198.18.0.10")] },
    { local: true, rule: "node-addresses", reason: "its InternalIP/ExternalIP 198.18.0.10 is an address of this host" },
  ],
  [
    "no annotation, an ExternalIP is ours",
    { addresses: [internalIP("10.0.0.5"), externalIP("2001:db8:0:0::10")] },
    { local: true, rule: "node-addresses", reason: "its InternalIP/ExternalIP 2001:db8::10 is an address of this host" },
  ],
  [
    "no annotation, addresses of another host: refused; names are not IPs and are not compared",
    { addresses: [internalIP("198.18.0.12"), internalIP("198.18.0.12"), hostname("198.18.0.10")] },
    {
      local: false,
      rule: "node-addresses",
      reason: "none of its InternalIP/ExternalIP (198.18.0.12) is an address of this host (127.0.0.1, 198.18.0.10, ::1, 2001:db8::10)",
    },
  ],
  [
    "an unspecified provided-node-ip is a family preference: the addresses decide",
    { annotation: "::", addresses: [internalIP("198.18.0.12")] },
    {
      local: false,
      rule: "node-addresses",
      reason: "none of its InternalIP/ExternalIP (198.18.0.12) is an address of this host (127.0.0.1, 198.18.0.10, ::1, 2001:db8::10)",
    },
  ],
  [
    "no IP at all: cannot be checked, allowed",
    { annotation: "", addresses: [hostname("n1"), internalIP("not-an-ip")] },
    {
      local: true,
      rule: "no-node-ip",
      reason: "the Node has no IP yet (no provided-node-ip, InternalIP or ExternalIP): cannot tell whether it is this host",
    },
  ],
  [
    "a host with many addresses is named briefly",
    { annotation: "10.9.9.9", addresses: [], host: Array.from({ length: 8 }, (_, i) => `10.0.0.${i + 1}`) },
    {
      local: false,
      rule: "provided-node-ip",
      reason:
        "none of its provided-node-ip (10.9.9.9) is an address of this host " +
        "(10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5, 10.0.0.6 and 2 more)",
    },
  ],
  [
    "a host with no address at all",
    { annotation: "10.9.9.9", addresses: [], host: [] },
    { local: false, rule: "provided-node-ip", reason: "none of its provided-node-ip (10.9.9.9) is an address of this host (none)" },
  ],
];

for (const [name, input, expected] of cases) {
  test(`local node: ${name}`, () => {
    const verdict = checkLocalNode({
      providedNodeIPs: parseProvidedNodeIPs(input.annotation),
      addresses: input.addresses,
      hostAddresses: input.host ?? HOST,
    });
    assert.deepEqual(verdict, expected);
  });
}
