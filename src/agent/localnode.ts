// Whether the Node the agent was told to manage is the host it runs on. A wrong --node-name (or a copied
// command line) would otherwise write this host's addresses into another machine's Node. kubelet reports
// the node's IPs, and checks that its --node-ip (the provided-node-ip annotation) is an address of its own
// host: one of them must be an address of this host too. Pure; the agent refuses to write when it is not.
import type { NodeAddress } from "kubernetes-types/core/v1.js";
import { canonicalIp, uniqueIPs } from "../net/ip.ts";

export interface LocalNodeInput {
  /** The provided-node-ip annotation, parsed (parseProvidedNodeIPs): canonical, unspecified dropped. */
  providedNodeIPs: string[];
  /** The Node's status.addresses. */
  addresses: NodeAddress[];
  /** Every address of this host (netlink), IPv4 and IPv6. */
  hostAddresses: string[];
}

/**
 * rule: which of the Node's IPs were compared — provided-node-ip (kubelet's --node-ip, when set), else
 * node-addresses (its InternalIPs and ExternalIPs); no-node-ip when it has none, so nothing can be checked.
 */
export type LocalNodeVerdict = {
  local: boolean;
  rule: "provided-node-ip" | "node-addresses" | "no-node-ip";
  reason: string;
};

const IP_TYPES = new Set(["InternalIP", "ExternalIP"]);
/** Host addresses named in a refusal: enough to see the mistake on one line. */
const SHOWN = 6;

export function checkLocalNode(input: LocalNodeInput): LocalNodeVerdict {
  const host = new Set(input.hostAddresses.map((ip) => canonicalIp(ip) ?? ip));
  const [rule, ips] =
    input.providedNodeIPs.length > 0
      ? (["provided-node-ip", input.providedNodeIPs] as const)
      : (["node-addresses", nodeIPs(input.addresses)] as const);
  const what = rule === "provided-node-ip" ? "provided-node-ip" : "InternalIP/ExternalIP";
  if (ips.length === 0) {
    return {
      local: true,
      rule: "no-node-ip",
      reason: "the Node has no IP yet (no provided-node-ip, InternalIP or ExternalIP): cannot tell whether it is this host",
    };
  }
  const match = ips.find((ip) => host.has(ip));
  if (match) return { local: true, rule, reason: `its ${what} ${match} is an address of this host` };
  return {
    local: false,
    rule,
    reason: `none of its ${what} (${ips.join(", ")}) is an address of this host (${shown([...host])})`,
  };
}

/** The Node's InternalIPs and ExternalIPs that are IPs, canonical, each once. */
function nodeIPs(addresses: NodeAddress[]): string[] {
  const ips = addresses.filter((a) => IP_TYPES.has(a.type)).map((a) => canonicalIp(a.address));
  return uniqueIPs(ips.filter((ip): ip is string => ip !== undefined));
}

function shown(ips: string[]): string {
  if (ips.length === 0) return "none";
  const more = ips.length - SHOWN;
  return ips.slice(0, SHOWN).join(", ") + (more > 0 ? ` and ${more} more` : "");
}
