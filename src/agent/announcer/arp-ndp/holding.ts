// Whether this node goes on announcing on each link, as pure functions of plain data: its Lease, what its peers on
// the link answered, the foreign claims it saw (classified in conflicts.ts), and whether its Service cache has caught
// up after an outage. Each outcome carries a rule id (metrics) and a reason (logs). The argument, in
// src/pools/announcement.ts's header: the API being unreachable is no reason to stop answering; being cut off from
// the link, or seeing another node claim an address, is. One rule for both families: a peer's answer over ARP or
// NDP proves the link, and an address of either family is held, and yielded, alike (IPv6's claims are unsolicited
// or solicited Advertisements and duplicate address detection, heard as ARP's are).
import { type ArpPacket, UNSPECIFIED_IPV4 } from "../../../net/arp.ts";
import { ZERO_MAC } from "../../../net/mac.ts";
import { type NeighborSolicitation, type ReceivedAdvertisement, UNSPECIFIED_IPV6 } from "../../../net/ndp.ts";
import type { LinkAnnouncements } from "./assignments.ts";

/** How often the peers of a link are asked while the Lease is near or past its deadline. */
export const PEER_PROBE_INTERVAL_MS = 500;
/** How long one answer of a peer proves the link: well under the failover budget past the deadline. */
export const PEER_FRESH_MS = 1500;
/** Probing starts this long before the deadline, so that an answer is fresh when it passes. */
export const PROBE_BEFORE_DEADLINE_MS = 1000;
/** Peers asked at once on a link: the most recently heard. */
export const PROBED_PEERS = 3;
/** Held addresses a link asks about each round past the deadline (who else has it? ARP probe, DAD), in turn. */
export const HELD_PROBES_PER_ROUND = 8;
/** Peers remembered per link. */
const HEARD_PEERS = 16;

export const HOLDING_RULES = [
  "not-renewed", // this run has not renewed its Lease yet: nothing
  "lease-valid", // the Lease was renewed within its deadline: announce what is assigned
  "peers-reachable", // the API is out of reach, a peer on the link answered lately: announce on
  "cut-off", // the API is out of reach and no peer on the link answered lately: withdraw there, ask on
] as const;
export type HoldingRule = (typeof HOLDING_RULES)[number];

export interface Holding {
  rule: HoldingRule;
  reason: string;
  announce: boolean;
  /** When this holding must be decided again (monotonic ms; Infinity: only on a change). */
  untilMs: number;
}

export interface HoldingInput {
  nowMs: number;
  /** Until when the Lease allows announcing (AnnouncerLease.validUntil()). */
  validUntilMs: number;
  /** When a peer on the link last answered this node (-Infinity: never). */
  peerAnsweredAtMs: number;
}

export function decideHolding({ nowMs, validUntilMs, peerAnsweredAtMs }: HoldingInput): Holding {
  if (nowMs < validUntilMs)
    return { rule: "lease-valid", reason: "the announcer Lease is valid", announce: true, untilMs: validUntilMs };
  if (validUntilMs === -Infinity)
    return { rule: "not-renewed", reason: "the announcer Lease is not renewed yet", announce: false, untilMs: Infinity };
  const peersUntil = peerAnsweredAtMs + PEER_FRESH_MS;
  const ago = `${Math.round(nowMs - validUntilMs)} ms past the Lease's deadline`;
  if (nowMs < peersUntil)
    return {
      rule: "peers-reachable",
      reason: `${ago}, a peer on the link answered ${Math.round(nowMs - peerAnsweredAtMs)} ms ago: announcing on`,
      announce: true,
      untilMs: peersUntil,
    };
  const reason = `${ago}, and no peer on the link answered lately: withdrawn until one does (then probed afresh)`;
  return { rule: "cut-off", reason, announce: false, untilMs: Infinity };
}

/** Whether the link's peers are to be asked now: near or past the Lease's deadline. */
export function shouldProbe(nowMs: number, validUntilMs: number): boolean {
  return nowMs >= validUntilMs - PROBE_BEFORE_DEADLINE_MS;
}

/**
 * What a link's announcer does hold after its Lease lapsed: nothing claimed meanwhile by another MAC (`yielded`),
 * and, until the Service cache has caught up with the renewal that ended the lapse, nothing that was not announced
 * when it ended (`kept`): that cache may still show addresses the controller has since given to another node.
 */
export function restrictAnnouncements(
  wanted: LinkAnnouncements,
  yielded: ReadonlySet<string>,
  kept: ReadonlySet<string> | undefined,
): { kept: string[]; left: { address: string; rule: "yielded" | "catching-up" }[] } {
  const left: { address: string; rule: "yielded" | "catching-up" }[] = [];
  const held = wanted.addresses.filter((address) => {
    if (yielded.has(address)) left.push({ address, rule: "yielded" });
    else if (kept && !kept.has(address)) left.push({ address, rule: "catching-up" });
    else return true;
    return false;
  });
  return { kept: held, left };
}

/**
 * What holding reads of a packet another host sent on the link, whatever its family: ARP (arpMessage) and NDP
 * (solicitationMessage, advertisementMessage) alike, so that one rule decides for both.
 */
export interface NeighborMessage {
  /** "asks": an ARP request or a Neighbor Solicitation; "answers": an ARP reply or a solicited Advertisement. */
  kind: "asks" | "answers" | "other";
  /** The sender's address as it states it: ARP's sender, a solicitation's source, an advertisement's target. */
  senderIp: string;
  senderMac: string;
  /** Sent to this host: ARP's target MAC, or the frame's destination MAC (an advertisement). */
  toHost: boolean;
}

export function arpMessage(packet: ArpPacket, ownMac: string): NeighborMessage {
  const kind = packet.operation === "request" ? "asks" : "answers";
  return { kind, senderIp: packet.senderIp, senderMac: packet.senderMac, toHost: packet.targetMac === ownMac };
}

/** A solicitation from `source` (:: for duplicate address detection: no peer to ask back). */
export function solicitationMessage(
  solicitation: NeighborSolicitation,
  source: string,
  frameMac: string,
): NeighborMessage {
  return { kind: "asks", senderIp: source, senderMac: solicitation.sourceMac ?? frameMac, toHost: false };
}

/** An advertisement answers only when solicited; an unsolicited one is a claim or nothing (conflicts.ts). */
export function advertisementMessage(
  advert: ReceivedAdvertisement,
  frameMac: string,
  toHost: boolean,
): NeighborMessage {
  const kind = advert.solicited ? "answers" : "other";
  return { kind, senderIp: advert.target, senderMac: advert.mac ?? frameMac, toHost };
}

/**
 * What a packet received on a link says of its peers. Another MAC's claim of an address announced here is no
 * peer's word: conflicts.ts classifies it (every claim, ARP and NDP, in one place), and method.ts yields on it.
 */
export type Heard =
  | { kind: "answer" } // a peer answered this node (its probe or solicitation, or its kernel's question)
  | { kind: "peer"; address: string; mac: string } // a peer asked something: it can be asked in turn
  | { kind: "nothing" };

export function hear(message: NeighborMessage, ownMac: string, announced: ReadonlySet<string>): Heard {
  const { kind, senderIp, senderMac } = message;
  if (senderMac === ownMac || announced.has(senderIp)) return { kind: "nothing" };
  if (kind === "answers" && message.toHost) return { kind: "answer" };
  const unspecified = senderIp === UNSPECIFIED_IPV4 || senderIp === UNSPECIFIED_IPV6 || senderMac === ZERO_MAC;
  if (kind === "asks" && !unspecified) return { kind: "peer", address: senderIp, mac: senderMac };
  return { kind: "nothing" };
}

export interface Peer {
  address: string;
  mac: string;
}

/**
 * The peers heard on one link, most recent last, and when one last answered. An answer counts only within
 * PEER_FRESH_MS of a probe: one that waited in the socket through a longer stop proves nothing now. An answer
 * only proves the link: a resumed node takes an address back after probing it afresh (method.ts).
 */
export class LinkPeers {
  /** By address: its MAC. */
  private readonly heard = new Map<string, string>();
  private probedAtMs = -Infinity;
  answeredAtMs = -Infinity;

  /** This node asked the link's peers at `nowMs`. */
  probed(nowMs: number): void {
    this.probedAtMs = nowMs;
  }

  /** Takes in what hear() made of a packet received at `nowMs`. */
  note(heard: Heard, nowMs: number): void {
    if (heard.kind === "answer" && nowMs - this.probedAtMs < PEER_FRESH_MS) this.answeredAtMs = nowMs;
    if (heard.kind !== "peer") return;
    this.heard.delete(heard.address);
    this.heard.set(heard.address, heard.mac);
    if (this.heard.size > HEARD_PEERS) this.heard.delete(this.heard.keys().next().value as string);
  }

  /** The peers to ask: the most recently heard. */
  targets(): Peer[] {
    return [...this.heard].slice(-PROBED_PEERS).map(([address, mac]) => ({ address, mac }));
  }
}
