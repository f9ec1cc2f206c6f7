// The Nodes as the CSR approver sees them: each Node's DNS names and IPs, and for every name and IP the Nodes
// that claim it. A kubelet may write any addresses into its own Node's status, so an address is only a node's
// to hold when no other Node claims it too: the index answers that in one lookup per SAN.
//
// Two steps, for the controller's informer cache: indexNode() per Node event (about 12 µs: canonical IPv6 text
// is the cost), and indexNodes() over the indexed nodes when a CSR is to be decided after the node set changed
// (a few ms at 5,000 nodes), never per CSR.
import type { Node } from "kubernetes-types/core/v1.js";
import { isUninitialized } from "../kube/nodes.ts";
import { canonicalIp } from "../net/ip.ts";

/** The address types a kubelet puts into its serving certificate's DNS SANs. */
const DNS_ADDRESS_TYPES = new Set(["Hostname", "InternalDNS", "ExternalDNS"]);

export interface NodeAddress {
  type: string;
  address: string;
}

export interface NodeFacts {
  name: string;
  addresses: NodeAddress[];
  /** Still carries the uninitialized taint: its addresses may not be final. */
  uninitialized: boolean;
}

export interface IndexedNode {
  name: string;
  /** Canonical text (canonicalIp) of every address that is an IP, whatever its type. */
  ips: Set<string>;
  /** Lower case: the Node's name and its Hostname / InternalDNS / ExternalDNS addresses that are not IPs. */
  dnsNames: Set<string>;
  uninitialized: boolean;
}

export interface NodeIndex {
  nodes: Map<string, IndexedNode>;
  /** Canonical IP → the Nodes that list it. */
  ipOwners: Map<string, string[]>;
  /** Lower-case DNS name → the Nodes named so or listing it. */
  dnsOwners: Map<string, string[]>;
}

export function nodeFacts(node: Node): NodeFacts {
  return {
    name: node.metadata?.name ?? "",
    addresses: (node.status?.addresses ?? []).map(({ type, address }) => ({ type, address })),
    uninitialized: isUninitialized(node),
  };
}

export function indexNodes(nodes: Iterable<IndexedNode>): NodeIndex {
  const index: NodeIndex = { nodes: new Map(), ipOwners: new Map(), dnsOwners: new Map() };
  for (const node of nodes) {
    index.nodes.set(node.name, node);
    for (const ip of node.ips) addOwner(index.ipOwners, ip, node.name);
    for (const name of node.dnsNames) addOwner(index.dnsOwners, name, node.name);
  }
  return index;
}

export function indexNode({ name, addresses, uninitialized }: NodeFacts): IndexedNode {
  const node: IndexedNode = { name, ips: new Set(), dnsNames: new Set([name.toLowerCase()]), uninitialized };
  for (const { type, address } of addresses) {
    const ip = canonicalIp(address);
    if (ip !== undefined) node.ips.add(ip);
    else if (DNS_ADDRESS_TYPES.has(type)) node.dnsNames.add(address.toLowerCase());
  }
  return node;
}

function addOwner(owners: Map<string, string[]>, key: string, name: string): void {
  const list = owners.get(key);
  if (list) list.push(name);
  else owners.set(key, [name]);
}

/** The Nodes other than `name` that claim `key` in `owners`. */
export function otherOwners(owners: Map<string, string[]>, key: string, name: string): string[] {
  return (owners.get(key) ?? []).filter((owner) => owner !== name);
}
