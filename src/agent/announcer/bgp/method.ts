// The BGP method behind the announcing loop's interface (../method.ts): every address this node must announce
// becomes a host route (/32, /128) in the RIB-out of each configured session (session.ts), its next hop this node's
// own address towards that peer; ribout.ts turns each change into UPDATEs only, so a change of Services never resets
// a session. Stopping withdraws every route first, then ends the sessions (Cease): a peer that keeps routes of a
// closed session for a while (graceful restart) has none left to keep. Peers are plain config here; which Services
// a node announces over BGP (its class, the node's eligibility) and the peers themselves come with their own work.
import type { Logger } from "../../../cli/log.ts";
import { ipFamily } from "../../../net/ip.ts";
import type { Desired, DesiredAddress, Skip } from "../desired.ts";
import type { AnnouncementMethod } from "../method.ts";
import type { Route } from "./ribout.ts";
import { type BgpSession, type SessionOptions, startSession } from "./session.ts";

export interface BgpPeer {
  /** For logs: the peer's address unless given. */
  name?: string;
  /** The session (session.ts): ASNs, hold time, families, the peer's address, our source address. */
  session: SessionOptions;
  /** This node's own address towards the peer, by family: the next hop of that family's routes. */
  nextHops: { 4?: string; 6?: string };
}

/** What routers are told about an address beside its next hop (a pool's spec.bgp). */
export type RouteAttributes = Pick<Route, "communities" | "localPref">;

/** Why an address is not announced to a peer. */
export type PeerSkipRule = "no-next-hop"; // this node has no address of the address's family towards the peer

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
    const family = ipFamily(entry.address) === 6 ? 6 : 4;
    const nextHop = peer.nextHops[family];
    if (nextHop === undefined) {
      const reason = `no IPv${family} address of this node towards the peer to be ${entry.address}'s next hop`;
      skipped.push({ address: entry.address, rule: "no-next-hop", reason });
      continue;
    }
    routes.push({ prefix: `${entry.address}/${family === 4 ? 32 : 128}`, nextHop, ...attributes(entry) });
  }
  return { routes, skipped };
}

export interface BgpMethodOptions {
  peers: readonly BgpPeer[];
  log: Logger;
  /** session.ts's startSession unless given (a fake, in pure tests). */
  startSession?: (options: SessionOptions) => BgpSession;
  /** The attributes of an address's routes; none unless given. */
  attributes?: (entry: DesiredAddress) => RouteAttributes;
}

/** What a session decides every few seconds while up: logged only at -v=6. */
const ROUTINE_RULES = new Set(["keepalive-sent", "keepalive", "update-ignored", "stale-timer"]);

/** Starts a session with each peer (they connect in the background); apply() hands each its routes. */
export function startBgpMethod(options: BgpMethodOptions): AnnouncementMethod {
  const { log, attributes, startSession: start = startSession } = options;
  const peers = options.peers.map((peer) => {
    const name = peer.name ?? peer.session.peerAddress;
    const peerLog = log.with({ peer: name });
    const session = start({
      ...peer.session,
      onDecision(decision, event) {
        peer.session.onDecision?.(decision, event);
        const { rule, reason } = decision;
        peerLog.v(ROUTINE_RULES.has(rule) ? 6 : 2)?.(`BGP: session ${rule}${reason ? `: ${reason}` : ""}`, { rule });
      },
    });
    return { peer, log: peerLog, session, lastSkipped: "" };
  });
  let stopped = false;
  return {
    apply(desired) {
      if (stopped) return;
      for (const entry of peers) {
        const { routes, skipped } = routesFor(desired, entry.peer, attributes);
        const text = JSON.stringify(skipped);
        if (text !== entry.lastSkipped)
          for (const { address, rule, reason } of skipped)
            entry.log.info(`BGP: not announcing: ${reason}`, { address, rule });
        entry.lastSkipped = text;
        entry.session.setRoutes(routes);
      }
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      // The withdrawals are written before the Cease on the same connection: the peer reads them first.
      for (const { session } of peers) session.setRoutes([]);
      for (const { session } of peers) session.stop();
      log.info("BGP: withdrawn everything (stopping)", { peers: peers.length });
    },
  };
}
