// The local cluster's IPv6 layout (localcluster/layout.ts, router.ts's routerLayout), pure, no cluster: every address
// and CIDR is spelt as `ip -j` prints it and as the agent takes a pod CIDR (canonical), since the e2e tests compare
// the router's routes with them as text; each lies in its slot's networks, and no two slots share an address or a
// network.
import assert from "node:assert/strict";
import { test } from "node:test";
import { clusterLayout, MAX_NODES, MAX_SLOTS, nodeLayout } from "../../localcluster/layout.ts";
import { routerLayout } from "../../localcluster/router.ts";
import { podCidrRefusal } from "../../src/agent/announcer/bgp/podcidrs.ts";
import { type Cidr, canonicalIp, cidrContains, cidrWithin, parseCidr, prefixOf } from "../../src/net/ip.ts";

const SLOTS = Array.from({ length: MAX_SLOTS }, (_, slot) => slot);
const cidr = (text: string) => parseCidr(text) as Cidr;

function slotIPv6(slot: number) {
  const cluster = clusterLayout(slot);
  const nodes = Array.from({ length: MAX_NODES }, (_, index) => nodeLayout(slot, index, `node-${index}`));
  return {
    publicNetwork: prefixOf(cluster.clientIP6, 64),
    podNetwork: cluster.podNetwork6,
    nodes,
    addresses: [cluster.clientIP6, ...nodes.map((n) => n.publicIP6), ...[0, 1].map((i) => routerLayout(slot, i).ip6)],
  };
}

test("IPv6: canonical, each node's pod CIDR one the agent announces, in its slot's pod network, with its gateway", () => {
  for (const slot of SLOTS) {
    const { publicNetwork, podNetwork, nodes, addresses } = slotIPv6(slot);
    assert.equal(prefixOf(cidr(podNetwork).address, 64), podNetwork);
    for (const address of [...addresses, ...nodes.map((n) => n.podGateway6)])
      assert.equal(canonicalIp(address), address, `slot ${slot}: ${address}`);
    for (const address of addresses) assert.ok(cidrContains(cidr(publicNetwork), address), `${address} in ${publicNetwork}`);
    for (const node of nodes) {
      assert.equal(podCidrRefusal(node.podCIDR6), undefined, node.podCIDR6);
      assert.ok(cidrWithin(cidr(node.podCIDR6), cidr(podNetwork)), `${node.podCIDR6} in ${podNetwork}`);
      assert.ok(cidrContains(cidr(node.podCIDR6), node.podGateway6), `${node.podGateway6} in ${node.podCIDR6}`);
    }
  }
});

test("IPv6: no two slots, nodes or routers share an address, a pod CIDR or a network", () => {
  const slots = SLOTS.map(slotIPv6);
  const addresses = slots.flatMap((s) => s.addresses);
  assert.equal(new Set(addresses).size, addresses.length, addresses.join(" "));
  const podCidrs = slots.flatMap((s) => s.nodes.map((n) => n.podCIDR6));
  assert.equal(new Set(podCidrs).size, podCidrs.length, podCidrs.join(" "));
  // Each pod CIDR lies in its slot's pod network (above): these apart, so are they.
  const networks = slots.flatMap((s) => [s.publicNetwork, s.podNetwork]);
  for (const [i, a] of networks.entries())
    for (const b of networks.slice(i + 1))
      assert.ok(!cidrWithin(cidr(a), cidr(b)) && !cidrWithin(cidr(b), cidr(a)), `${a} and ${b} overlap`);
});
