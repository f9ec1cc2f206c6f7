// A TCP proxy a test can black-hole: what a node sees when it loses the API while its links stay up. Cut, it
// drops every connection and then accepts new ones without ever answering (requests hang until their timeouts,
// the hardest case for a client); restored, it forwards again on the same port. It can also freeze only the
// connections that were quiet for a while (a watch between events, not the Lease renewals every second): their
// bytes are held, and either delivered late (thaw: a lagging watch) or dropped with the connection (restore: a
// watch that died silently).
import net from "node:net";
import { performance } from "node:perf_hooks";

export interface TcpProxy {
  port: number;
  cut(): void;
  /** Holds the bytes of every connection quiet for `idleMs`, both ways; returns how many it froze. */
  freezeIdle(idleMs: number): number;
  /** Delivers what the frozen connections held, and forwards on them again. */
  thaw(): void;
  restore(): void;
  close(): Promise<void>;
}

interface Pair {
  client: net.Socket;
  upstream: net.Socket;
  lastActivityMs: number;
  /** While frozen: what each side sent, in order. */
  held?: { toUpstream: Buffer[]; toClient: Buffer[] };
}

export async function startTcpProxy(listenHost: string, target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  const pairs = new Set<Pair>();
  let cut = false;
  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  };
  const server = net.createServer((client) => {
    track(client);
    if (cut) return; // held, never answered
    const upstream = net.connect(target.port, target.host);
    track(upstream);
    const pair: Pair = { client, upstream, lastActivityMs: performance.now() };
    pairs.add(pair);
    const forward = (to: net.Socket, side: "toUpstream" | "toClient") => (chunk: Buffer) => {
      pair.lastActivityMs = performance.now();
      if (pair.held) pair.held[side].push(chunk);
      else to.write(chunk);
    };
    client.on("data", forward(upstream, "toUpstream"));
    upstream.on("data", forward(client, "toClient"));
    for (const [a, b] of [[client, upstream], [upstream, client]] as const)
      a.on("close", () => {
        pairs.delete(pair);
        b.destroy();
      });
  });
  await new Promise<void>((resolve) => server.listen(0, listenHost, resolve));
  const dropAll = () => {
    for (const socket of sockets) socket.destroy();
  };
  return {
    port: (server.address() as net.AddressInfo).port,
    cut() {
      cut = true;
      dropAll();
    },
    freezeIdle(idleMs) {
      let frozen = 0;
      for (const pair of pairs)
        if (!pair.held && performance.now() - pair.lastActivityMs >= idleMs) {
          pair.held = { toUpstream: [], toClient: [] };
          frozen++;
        }
      return frozen;
    },
    thaw() {
      for (const pair of pairs) {
        const held = pair.held;
        if (!held) continue;
        pair.held = undefined;
        for (const chunk of held.toUpstream) pair.upstream.write(chunk);
        for (const chunk of held.toClient) pair.client.write(chunk);
      }
    },
    restore() {
      cut = false;
      dropAll(); // held connections: the client reconnects through the forwarding path
    },
    async close() {
      dropAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
