// The BGP method behind the announcing loop's interface (../method.ts): every address this node must announce
// becomes a host route (/32, /128) in the RIB-out of each configured session (session.ts), its next hop this node's
// own address towards that peer; ribout.ts turns each change into UPDATEs only, so a change of Services never resets
// a session, and a change of peers touches only the sessions it concerns. Peers are plain config here: definition.ts
// builds them from the cluster's BGPPeers, and decides which Services this node announces. Beside those host routes,
// a peer that takes pod CIDRs gets this node's (setPodCidrs; podcidrs.ts decides them), in the same RIB-out: one
// session, one setRoutes, both sets, so that a change of either is UPDATEs of its own prefixes. A peer with `bfd` gets a
// BFD session beside its BGP session, started and stopped with it and telling it when the path goes; new BFD timers
// are applied to the running BFD session (a Poll Sequence), never by a restart of either.
import type { Logger } from "../../../cli/log.ts";
import type { BfdClient, BfdSession } from "../bfd/session.ts";
import type { BfdConfig } from "../bfd/fsm.ts";
import { type Desired, type DesiredAddress, newSkips, type Skip } from "../desired.ts";
import type { AnnouncementMethod } from "../method.ts";
import type { Phase } from "./fsm.ts";
import type { Route } from "./ribout.ts";
import { type BgpSession, type SessionOptions, startSession } from "./session.ts";

export interface BgpPeer {
  /** For logs: the peer's address unless given. */
  name?: string;
  /** The session (session.ts): ASNs, hold time, families, the peer's address, our source address. */
  session: SessionOptions;
  /** This node's own address towards the peer, by family: the next hop of that family's routes. */
  nextHops: { 4?: string; 6?: string };
  /** BFD's timers towards the peer: present means a BFD session runs beside the BGP session. */
  bfd?: BfdConfig;
  /** The peer gets this node's pod CIDRs (setPodCidrs) too; a change of this alone restarts nothing. */
  podCidrs?: boolean;
}

/** What routers are told about an address beside its next hop (a pool's spec.bgp). */
export type RouteAttributes = Pick<Route, "communities" | "localPref">;

/** Why an address is not announced to a peer. */
export type PeerSkipRule = "no-next-hop"; // this node has no address of the address's family towards the peer

/** Why a route (an address, a pod CIDR) is left out for a peer, or its next hop. */
function nextHopOf(peer: Pick<BgpPeer, "nextHops">, text: string): string | Skip<PeerSkipRule> {
  const family = text.includes(":") ? 6 : 4; // canonical: IPv4 has no colon
  const nextHop = peer.nextHops[family];
  if (nextHop !== undefined) return nextHop;
  const reason = `no IPv${family} address of this node towards the peer to be ${text}'s next hop`;
  return { address: text, rule: "no-next-hop", reason };
}

/**
 * The routes a peer should have for `desired`, pure: one host route per address, with `attributes(address)`; an
 * address of a family this node has no next hop for towards the peer is left out.
 */
export function routesFor(
  desired: Desired,
  peer: Pick<BgpPeer, "nextHops">,
  attributes: (entry: DesiredAddress) => RouteAttributes = () => ({}),
): { routes: Route[]; skipped: Skip<PeerSkipRule>[] } {
  const routes: Route[] = [];
  const skipped: Skip<PeerSkipRule>[] = [];
  for (const entry of desired.addresses) {
    const nextHop = nextHopOf(peer, entry.address);
    if (typeof nextHop !== "string") skipped.push(nextHop);
    else routes.push({ prefix: `${entry.address}/${nextHop.includes(":") ? 128 : 32}`, nextHop, ...attributes(entry) });
  }
  return { routes, skipped };
}

/**
 * The routes of this node's pod CIDRs (canonical, never host routes: podcidrs.ts refuses those, so none shares a
 * prefix with an address's host route in the RIB-out) to a peer that takes them, pure: the next hop is this node's
 * address of the CIDR's family towards the peer, as for addresses; a CIDR of a family without one is left out.
 */
export function podRoutesFor(
  cidrs: readonly string[],
  peer: Pick<BgpPeer, "nextHops" | "podCidrs">,
): { routes: Route[]; skipped: Skip<PeerSkipRule>[] } {
  const routes: Route[] = [];
  const skipped: Skip<PeerSkipRule>[] = [];
  if (!peer.podCidrs) return { routes, skipped };
  for (const prefix of cidrs) {
    const nextHop = nextHopOf(peer, prefix);
    if (typeof nextHop !== "string") skipped.push(nextHop);
    else routes.push({ prefix, nextHop });
  }
  return { routes, skipped };
}

export interface BgpMethodOptions {
  /** The peers at start; setPeers() changes them. */
  peers: readonly BgpPeer[];
  log: Logger;
  /** session.ts's startSession unless given (a fake, in pure tests). */
  startSession?: (options: SessionOptions) => BgpSession;
  /** The attributes of an address's routes; none unless given. */
  attributes?: (entry: DesiredAddress) => RouteAttributes;
  /** Each peer's routes after a change (and 0 once it is gone), by the peer's name: a gauge. */
  onRoutes?: (peer: string, routes: number) => void;
  /** Starts the BFD session of a peer that has `bfd`, telling `client` (its BGP session); undefined: none runs. */
  startBfd?: (peer: BgpPeer, client: BfdClient) => BfdSession | undefined;
}

export interface BgpMethod extends AnnouncementMethod {
  /**
   * The peers from now on, by name: a new one gets a session and the routes; one whose session settings or next
   * hops changed is withdrawn, Ceased and started again; one gone is withdrawn and Ceased; the others are untouched.
   */
  setPeers(peers: readonly BgpPeer[]): void;
  /**
   * This node's pod CIDRs from now on (canonical; podcidrs.ts): the peers that take them hear the differences as
   * UPDATEs (a CIDR gone is withdrawn, a new one announced), beside the addresses of apply().
   */
  setPodCidrs(cidrs: readonly string[]): void;
  /** Each session's phase, by peer name. */
  phases(): Map<string, Phase>;
  /** By peer name, of the sessions Established now: the pod CIDRs they were sent. */
  podCidrsHeld(): Map<string, string[]>;
}

/** What a session decides every few seconds while up: logged only at -v=6. */
const ROUTINE_RULES = new Set(["keepalive-sent", "keepalive", "update-ignored", "stale-timer"]);

const peerName = (peer: BgpPeer) => peer.name ?? peer.session.peerAddress;
/** What restarts a peer's session when it changes (the log hook and BFD's timers aside). */
const peerKey = ({ session: { onDecision: _, random: __, ...session }, nextHops }: BgpPeer) =>
  JSON.stringify([session, nextHops]);

interface Running {
  peer: BgpPeer;
  key: string;
  log: Logger;
  session: BgpSession;
  bfd: BfdSession | undefined;
  /** The addresses left out for this peer: each logged once, when it is. */
  unlogged: (skipped: readonly Skip<PeerSkipRule>[]) => Skip<PeerSkipRule>[];
  /** The pod CIDRs in its last routes. */
  podCidrs: string[];
}

/**
 * Starts a session with each peer (they connect in the background); apply() hands each its routes. Stopping
 * withdraws every route first, then ends the sessions (Cease), except at the agent's shutdown towards a peer that
 * negotiates graceful restart: its connection closes with no withdrawal and no Cease, so that the peer keeps our
 * routes for restartTime while the next agent comes up (RFC 4724; a Cease would make it drop them), and its BFD
 * stops without a word.
 */
export function startBgpMethod(options: BgpMethodOptions): BgpMethod {
  const { log, attributes, onRoutes, startSession: start = startSession, startBfd } = options;
  const running = new Map<string, Running>();
  let desired: Desired = { addresses: [], skipped: [] };
  let podCidrs: readonly string[] = [];
  let stopped = false;

  const begin = (peer: BgpPeer): Running => {
    const name = peerName(peer);
    const peerLog = log.with({ peer: name });
    const session = start({
      ...peer.session,
      onDecision(decision, event) {
        peer.session.onDecision?.(decision, event);
        const { rule, reason } = decision;
        peerLog.v(ROUTINE_RULES.has(rule) ? 6 : 2)?.(`BGP: session ${rule}${reason ? `: ${reason}` : ""}`, { rule });
      },
    });
    const bfd = peer.bfd && startBfd?.(peer, session);
    return { peer, key: peerKey(peer), log: peerLog, session, bfd, unlogged: newSkips(), podCidrs: [] };
  };
  /** The peer's BFD settings changed alone: new timers go to the running BFD session, without a flap. */
  const rebfd = (entry: Running, next: BgpPeer) => {
    const before = entry.peer.bfd;
    entry.peer = next;
    if (JSON.stringify(before) === JSON.stringify(next.bfd)) return;
    if (entry.bfd && next.bfd) return entry.bfd.configure(next.bfd);
    entry.bfd?.stop();
    entry.bfd = next.bfd && startBfd?.(next, entry.session);
    entry.log.info(next.bfd ? "BGP: BFD started for the peer" : "BGP: BFD stopped for the peer");
  };
  const end = (name: string, entry: Running) => {
    // The withdrawals are written before the Cease on the same connection: the peer reads them first.
    entry.session.setRoutes([]);
    entry.session.stop();
    entry.bfd?.stop();
    onRoutes?.(name, 0);
  };
  const hand = (name: string, entry: Running) => {
    const { routes, skipped } = routesFor(desired, entry.peer, attributes);
    const pod = podRoutesFor(podCidrs, entry.peer);
    for (const { address, rule, reason } of entry.unlogged([...skipped, ...pod.skipped]))
      entry.log.info(`BGP: not announcing: ${reason}`, { address, rule });
    entry.session.setRoutes([...routes, ...pod.routes]);
    entry.podCidrs = pod.routes.map((route) => route.prefix);
    onRoutes?.(name, routes.length + pod.routes.length);
  };
  const setPeers = (peers: readonly BgpPeer[]) => {
    if (stopped) return;
    const wanted = new Map(peers.map((peer) => [peerName(peer), peer]));
    for (const [name, entry] of running) {
      const next = wanted.get(name);
      if (next && peerKey(next) === entry.key) {
        const takesPodCidrs = entry.peer.podCidrs;
        rebfd(entry, next);
        if (Boolean(next.podCidrs) !== Boolean(takesPodCidrs)) hand(name, entry);
        continue;
      }
      end(name, entry);
      running.delete(name);
      entry.log.info(next ? "BGP: the peer's session settings changed: restarting its session" : "BGP: peer gone");
    }
    for (const [name, peer] of wanted) {
      if (running.has(name)) continue;
      const entry = begin(peer);
      running.set(name, entry);
      hand(name, entry);
    }
  };
  setPeers(options.peers);
  return {
    setPeers,
    phases: () => new Map([...running].map(([name, { session }]) => [name, session.state().phase])),
    podCidrsHeld: () =>
      new Map(
        [...running]
          .filter(([, entry]) => entry.session.state().phase === "established")
          .map(([name, entry]) => [name, [...entry.podCidrs]]),
      ),
    apply(next) {
      if (stopped) return;
      desired = next;
      for (const [name, entry] of running) hand(name, entry);
    },
    setPodCidrs(next) {
      if (stopped || JSON.stringify(next) === JSON.stringify(podCidrs)) return;
      podCidrs = [...next];
      for (const [name, entry] of running) hand(name, entry);
    },
    async stop(shutdown) {
      if (stopped) return;
      stopped = true;
      let kept = 0;
      for (const [name, entry] of running) {
        if (shutdown && entry.peer.session.config.gracefulRestart) {
          kept++;
          // The connection closed first, without Cease: the peer starts helping our restart and keeps our routes.
          // Then BFD goes silent, no AdminDown, as at a crash: the peer detects it once the session is gone (FRR
          // 8.4 took an AdminDown sent first for a failure of the live session, and dropped the routes).
          entry.session.stop(true);
          entry.bfd?.abandon();
        } else end(name, entry);
      }
      const except = kept ? `, except from ${kept} peer(s) with graceful restart` : "";
      log.info(`BGP: withdrawn everything (stopping)${except}`, { peers: running.size });
      running.clear();
    },
  };
}
