// A TCP proxy a test can black-hole: what a node sees when it loses the API while its links stay up. Cut, it
// drops every connection and then accepts new ones without ever answering (requests hang until their timeouts,
// the hardest case for a client); restored, it forwards again on the same port.
import net from "node:net";

export interface TcpProxy {
  port: number;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(listenHost: string, target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
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
    client.pipe(upstream).pipe(client);
    for (const [a, b] of [[client, upstream], [upstream, client]] as const) a.on("close", () => b.destroy());
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
