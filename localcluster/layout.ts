// The names and addresses of a local cluster's slot and of its nodes (the network in cluster.ts's header): pure, so
// what a killed run left is found from the slot alone. The IPv6 ones (suffix 6, used by dual-stack clusters only) are
// ULAs in fd00:19::/32, outside the test worlds' fd00:198::/32, spelt as the kernel prints them (RFC 5952), so that
// they compare equal to what `ip -j` shows.

export const MAX_SLOTS = 4;
export const MAX_NODES = 8;

/** Names and addresses of cluster slot `slot`: pure, so leftovers are found from the slot alone. */
export function clusterLayout(slot: number) {
  return {
    slot,
    bridge: `lccm${slot}br`,
    gateway: `198.19.${128 + slot}.1`,
    /** The nodes' default gateway, on their public network. */
    publicGateway: `198.19.${136 + slot}.1`,
    serviceNetwork: `198.19.${144 + slot}.0/24`,
    /** Every node's pod CIDR (nodeLayout()) is in it. */
    podNetwork: `198.19.${160 + 8 * slot}.0/21`,
    /** The client host: its namespace (under the slot's prefix), root-side veth and public address. */
    clientNetns: `lccm-c${slot}-client`,
    clientVeth: `lccm${slot}vc`,
    clientIP: `198.19.${136 + slot}.2`,
    /** On the public network's IPv6 /64, fd00:19:(136+slot)::/64 (nodes ::(10+i), routers ::(3+index)). */
    clientIP6: `fd00:19:${136 + slot}::2`,
    /** Every node's IPv6 pod CIDR (a /80 each) is in it. */
    podNetwork6: `fd00:19:${160 + 8 * slot}::/64`,
    /** Routing table of the rule that blackholes what arrives from the bridge for elsewhere. */
    table: 19800 + slot,
    /** Prefix of its network namespaces and of its cgroups in every hierarchy. */
    prefix: `lccm-c${slot}-`,
  };
}

export function nodeLayout(slot: number, index: number, name: string) {
  const { prefix } = clusterLayout(slot);
  return {
    name,
    index,
    netnsName: `${prefix}${name}`,
    ip: `198.19.${128 + slot}.${10 + index}`,
    publicIP: `198.19.${136 + slot}.${10 + index}`,
    podCIDR: `198.19.${160 + 8 * slot + index}.0/24`,
    podGateway: `198.19.${160 + 8 * slot + index}.1`,
    publicIP6: `fd00:19:${136 + slot}::${10 + index}`,
    podCIDR6: `fd00:19:${160 + 8 * slot}:0:${10 + index}::/80`,
    podGateway6: `fd00:19:${160 + 8 * slot}:0:${10 + index}::1`,
    rootVeth: `lccm${slot}v${index}`,
    cgroup: `${prefix}${name}`,
  };
}

export type NodeLayout = ReturnType<typeof nodeLayout>;
