// Another host on the segment that uses an address this node probes for or announces, as pure functions of plain
// data: what a received ARP packet or NDP message claims (which address, from which MAC), and what the announcer
// does about it. While probing (before an address is first announced on a link): refuse it, never announce it, and
// try again later. While announcing: report it, and never answer with a claim of our own (two announcers sending
// gratuitous ARP at each other make every client's entry flap). While holding on a stale view, another host's probe
// is reported too: the announcer that lost the API yields on a report (method.ts), before it would answer. Each
// outcome carries a rule id (metrics) and a reason (logs, Events).
import { type ArpPacket, UNSPECIFIED_IPV4 } from "../../../net/arp.ts";
import { type NeighborSolicitation, type ReceivedAdvertisement, UNSPECIFIED_IPV6 } from "../../../net/ndp.ts";
import type { AddressConflict } from "../../../pools/announcement.ts";

/** What a packet of another host says about an address, in order of the checks. */
export const CLAIM_RULES = [
  "arp-sender", // an ARP request or reply sent from the address: its sender holds it
  "arp-probe", // an ARP probe (sender 0.0.0.0) for the address: another host is about to take it (RFC 5227 2.1.1)
  "advertisement", // a Neighbor Advertisement for the address: its sender holds it
  "duplicate-detection", // a Neighbor Solicitation from :: for it: another host is about to take it (RFC 4862)
] as const;
export type ClaimRule = (typeof CLAIM_RULES)[number];

export interface Claim {
  address: string;
  /** The claimant's MAC, as it states it (ARP's sender, NA's target option) or else its frame's source. */
  mac: string;
  rule: ClaimRule;
}

/** The claim an ARP packet makes, if any (a request from an address, a reply, gratuitous ARP, a probe). */
export function arpClaim(packet: ArpPacket): Claim | undefined {
  const mac = packet.senderMac;
  if (packet.senderIp !== UNSPECIFIED_IPV4) return { address: packet.senderIp, mac, rule: "arp-sender" };
  if (packet.operation === "request") return { address: packet.targetIp, mac, rule: "arp-probe" };
  return undefined;
}

/** The claim of a Neighbor Advertisement (any: solicited, unsolicited, to whoever), by its target option's MAC. */
export function advertisementClaim(advert: ReceivedAdvertisement, frameMac: string): Claim {
  return { address: advert.target, mac: advert.mac ?? frameMac, rule: "advertisement" };
}

/** A solicitation from :: is another host's duplicate address detection; any other asks, and claims nothing. */
export function solicitationClaim(solicitation: NeighborSolicitation, source: string, frameMac: string) {
  if (source !== UNSPECIFIED_IPV6) return undefined;
  return { address: solicitation.target, mac: frameMac, rule: "duplicate-detection" } satisfies Claim;
}

/**
 * Where the announcer stands with an address on a link. "held": announced while this node's view may be stale (its
 * Lease past its deadline, or its Service cache not caught up since): the controller may have given the address to
 * another node, whose probes before it announces are then that node's claim, not a prober to defend against.
 */
export type Phase = "probing" | "announced" | "held";

export type ClaimDecision =
  | { action: "ignore"; rule: "own-mac" | "defended"; reason: string }
  /** Probing: never announce the address on this link (until a later probe finds it free). */
  | { action: "refuse"; rule: ClaimRule; reason: string }
  /** Announced: say so (Warning, metric), and change nothing on the wire. */
  | { action: "report"; rule: ClaimRule; reason: string };

const WHAT: Record<ClaimRule, string> = {
  "arp-sender": "sent ARP from it",
  "arp-probe": "probed for it (ARP)",
  advertisement: "advertised it (NDP)",
  "duplicate-detection": "checked it for duplicates (NDP)",
};

/** What to do about `claim` of an address in `phase` on a link whose MAC is `linkMac`. */
export function judgeClaim(claim: Claim, phase: Phase, linkMac: string): ClaimDecision {
  const who = `${claim.mac} ${WHAT[claim.rule]}`;
  if (claim.mac === linkMac) return { action: "ignore", rule: "own-mac", reason: `${who}: this link's own MAC` };
  if (phase === "probing")
    return { action: "refuse", rule: claim.rule, reason: `${claim.address} is in use: ${who}; not announced` };
  const probe = claim.rule === "arp-probe" || claim.rule === "duplicate-detection";
  if (probe && phase === "announced")
    return { action: "ignore", rule: "defended", reason: `${who}: answered as announced, it backs off` };
  if (probe)
    return {
      action: "report",
      rule: claim.rule,
      reason: `${claim.address} is held here on a view that may be stale, and ${who}: likely its new announcer`,
    };
  return {
    action: "report",
    rule: claim.rule,
    reason: `${claim.address} is announced here, and ${who}: not fought over, only reported`,
  };
}

/**
 * Probes before an address is first announced on a link, in ms after announce(), and when the answer is taken.
 * RFC 5227 2.1.1 sends PROBE_NUM 3 probes 1-2 s apart and waits ANNOUNCE_WAIT 2 s (RFC 4862: one solicitation,
 * 1 s): about 5 s, the whole failover budget (p99 <= 5 s, 3.2 s without probing). Those timers are for hosts that
 * boot, slow Wi-Fi and spanning-tree ports still blocking; a host answering on the same wired segment does so within
 * milliseconds (Linux answers probes from its softirq). Three probes, so that one lost frame cannot hide a defender,
 * 100 ms apart, and 200 ms after the last for a loaded defender: 0.4 s added to a failover.
 */
export const PROBE_SCHEDULE_MS: readonly number[] = [0, 100, 200];
export const PROBE_DECIDED_MS = 400;

/**
 * How long after its `refusals`-th refusal in a row an address is probed again: 1 s, doubling to 30 s. Quick at
 * first: the holder may be another node's announcer withdrawing (an old announcer answers a new one's probe until
 * it has seen the move); then every 30 s, a few frames a minute per address, so that an address the other host
 * gives up is announced within 30 s.
 */
export function reprobeDelayMs(refusals: number): number {
  return Math.min(30_000, 1000 * 2 ** Math.max(0, refusals - 1));
}

/** A claim reported (log, Event) at most once this often per address and MAC; the metric counts each. */
export const REPORT_INTERVAL_MS = 60_000;

/** A claim of an announced address is listed on the Lease for this long after the last one heard. */
export const CLAIM_LISTED_MS = REPORT_INTERVAL_MS;
/** Refusals in a row before a refused address is listed on the Lease. */
export const LISTED_AFTER_REFUSALS = 2;

export interface LinkConflicts {
  nowMs: number;
  /** Refused addresses: refusals in a row, and the MAC that answered the last probes. */
  refused: ReadonlyMap<string, { refusals: number; mac: string }>;
  /** Claims of announced addresses: the MAC, and when it last claimed (ms, the clock of nowMs). */
  claimed: ReadonlyMap<string, { mac: string; atMs: number }>;
  announced: ReadonlySet<string>;
}

/**
 * What a link lists on the node's Lease (CONFLICTS_ANNOTATION) for the controller to report: a refused address from
 * its LISTED_AFTER_REFUSALS-th refusal in a row on (the first may be another node's announcer still withdrawing,
 * which the 1 s reprobe outlives); an announced one while another MAC claimed it within CLAIM_LISTED_MS (a host that
 * sends nothing more has let go or sits silent: nothing tells which, and an old report is no news).
 */
export function listedConflicts({ nowMs, refused, claimed, announced }: LinkConflicts): AddressConflict[] {
  const listed: AddressConflict[] = [];
  for (const [address, { refusals, mac }] of refused)
    if (refusals >= LISTED_AFTER_REFUSALS) listed.push({ address, mac });
  for (const [address, { mac, atMs }] of claimed)
    if (announced.has(address) && nowMs - atMs < CLAIM_LISTED_MS) listed.push({ address, mac });
  return listed;
}
