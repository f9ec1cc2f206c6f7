// The agent's one BGP listener (port 179): a connection from a configured peer's address goes to that peer's
// session (fsm.ts decides whether to take it, resolve a collision or close it); any other host's connection is
// closed at once, unread, and the session state of every peer is unchanged. A peer with a password has its key on
// the listening socket, so that a connection from its address without the right signature never reaches us: the
// kernel drops its SYN (src/net/tcpmd5.ts).
import { canonicalIp } from "../../../net/ip.ts";
import { listenTcp } from "../../../net/tcpmd5.ts";
import { BGP_PORT, type BgpSession } from "./session.ts";

export interface ListenerOptions {
  /** "::" (every address, IPv4 too) unless told; tests bind their own link's address and a free port. */
  host?: string;
  port?: number;
  /** A connection refused: the rule and the address, for the log and metrics. */
  onRefused?: (rule: "unknown-peer", address: string) => void;
}

export interface BgpListener {
  /** Hands the connections from `peerAddress` to `session`; with a password, only signed ones reach us. */
  add(peerAddress: string, session: BgpSession, password?: string): void;
  remove(peerAddress: string): void;
  port(): number;
  close(): Promise<void>;
}

export async function listenBgp(options: ListenerOptions = {}): Promise<BgpListener> {
  const sessions = new Map<string, BgpSession>();
  const tcp = await listenTcp({ host: options.host ?? "::", port: options.port ?? BGP_PORT }, (socket) => {
    // an IPv4 peer on the dual-stack socket is ::ffff:a.b.c.d
    const address = canonicalIp(socket.remoteAddress ?? "") ?? "";
    const session = sessions.get(address);
    if (session) return session.offer(socket);
    socket.on("error", () => {}); // a reset while closing is no news
    socket.destroy();
    options.onRefused?.("unknown-peer", address);
  });
  return {
    add(peerAddress, session, password) {
      const address = canonicalIp(peerAddress);
      if (!address) throw new Error(`BGP peer address ${JSON.stringify(peerAddress)} is not an IP address`);
      tcp.setPassword(address, password);
      sessions.set(address, session);
    },
    remove(peerAddress) {
      const address = canonicalIp(peerAddress) ?? peerAddress;
      sessions.delete(address);
      tcp.setPassword(address, undefined);
    },
    port: () => tcp.address().port,
    close: () => tcp.close(),
  };
}
