// A cluster's network (see cluster.ts's header): the bridge and the rule that keeps its packets on this machine, a
// node's namespace and veth, the client host; on a dual-stack cluster, their IPv6 too.
import path from "node:path";
import { run } from "./exec.ts";
import { clusterLayout, type NodeLayout } from "./layout.ts";

export async function createBridge(slot: number): Promise<void> {
  const layout = clusterLayout(slot);
  await run("ip", ["link", "add", layout.bridge, "type", "bridge"]);
  await run("ip", ["address", "add", `${layout.gateway}/24`, "dev", layout.bridge]);
  await run("ip", ["address", "add", `${layout.publicGateway}/24`, "dev", layout.bridge]);
  await run("ip", ["link", "set", layout.bridge, "up"]);
  await run("ip", ["route", "add", "blackhole", "default", "table", String(layout.table)]);
  await run("ip", ["rule", "add", "iif", layout.bridge, "lookup", String(layout.table)]);
}

export async function createNodeNetwork(
  slot: number,
  node: NodeLayout,
  all: NodeLayout[],
  dualStack: boolean,
): Promise<string> {
  const layout = clusterLayout(slot);
  await run("ip", ["netns", "add", node.netnsName]);
  const netns = `/run/netns/${node.netnsName}`;
  const inNode = (...args: string[]) => run("ip", ["-n", node.netnsName, ...args]);
  const peer = `lccm${slot}p${node.index}`;
  await run("ip", ["link", "add", node.rootVeth, "type", "veth", "peer", "name", peer]);
  await run("ip", ["link", "set", peer, "netns", node.netnsName]);
  await run("ip", ["link", "set", node.rootVeth, "master", layout.bridge, "up"]);
  await inNode("link", "set", peer, "name", "eth0");
  await inNode("address", "add", `${node.ip}/24`, "dev", "eth0");
  await inNode("address", "add", `${node.publicIP}/24`, "dev", "eth0");
  await inNode("link", "set", "eth0", "up");
  await inNode("link", "set", "lo", "up");
  await inNode("route", "add", "default", "via", layout.publicGateway);
  // Between the node's pods and eth0; the root namespace still forwards nothing.
  const forwarding = ["net.ipv4.ip_forward=1", ...(dualStack ? ["net.ipv6.conf.all.forwarding=1"] : [])];
  await run("nsenter", [`--net=${netns}`, "sysctl", "-qw", ...forwarding]);
  for (const other of all.filter((n) => n.name !== node.name))
    await inNode("route", "add", other.podCIDR, "via", other.ip, "dev", "eth0");
  await run("ip", ["route", "add", node.podCIDR, "via", node.ip, "dev", layout.bridge]);
  if (dualStack) await addNodeIPv6(node, all);
  return netns;
}

/**
 * A dual-stack node's IPv6: its public address (nodad: settled at once, and the agent takes only a settled address as
 * the next hop of its IPv6 routes) and a route to each other node's IPv6 pod CIDR via that node. Unlike IPv4, the
 * root namespace gets no IPv6 address or route: as no namespace routes IPv6 through it, it forwards no IPv6 for the
 * cluster whatever net.ipv6.conf.all.forwarding says, and needs no blackhole rule for it.
 */
async function addNodeIPv6(node: NodeLayout, all: NodeLayout[]): Promise<void> {
  const inNode = (...args: string[]) => run("ip", ["-n", node.netnsName, ...args]);
  await inNode("address", "add", `${node.publicIP6}/64`, "dev", "eth0", "nodad");
  for (const other of all.filter((n) => n.name !== node.name))
    await inNode("route", "add", other.podCIDR6, "via", other.publicIP6, "dev", "eth0");
}

/** The client host's namespace on the public network (see the header). */
export async function createClientHost(slot: number, dualStack: boolean): Promise<string> {
  const layout = clusterLayout(slot);
  const inClient = (...args: string[]) => run("ip", ["-n", layout.clientNetns, ...args]);
  const peer = `lccm${slot}pc`;
  await run("ip", ["netns", "add", layout.clientNetns]);
  await run("ip", ["link", "add", layout.clientVeth, "type", "veth", "peer", "name", peer]);
  await run("ip", ["link", "set", peer, "netns", layout.clientNetns]);
  await run("ip", ["link", "set", layout.clientVeth, "master", layout.bridge, "up"]);
  await inClient("link", "set", peer, "name", "eth0");
  await inClient("address", "add", `${layout.clientIP}/24`, "dev", "eth0");
  await inClient("link", "set", "eth0", "up");
  await inClient("link", "set", "lo", "up");
  await inClient("route", "add", "default", "via", layout.publicGateway);
  // No IPv6 default route: only the cluster's router gives it one (router.ts).
  if (dualStack) await inClient("address", "add", `${layout.clientIP6}/64`, "dev", "eth0", "nodad");
  return `/run/netns/${layout.clientNetns}`;
}

/** How to run a command on the client host of the cluster in slot `slot` kept in `dir` (also the CLI's `client`). */
export function clientCommand(slot: number, dir: string, kubectl: string, command: string, args: string[]) {
  const { clientNetns } = clusterLayout(slot);
  return {
    argv: ["nsenter", `--net=/run/netns/${clientNetns}`, "--", command, ...args],
    env: {
      ...process.env,
      KUBECONFIG: path.join(dir, "kubeconfig"),
      PATH: [path.dirname(kubectl), process.env.PATH].filter(Boolean).join(":"),
    },
  };
}
