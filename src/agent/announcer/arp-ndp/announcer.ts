// The announcer of one link: answers ARP requests and Neighbor Solicitations for the addresses it is told to
// announce, with the link's MAC, and on taking an address over tells the link (gratuitous ARP, unsolicited
// Neighbor Advertisements). It never adds an address to an interface: traffic to the address reaches the node by
// its MAC, and kube-proxy's rules take it. Before it first announces an address it probes for it (ARP probes,
// duplicate address detection); an address another host answers for is refused and probed again later, and
// another host claiming an announced one is reported, never answered. What to answer is decided in ./decide.ts,
// what a claim means in ./conflicts.ts; this file does the I/O. Needs CAP_NET_RAW; each family's socket opens with
// the first address of that family.
import { performance } from "node:perf_hooks";
import type { Logger } from "../../../cli/log.ts";
import { arpProbe, gratuitousArp } from "../../../net/arp.ts";
import { ipFromBytes, ipProblem, ipToBytes } from "../../../net/ip.ts";
import { BROADCAST_MAC } from "../../../net/mac.ts";
import { ALL_NODES, unsolicitedAdvertisement } from "../../../net/ndp.ts";
import type { Netlink } from "../../../net/netlink.ts";
import { type ArpSocket, type NdpSocket, openArpSocket, openNdpSocket } from "../../../net/neighborsockets.ts";
import {
  advertisementClaim,
  arpClaim,
  type Claim,
  type ClaimDecision,
  judgeClaim,
  PROBE_DECIDED_MS,
  PROBE_SCHEDULE_MS,
  listedConflicts,
  reprobeDelayMs,
  solicitationClaim,
} from "./conflicts.ts";
import type { AddressConflict } from "../../../pools/announcement.ts";
import { answerArp, answerSolicitation, type Decision, TAKEOVER_SCHEDULE_MS } from "./decide.ts";
import { advertisementMessage, arpMessage, type NeighborMessage, solicitationMessage } from "./holding.ts";
import type { AnnouncedLink } from "./segments.ts";

export interface AnnouncerOptions {
  link: AnnouncedLink;
  log: Logger;
  /** Each decision on a received request, as made (for metrics by rule). */
  observe?: (family: 4 | 6, decision: Decision<unknown>) => void;
  /** Another host's claim of an address this announcer probes for (refused) or announces (to report). */
  onConflict?: (conflict: Conflict) => void;
  /** An address announced after its probes found nobody (announce() returned long before). */
  onAnnounced?: (address: string) => void;
  /**
   * Asked before each answer and takeover announcement: false while this node may no longer hold what it
   * announces (its Lease lapsed and nothing fresh says it may go on). What it received while its process was
   * stopped is then left unanswered, even before the withdrawal that follows.
   */
  mayAnswer?: () => boolean;
  /**
   * True while this node's view may be stale (conflicts.ts's "held"): another host's probe for an announced address
   * is then reported as a claim (onConflict runs before the answer would go out), not answered.
   */
  held?: () => boolean;
  /** Every ARP packet and NDP message another host sent on the link, as holding.ts reads them (its peers). */
  onNeighbor?: (message: NeighborMessage) => void;
}

export interface Conflict {
  family: 4 | 6;
  claim: Claim;
  decision: Extract<ClaimDecision, { action: "refuse" | "report" }>;
  /** Refused: when it is probed again, if still wanted (announce() called again after that). */
  reprobeInMs?: number;
}

export interface Announcer {
  /**
   * Probes for `address`, then answers for it and tells the link unless another host answered the probes; throws
   * when it is no IP address (zones and IPv4-mapped IPv6 included) or its family's socket will not open (EPERM
   * without CAP_NET_RAW). A refused address is probed again when announce() is called after its reprobe delay.
   */
  announce(address: string): void;
  /** Stops probing or answering for `address` and stops its takeover announcements; forgets its refusals. */
  withdraw(address: string): void;
  /** The addresses answered for now. */
  announced(): string[];
  /** Every address announce() was given and withdraw() not: probing, refused or announced. */
  addresses(): string[];
  /** The addresses another host holds here now, and its MAC, as conflicts.ts's listedConflicts() says. */
  conflicts(): AddressConflict[];
  /**
   * Asks `peer` whether it is there: an IPv4 one with an ARP probe from 0.0.0.0 (RFC 5227: its caches learn
   * nothing of us), an IPv6 one with a Neighbor Solicitation (from an address of the link, which it answers).
   */
  probe(peer: { address: string; mac: string }): void;
  /** Asks the link who else has `address`, announced here: the probe sent before announcing it (ARP, DAD). */
  recheck(address: string): void;
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
  const { link, observe, mayAnswer = () => true, onNeighbor } = options;
  const log = options.log.with({ link: link.name });
  const announced = new Set<string>();
  const takeovers = new Map<string, NodeJS.Timeout[]>();
  /** Addresses being probed for, with their probes' timers. */
  const probing = new Map<string, NodeJS.Timeout[]>();
  /** Refused addresses: refusals in a row, by which MAC last, and when (performance.now()) the next probe may start. */
  const refused = new Map<string, { refusals: number; mac: string; reprobeAt: number }>();
  /** Announced addresses another MAC claimed (not while held), and when it last did (performance.now()). */
  const claimedBy = new Map<string, { mac: string; atMs: number }>();
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

  /** Another host's claim of an address in play here: refused while probing, reported while announced. */
  const claimed = (family: 4 | 6, claim: Claim | undefined) => {
    if (!claim) return;
    const phase = probing.has(claim.address)
      ? "probing"
      : announced.has(claim.address)
        ? options.held?.()
          ? "held"
          : "announced"
        : undefined;
    if (!phase) return;
    const decision = judgeClaim(claim, phase, link.mac);
    if (decision.action === "ignore") {
      log.v(4)?.(`announcer: ${decision.reason}`, { rule: decision.rule, address: claim.address });
      return;
    }
    if (decision.action === "report") {
      if (phase === "announced") claimedBy.set(claim.address, { mac: claim.mac, atMs: performance.now() });
      return options.onConflict?.({ family, claim, decision });
    }
    stopProbing(claim.address);
    if (family === 6) ndp?.unlisten(claim.address);
    const refusals = (refused.get(claim.address)?.refusals ?? 0) + 1;
    const reprobeInMs = reprobeDelayMs(refusals);
    refused.set(claim.address, { refusals, mac: claim.mac, reprobeAt: performance.now() + reprobeInMs });
    options.onConflict?.({ family, claim, decision, reprobeInMs });
  };

  const openArp = (): ArpSocket => {
    const socket: ArpSocket = openArpSocket(
      link,
      (packet) => {
        onNeighbor?.(arpMessage(packet, link.mac));
        // The claim first: an announcer holding on a stale view yields on it (withdraws) before it would answer.
        claimed(4, arpClaim(packet));
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
      {
        solicitation(solicitation, source, sourceMac) {
          onNeighbor?.(solicitationMessage(solicitation, source, sourceMac));
          claimed(6, solicitationClaim(solicitation, source, sourceMac));
          const answer = decided(6, answerSolicitation(solicitation, source, link, announced));
          if (answer && mayAnswer())
            trySend(`a neighbor advertisement to ${answer.to}`, () => socket.send(answer.advert, answer.to));
        },
        advertisement(advert, _source, sourceMac, toHost) {
          onNeighbor?.(advertisementMessage(advert, sourceMac, toHost));
          claimed(6, advertisementClaim(advert, sourceMac));
        },
      },
      onReceiveError,
    );
    return socket;
  };

  /** An ARP probe or duplicate address detection for `address` (its family's socket is open). */
  const probe = (address: string, family: 4 | 6) => {
    const [arpSocket, ndpSocket] = [arp, ndp];
    if (family === 4 && arpSocket)
      trySend(`an ARP probe for ${address}`, () => arpSocket.send(arpProbe(address, link.mac), BROADCAST_MAC));
    if (family === 6 && ndpSocket)
      trySend(`duplicate address detection for ${address}`, () => ndpSocket.probe(address));
  };

  const stopProbing = (address: string) => {
    for (const timer of probing.get(address) ?? []) clearTimeout(timer);
    probing.delete(address);
  };

  /** Probes found nobody: answer for it from now on, and tell the link. */
  const announceNow = (address: string, family: 4 | 6) => {
    probing.delete(address);
    refused.delete(address);
    claimedBy.delete(address);
    // The first claim goes out before the first answer can: a node that held the address and lost the API yields
    // on it, and must hear it before anyone hears this node answer.
    tellLink(address, family);
    announced.add(address);
    log.info("announcer: announcing", { address, mac: link.mac });
    const later = TAKEOVER_SCHEDULE_MS.slice(1);
    takeovers.set(address, later.map((delay) => setTimeout(() => tellLink(address, family), delay)));
    options.onAnnounced?.(address);
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
      if (announced.has(address) || probing.has(address)) return;
      if (performance.now() < (refused.get(address)?.reprobeAt ?? 0)) return;
      if (family === 4) arp ??= openArp();
      else {
        ndp ??= openNdp();
        ndp.listen(address); // also hears another host's duplicate address detection for it
      }
      log.v(2)?.("announcer: probing", { address, mac: link.mac });
      const timers = PROBE_SCHEDULE_MS.map((delay) => setTimeout(() => probe(address, family), delay));
      timers.push(setTimeout(() => announceNow(address, family), PROBE_DECIDED_MS));
      probing.set(address, timers);
    },

    withdraw(text) {
      if (ipProblem(text)) return; // never announced
      const [address, family] = canonical(text);
      refused.delete(address);
      claimedBy.delete(address);
      const listened = probing.has(address) || announced.has(address);
      stopProbing(address);
      if (family === 6 && listened) ndp?.unlisten(address);
      if (!announced.delete(address)) return;
      stopTakeover(address);
      log.info("announcer: withdrawn", { address });
    },

    announced: () => [...announced],
    addresses: () => [...new Set([...announced, ...probing.keys(), ...refused.keys()])],

    conflicts: () => listedConflicts({ nowMs: performance.now(), refused, claimed: claimedBy, announced }),

    probe(peer) {
      if (closed) return;
      if (!peer.address.includes(":")) {
        const socket = (arp ??= openArp());
        trySend(`an ARP probe of ${peer.address}`, () => socket.send(arpProbe(peer.address, link.mac), peer.mac));
        return;
      }
      const socket = (ndp ??= openNdp());
      trySend(`a neighbor solicitation to ${peer.address}`, () => socket.ask(peer.address, link.mac));
    },

    recheck(text) {
      if (closed || ipProblem(text)) return;
      const [address, family] = canonical(text);
      if (announced.has(address)) probe(address, family);
    },

    close() {
      closed = true;
      for (const address of takeovers.keys()) stopTakeover(address);
      for (const address of probing.keys()) stopProbing(address);
      refused.clear();
      claimedBy.clear();
      announced.clear();
      arp?.close();
      ndp?.close();
    },
  };
}
