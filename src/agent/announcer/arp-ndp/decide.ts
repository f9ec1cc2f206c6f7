// What the announcer answers, as pure functions of plain data: a received ARP request or Neighbor Solicitation,
// the link's MAC and the set of addresses announced, in; the packet to send (or why none), out. Each outcome
// carries a rule id (metrics) and a reason (logs). The announcer only ever claims addresses of the set.
import { type ArpPacket, arpReply } from "../../../net/arp.ts";
import { ALL_NODES, type NeighborAdvertisement, type NeighborSolicitation } from "../../../net/ndp.ts";

export interface Link {
  mac: string;
}

export type IgnoreRule =
  | "not-request" // an ARP reply: nothing asked
  | "announcement" // gratuitous ARP of another host (sender address = target address): nothing asked
  | "not-announced" // asked for an address this announcer does not hold
  | "dad-with-option"; // a solicitation from :: carrying a source link-layer option (RFC 4861 7.1.1: discard)

export type Decision<Answer> =
  | { action: "ignore"; rule: IgnoreRule; reason: string }
  | { action: "answer"; rule: "announced"; reason: string; answer: Answer };

/** An ARP reply and the MAC it goes to (the asker's). */
export interface ArpAnswer {
  packet: ArpPacket;
  to: string;
}

/** A Neighbor Advertisement and the address it goes to (the asker, or all nodes). */
export interface NdpAnswer {
  advert: NeighborAdvertisement;
  to: string;
}

const UNSPECIFIED = "::";

export function answerArp(packet: ArpPacket, link: Link, announced: ReadonlySet<string>): Decision<ArpAnswer> {
  const about = `${packet.senderIp} (${packet.senderMac}) about ${packet.targetIp}`;
  if (packet.operation !== "request") return ignore("not-request", `reply from ${about}`);
  if (packet.senderIp === packet.targetIp) return ignore("announcement", `gratuitous ARP from ${about}`);
  if (!announced.has(packet.targetIp)) return ignore("not-announced", `request from ${about}: not announced here`);
  return {
    action: "answer",
    rule: "announced",
    reason: `request from ${about}: answered with ${link.mac}`,
    answer: { packet: arpReply(packet, link.mac), to: packet.senderMac },
  };
}

/**
 * RFC 4861 7.2.4: a solicitation from a unicast address is answered there, solicited; one from :: (duplicate
 * address detection) to all nodes, not solicited. Override is always set: the address moves between hosts.
 */
export function answerSolicitation(
  solicitation: NeighborSolicitation,
  source: string,
  link: Link,
  announced: ReadonlySet<string>,
): Decision<NdpAnswer> {
  const about = `${source} about ${solicitation.target}`;
  if (!announced.has(solicitation.target))
    return ignore("not-announced", `solicitation from ${about}: not announced here`);
  const duplicateCheck = source === UNSPECIFIED;
  if (duplicateCheck && solicitation.sourceMac)
    return ignore("dad-with-option", `solicitation from ${about}: from :: with a source link-layer option`);
  return {
    action: "answer",
    rule: "announced",
    reason: `solicitation from ${about}: answered with ${link.mac}`,
    answer: {
      advert: { target: solicitation.target, mac: link.mac, solicited: !duplicateCheck, override: true },
      to: duplicateCheck ? ALL_NODES : source,
    },
  };
}

const ignore = (rule: IgnoreRule, reason: string) => ({ action: "ignore", rule, reason }) as const;

/**
 * When an address taken over is announced (gratuitous ARP / unsolicited NA), in ms after announce(): a burst of
 * three at once (one lost frame must not leave the old MAC in place), then one a second for five seconds, for
 * hosts whose entry was being re-resolved during the burst, and for switches that learn late.
 */
export const TAKEOVER_SCHEDULE_MS: readonly number[] = [0, 0, 0, 1000, 2000, 3000, 4000, 5000];
