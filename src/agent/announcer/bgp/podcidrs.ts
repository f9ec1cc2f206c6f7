// The route controller's half of the BGP method, as pure functions of plain data: which of this node's pod CIDRs
// its agent announces (from its own Node object only, never another node's), and what the Node's NetworkUnavailable
// condition says about them (--bgp-network-unavailable-condition). Each "no" carries a rule id (metrics, logs) and a
// reason. Pod CIDR routes follow the Node object, not the LoadBalancer rules: a NotReady, excluded or cordoned node
// still runs pods (kubelet keeps them; a drained node keeps its DaemonSets' pods), and cloud-provider's route
// controller keeps a route for every node that has a pod CIDR, whatever its state.
import type { Node, NodeCondition } from "kubernetes-types/core/v1.js";
import { type Cidr, cidrProblem, cidrWithin, parseCidr, prefixOf } from "../../../net/ip.ts";
import type { Skip } from "../desired.ts";
import { NODE_UNKNOWN } from "../method.ts";

export const POD_CIDR_RULES = [
  NODE_UNKNOWN, // no Node (not registered yet, or deleted): nothing to announce
  "node-deleting", // the Node has a deletionTimestamp: it stops being a route target now, not when it is gone
  "no-pod-cidrs", // spec.podCIDRs is empty (no IPAM gave one yet), or every entry is refused
  "announce", // at least one pod CIDR is announced
] as const;
export type PodCidrRule = (typeof POD_CIDR_RULES)[number];

/** Why one spec.podCIDRs entry is not announced (in order of the checks). */
export const POD_CIDR_REFUSAL_RULES = [
  "not-a-cidr", // not a CIDR as the apiserver's strict validation reads one (leading zeros, IPv4-mapped, a bare IP)
  "not-canonical", // written otherwise than kube-controller-manager writes it: host bits set, IPv6 not compressed
  "too-wide", // wider than a /8 (IPv4) or a /32 (IPv6), the default route included: more than any node's pods
  "host-route", // a /32 or /128: no pod IPAM serves pods from one address, and it is a LoadBalancer route's shape
  "not-unicast", // within loopback, link-local, multicast or reserved space: no router forwards it
] as const;
export type PodCidrRefusalRule = (typeof POD_CIDR_REFUSAL_RULES)[number];

/** The shortest pod CIDR announced, by family: anything wider is a mistake or an attempt to draw traffic. */
export const WIDEST_POD_CIDR = { 4: 8, 6: 32 } as const;

/** Space no router forwards unicast traffic to: a pod CIDR within one is refused. */
const NOT_UNICAST = [
  "0.0.0.0/8", // "this network"
  "127.0.0.0/8", // loopback
  "169.254.0.0/16", // link-local
  "224.0.0.0/4", // multicast
  "240.0.0.0/4", // reserved, and the limited broadcast address
  "fe80::/10", // link-local
  "ff00::/8", // multicast
].map((text) => parseCidr(text) as Cidr);

export interface PodCidrDecision {
  /** Canonical CIDR text, each once, in the Node's order: what the peers that take pod CIDRs are sent. */
  cidrs: string[];
  /** The entries refused (`address` is the entry as written): logged once each, never announced. */
  refused: Skip<PodCidrRefusalRule>[];
  rule: PodCidrRule;
  reason: string;
}

/** Why one spec.podCIDRs entry is not announced; undefined when it is announced (then it is canonical). */
export function podCidrRefusal(text: string): { rule: PodCidrRefusalRule; reason: string } | undefined {
  const problem = text.includes("/") ? cidrProblem(text) : `"${text}" is not a CIDR (no prefix length)`;
  if (problem) return { rule: "not-a-cidr", reason: problem };
  const cidr = parseCidr(text) as Cidr;
  const canonical = prefixOf(cidr.address, cidr.prefixLength);
  if (canonical !== text) return { rule: "not-canonical", reason: `"${text}" is not canonical: ${canonical} is` };
  const widest = WIDEST_POD_CIDR[cidr.family];
  if (cidr.prefixLength < widest)
    return { rule: "too-wide", reason: `${text} is wider than a /${widest}: no node's pods need that much` };
  if (cidr.prefixLength === (cidr.family === 4 ? 32 : 128))
    return { rule: "host-route", reason: `${text} is a single address: no pod range` };
  const special = NOT_UNICAST.find((range) => cidrWithin(cidr, range));
  if (special)
    return { rule: "not-unicast", reason: `${text} is within ${special.address}/${special.prefixLength}` };
  return undefined;
}

/** The pod CIDRs this node's agent announces, from its own Node (undefined while it is not known). */
export function decidePodCidrs(node: Node | undefined): PodCidrDecision {
  if (!node) return { cidrs: [], refused: [], rule: NODE_UNKNOWN, reason: "no Node (not registered yet, or deleted)" };
  if (node.metadata?.deletionTimestamp)
    return { cidrs: [], refused: [], rule: "node-deleting", reason: "the Node is being deleted" };
  // spec.podCIDR is the first of spec.podCIDRs (the apiserver keeps them in step); an old writer may set only it.
  const listed = node.spec?.podCIDRs ?? (node.spec?.podCIDR ? [node.spec.podCIDR] : []);
  const cidrs: string[] = [];
  const refused: Skip<PodCidrRefusalRule>[] = [];
  for (const text of listed) {
    const refusal = podCidrRefusal(text);
    if (refusal) refused.push({ address: text, ...refusal });
    else if (!cidrs.includes(text)) cidrs.push(text);
  }
  if (cidrs.length === 0) {
    const reason = listed.length === 0 ? "the Node has no spec.podCIDRs" : "every spec.podCIDRs entry is refused";
    return { cidrs, refused, rule: "no-pod-cidrs", reason };
  }
  return { cidrs, refused, rule: "announce", reason: `announcing ${cidrs.join(", ")}` };
}

export const NETWORK_UNAVAILABLE = "NetworkUnavailable";
/** cloud-provider's route controller's reasons, so that what reads them reads ours the same. */
export const ROUTE_CREATED = "RouteCreated";
export const NO_ROUTE_CREATED = "NoRouteCreated";

export const NETWORK_CONDITION_RULES = [
  "no-pod-cidrs", // the Node has none to route (or is unknown, or being deleted): the condition is left alone
  "routed", // every pod CIDR is held by a peer whose session is Established: False
  "settling", // not every one is, and the agent has not had time to peer yet: the condition is left alone
  "not-routed", // not every one is, and it has: True
] as const;
export type NetworkConditionRule = (typeof NETWORK_CONDITION_RULES)[number];

/** The condition's fields this agent decides; undefined `status`: nothing to write. */
export interface NetworkConditionDecision {
  status: "True" | "False" | undefined;
  reason: string;
  message: string;
  rule: NetworkConditionRule;
}

export interface NetworkConditionInput {
  pod: Pick<PodCidrDecision, "cidrs" | "refused" | "rule">;
  /** By peer name: the pod CIDRs sent to that peer over a session that is Established now. */
  held: ReadonlyMap<string, readonly string[]>;
  /** The agent has had its grace to peer (since its BGP started), or some peer held the routes already. */
  settled: boolean;
}

/**
 * As cloud-provider's route controller decides it: False (RouteCreated) once every pod CIDR of the Node has a route,
 * here a peer that holds it; True (NoRouteCreated) when one has none. A refused entry has none, ever. A Node with no
 * pod CIDR is left alone, as that controller leaves it.
 */
export function decideNetworkCondition({ pod, held, settled }: NetworkConditionInput): NetworkConditionDecision {
  if (pod.cidrs.length === 0 && pod.refused.length === 0)
    return { status: undefined, reason: `no pod CIDR to route (${pod.rule})`, message: "", rule: "no-pod-cidrs" };
  const holders = (cidr: string) => [...held].filter(([, cidrs]) => cidrs.includes(cidr)).map(([peer]) => peer);
  const unrouted = [...pod.refused.map((skip) => skip.address ?? ""), ...pod.cidrs.filter((c) => !holders(c).length)];
  if (unrouted.length === 0) {
    const peers = [...new Set(pod.cidrs.flatMap(holders))].sort();
    const message = `local-ccm announces ${pod.cidrs.join(", ")} over BGP to BGPPeer ${peers.join(", ")}`;
    return { status: "False", reason: ROUTE_CREATED, message, rule: "routed" };
  }
  const message = `local-ccm has no BGP peer holding ${unrouted.join(", ")}`;
  if (!settled) return { status: undefined, reason: NO_ROUTE_CREATED, message, rule: "settling" };
  return { status: "True", reason: NO_ROUTE_CREATED, message, rule: "not-routed" };
}

/** The Node's NetworkUnavailable condition, if it has one. */
export function networkCondition(node: Node | undefined): NodeCondition | undefined {
  return node?.status?.conditions?.find((condition) => condition.type === NETWORK_UNAVAILABLE);
}
