// The announcer of one link: answers ARP requests and Neighbor Solicitations for the addresses it is told to
// announce, with the link's MAC, and on taking an address over tells the link (gratuitous ARP, unsolicited
// Neighbor Advertisements). It never adds an address to an interface: traffic to the address reaches the node by
// its MAC, and kube-proxy's rules take it. What to answer is decided in ./decide.ts; this file does the I/O.
// Needs CAP_NET_RAW; each family's socket opens with the first address of that family.
import type { Logger } from "../../cli/log.ts";
import { type ArpPacket, gratuitousArp } from "../../net/arp.ts";
import { ipFromBytes, ipProblem, ipToBytes } from "../../net/ip.ts";
import { BROADCAST_MAC, ZERO_MAC } from "../../net/mac.ts";
import { ALL_NODES, unsolicitedAdvertisement } from "../../net/ndp.ts";
import type { Netlink } from "../../net/netlink.ts";
import { type ArpSocket, type NdpSocket, openArpSocket, openNdpSocket } from "../../net/neighborsockets.ts";
import { answerArp, answerSolicitation, type Decision, TAKEOVER_SCHEDULE_MS } from "./decide.ts";

export interface AnnouncedLink {
  index: number;
  name: string;
  mac: string;
}

export interface AnnouncerOptions {
  link: AnnouncedLink;
  log: Logger;
  /** Each decision on a received request, as made (for metrics by rule). */
  observe?: (family: 4 | 6, decision: Decision<unknown>) => void;
  /**
   * Asked before each answer and takeover announcement: false while this node may no longer hold what it
   * announces (its Lease lapsed and nothing fresh says it may go on). What it received while its process was
   * stopped is then left unanswered, even before the withdrawal that follows.
   */
  mayAnswer?: () => boolean;
  /** Every ARP packet another host sent on the link (the peers, and foreign claims of announced addresses). */
  onArp?: (packet: ArpPacket) => void;
}

export interface Announcer {
  /**
   * Answers for `address` from now on and tells the link; throws when it is no IP address (zones and IPv4-mapped
   * IPv6 included) or its family's socket will not open (EPERM without CAP_NET_RAW).
   */
  announce(address: string): void;
  /** Stops answering for `address` and stops its takeover announcements. */
  withdraw(address: string): void;
  announced(): string[];
  /** Asks `peer` whether it is there (an ARP probe from 0.0.0.0, RFC 5227: its caches learn nothing of us). */
  probe(peer: { address: string; mac: string }): void;
  /** Idempotent; nothing is sent or answered after it returns. */
  close(): void;
}

/** The index and MAC of the link named `name`; throws a one-line error when there is none, or it has no MAC. */
export async function findLink(netlink: Netlink, name: string): Promise<AnnouncedLink> {
  const link = (await netlink.listLinks()).find((candidate) => candidate.name === name);
  if (!link) throw new Error(`announcer: no link named ${JSON.stringify(name)}`);
  if (!link.mac) throw new Error(`announcer: link ${name} has no Ethernet address to announce with`);
  return { index: link.index, name: link.name, mac: link.mac };
}

/** An address as the codecs print it, and its family (after ipProblem: no zone, not IPv4-mapped). */
function canonical(text: string): [string, 4 | 6] {
  const bytes = ipToBytes(text);
  return [ipFromBytes(bytes), bytes.length === 4 ? 4 : 6];
}

export function startAnnouncer(options: AnnouncerOptions): Announcer {
  const { link, observe, mayAnswer = () => true, onArp } = options;
  const log = options.log.with({ link: link.name });
  const announced = new Set<string>();
  const takeovers = new Map<string, NodeJS.Timeout[]>();
  let arp: ArpSocket | undefined;
  let ndp: NdpSocket | undefined;
  let closed = false;

  const trySend = (what: string, send: () => void) => {
    try {
      send();
    } catch (err) {
      log.warn(`announcer: sending ${what} failed`, { err });
    }
  };
  const onReceiveError = (err: NodeJS.ErrnoException) => log.warn("announcer: receiving failed", { err });
  const decided = <T>(family: 4 | 6, decision: Decision<T>): T | undefined => {
    observe?.(family, decision);
    log.v(decision.action === "answer" ? 4 : 6)?.(`announcer: ${decision.reason}`, { rule: decision.rule });
    return decision.action === "answer" ? decision.answer : undefined;
  };

  const openArp = (): ArpSocket => {
    const socket: ArpSocket = openArpSocket(
      link,
      (packet) => {
        onArp?.(packet);
        const answer = decided(4, answerArp(packet, link, announced));
        if (answer && mayAnswer()) trySend(`an ARP reply to ${answer.to}`, () => socket.send(answer.packet, answer.to));
      },
      onReceiveError,
    );
    return socket;
  };
  const openNdp = (): NdpSocket => {
    const socket: NdpSocket = openNdpSocket(
      link,
      (solicitation, source) => {
        const answer = decided(6, answerSolicitation(solicitation, source, link, announced));
        if (answer && mayAnswer())
          trySend(`a neighbor advertisement to ${answer.to}`, () => socket.send(answer.advert, answer.to));
      },
      onReceiveError,
    );
    return socket;
  };

  /** Gratuitous ARP or an unsolicited NA for `address` (its family's socket is open: announce() opened it). */
  const tellLink = (address: string, family: 4 | 6) => {
    if (!mayAnswer()) return;
    const [arpSocket, ndpSocket] = [arp, ndp];
    if (family === 4 && arpSocket)
      trySend(`gratuitous ARP for ${address}`, () =>
        arpSocket.send(gratuitousArp(address, link.mac), BROADCAST_MAC),
      );
    if (family === 6 && ndpSocket)
      trySend(`an unsolicited neighbor advertisement for ${address}`, () =>
        ndpSocket.send(unsolicitedAdvertisement(address, link.mac), ALL_NODES),
      );
  };

  const stopTakeover = (address: string) => {
    for (const timer of takeovers.get(address) ?? []) clearTimeout(timer);
    takeovers.delete(address);
  };

  return {
    announce(text) {
      if (closed) throw new Error("announcer: closed");
      const problem = ipProblem(text);
      if (problem) throw new Error(`announcer: ${problem}`);
      const [address, family] = canonical(text);
      if (announced.has(address)) return;
      if (family === 4) arp ??= openArp();
      else {
        ndp ??= openNdp();
        ndp.listen(address);
      }
      // The first claim goes out before the first answer can: a node that held the address and lost the API yields
      // on it, and must hear it before anyone hears this node answer.
      tellLink(address, family);
      announced.add(address);
      log.info("announcer: announcing", { address, mac: link.mac });
      const later = TAKEOVER_SCHEDULE_MS.slice(1);
      takeovers.set(address, later.map((delay) => setTimeout(() => tellLink(address, family), delay)));
    },

    withdraw(text) {
      if (ipProblem(text)) return; // never announced
      const [address, family] = canonical(text);
      if (!announced.delete(address)) return;
      stopTakeover(address);
      if (family === 6) ndp?.unlisten(address);
      log.info("announcer: withdrawn", { address });
    },

    announced: () => [...announced],

    probe(peer) {
      if (closed) return;
      const socket = (arp ??= openArp());
      const ask = { operation: "request", senderMac: link.mac, senderIp: "0.0.0.0", targetMac: ZERO_MAC } as const;
      trySend(`an ARP probe of ${peer.address}`, () => socket.send({ ...ask, targetIp: peer.address }, peer.mac));
    },

    close() {
      closed = true;
      for (const address of takeovers.keys()) stopTakeover(address);
      announced.clear();
      arp?.close();
      ndp?.close();
    },
  };
}
