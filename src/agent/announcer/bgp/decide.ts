// What the BGP method decides from the cluster, as pure functions of plain data: whether this node speaks BGP at all
// (a BGPPeer selects it), whether it announces a Service (its class, the node's eligibility, a ready endpoint here
// for externalTrafficPolicy Local), each peer's session settings and the key that says when a change must restart
// that session, and a pool's route attributes. Each "no" carries a rule id (metrics) and a reason (logs).
import type { Service } from "kubernetes-types/core/v1.js";
import type { PeerFacts } from "../../../bgppeers/peer.ts";
import { matchesLabels } from "../../../kube/labelselector.ts";
import type { LoadBalancerNode } from "../../../loadbalancer/nodes.ts";
import { canonicalIp, ipFamily } from "../../../net/ip.ts";
import type { HostAddress } from "../../../net/rtnetlink.ts";
import { ALLOCATED_FROM_ANNOTATION, BGP_CLASS } from "../../../pools/allocate.ts";
import type { LoadBalancerIPPool } from "../../../pools/pool.ts";
import { ingressIps, type Refusal } from "../desired.ts";
import { NODE_UNKNOWN, type Selection } from "../method.ts";
import type { RouteAttributes } from "./method.ts";
import type { SessionOptions } from "./session.ts";

export const BGP_SELECTION_RULES = [
  NODE_UNKNOWN, // the Node is not in the watch (not yet, or deleted): nothing to match
  "peer-selects", // a sound BGPPeer's nodeSelector matches the Node's labels (unset: every node)
  "no-peer-selects", // none does
] as const;
export type BgpSelectionRule = (typeof BGP_SELECTION_RULES)[number];

/** The sound peers whose nodeSelector matches `labels` (the Node's; undefined while it is not known). */
export function selectedPeers(peers: readonly PeerFacts[], labels: Record<string, string> | undefined): PeerFacts[] {
  if (!labels) return [];
  return peers.filter(
    (peer) => peer.problem === undefined && (!peer.nodeSelector || matchesLabels(peer.nodeSelector, labels)),
  );
}

export function decideBgpSelection(
  peers: readonly PeerFacts[],
  labels: Record<string, string> | undefined,
): Selection<BgpSelectionRule> {
  if (!labels) return { announce: false, rule: NODE_UNKNOWN, reason: "no Node (not registered yet, or deleted)" };
  const selected = selectedPeers(peers, labels).map((peer) => peer.name);
  if (selected.length === 0)
    return { announce: false, rule: "no-peer-selects", reason: `no BGPPeer of ${peers.length} selects this node` };
  const names = selected.length > 3 ? `${selected.slice(0, 3).join(", ")}, ...` : selected.join(", ");
  return { announce: true, rule: "peer-selects", reason: `BGPPeers select this node: ${names}` };
}

/** Why a Service's addresses are not announced by this node over BGP (in order of the checks). */
export const BGP_REFUSAL_RULES = [
  "other-class", // not of class local-ccm.io/bgp (nor class-less with --bgp-claim-classless)
  "not-eligible", // this node carries no LoadBalancer traffic (the node-address rules: loadbalancer/nodes.ts)
  "no-ready-endpoint", // externalTrafficPolicy Local, and no ready endpoint of the Service on this node
] as const;
export type BgpRefusalRule = (typeof BGP_REFUSAL_RULES)[number];

export interface BgpNodeView {
  /** This node as the LoadBalancer rules see it; undefined while the Node is not known. */
  node: LoadBalancerNode | undefined;
  /** Whether the Service ("namespace/name") has a ready endpoint on this node. */
  readyHere(service: string): boolean;
}

export function bgpRefusal(
  service: Service,
  view: BgpNodeView,
  claimClassless: boolean,
): Refusal<BgpRefusalRule> | undefined {
  const loadBalancerClass = service.spec?.loadBalancerClass;
  if (loadBalancerClass !== BGP_CLASS && !(loadBalancerClass === undefined && claimClassless))
    return { rule: "other-class", reason: `of class ${loadBalancerClass ?? "(none)"}, not ${BGP_CLASS}` };
  if (!view.node) return { rule: "not-eligible", reason: "this node's Node is not known" };
  if (view.node.ineligible) return { rule: "not-eligible", reason: `this node ${view.node.ineligible.reason}` };
  const key = `${service.metadata?.namespace}/${service.metadata?.name}`;
  if (service.spec?.externalTrafficPolicy === "Local" && !view.readyHere(key))
    return { rule: "no-ready-endpoint", reason: "externalTrafficPolicy Local, and no ready endpoint on this node" };
  return undefined;
}

/**
 * The attributes of the routes of `address` (canonical), from the pool the Service drew it from (the allocated-from
 * annotation lists a pool per ingress address, in the same order); none when the pool is not known.
 */
export function poolAttributes(
  service: Service | undefined,
  address: string,
  pool: (name: string) => LoadBalancerIPPool | undefined,
): RouteAttributes {
  const ingress = (service?.status?.loadBalancer?.ingress ?? []).map(({ ip }) => ip);
  const read = service ? ingressIps(service) : [];
  const pools = service?.metadata?.annotations?.[ALLOCATED_FROM_ANNOTATION]?.split(",") ?? [];
  const ip = read.find((each) => "address" in each && each.address === address)?.ip;
  const name = ip === undefined ? undefined : pools[ingress.indexOf(ip)];
  const bgp = name === undefined ? undefined : pool(name)?.spec?.bgp;
  return {
    ...(bgp?.communities?.length ? { communities: bgp.communities } : {}),
    ...(bgp?.localPref === undefined ? {} : { localPref: bgp.localPref }),
  };
}

/** Our BGP identifier: the IPv4 next hop, or (an IPv6-only peer) four bytes of the node name's hash. */
export function routerId(nextHop: string, nodeHash: number): string {
  if (ipFamily(nextHop) === 4) return nextHop;
  return [24, 16, 8, 0].map((shift) => (nodeHash >>> shift) & 0xff).join(".");
}

/** What a session is started with, besides its log hook: a change of any of it restarts the session (method.ts). */
export type PeerSession = Omit<SessionOptions, "onDecision" | "random">;

/** This node's next hop for each family a session towards a peer carries. */
export type NextHops = { 4?: string; 6?: string };

/**
 * The next hops of a session whose source (and next hop of its own family) is `source`: the other family's is the
 * first global address of that family on the interface that holds `source` (so IPv6 routes go over an IPv4 session
 * with the node's IPv6 address on the same link, as multiprotocol BGP carries them; RFC 4760), if it has one that is
 * settled (not tentative, not failed duplicate address detection, not deprecated, not a temporary one).
 */
export function nextHopsFor(source: string, addresses: readonly HostAddress[]): NextHops {
  const family = ipFamily(source) === 6 ? 6 : 4;
  const other = family === 4 ? 6 : 4;
  const link = addresses.find((a) => a.address === canonicalIp(source))?.interfaceIndex;
  const settled = addresses.find(
    (a) =>
      a.interfaceIndex === link &&
      a.family === other &&
      a.scope === "global" &&
      !a.flags.tentative &&
      !a.flags.dadFailed &&
      !a.flags.deprecated &&
      !(other === 6 && a.flags.secondary),
  );
  return { [family]: canonicalIp(source), ...(link !== undefined && settled ? { [other]: settled.address } : {}) };
}

/**
 * A peer's session settings: the next hop of the peer address's family (this node's address towards the peer, or its
 * sourceAddress) is both the source of our connection and our routes' next hop of that family; the session carries
 * that family first, and the other one too where `nextHops` has one (nextHopsFor).
 */
export function peerSession(
  peer: PeerFacts,
  nextHops: NextHops,
  password: string | undefined,
  nodeHash: number,
): PeerSession {
  const family = ipFamily(peer.peerAddress) === 6 ? 6 : 4;
  const nextHop = nextHops[family];
  if (nextHop === undefined) throw new Error(`no IPv${family} next hop towards ${peer.peerAddress}`);
  const ipv4 = nextHops[4];
  return {
    config: {
      myAsn: peer.myAsn,
      peerAsn: peer.peerAsn,
      routerId: routerId(ipv4 ?? nextHop, nodeHash),
      holdTime: peer.holdTimeSeconds,
      ...(peer.keepaliveTimeSeconds === undefined ? {} : { keepaliveTime: peer.keepaliveTimeSeconds }),
      families: family === 4 ? [4, ...(nextHops[6] ? [6 as const] : [])] : [6, ...(ipv4 ? [4 as const] : [])],
      // R set in the first OPEN after the process started: a peer that kept our routes (we restarted) waits for
      // our End-of-RIB before it drops the stale ones; one that kept none ignores it.
      ...(peer.gracefulRestart
        ? { gracefulRestart: { restartTime: peer.gracefulRestart.restartTimeSeconds, restarting: true } }
        : {}),
    },
    peerAddress: peer.peerAddress,
    peerPort: peer.peerPort,
    localAddress: nextHop,
    ...(password === undefined ? {} : { password }),
  };
}
