// Run inside a client host's namespace: asks the link who has an address every interval (a broadcast ARP request,
// as arping does) and prints, one JSON line each, every request it sent and every ARP packet about the address it
// received: replies (attributed to the last request) and gratuitous announcements. The L2 e2e test reads the lines
// to tell whether two nodes ever answered for one address.
//
//   ip netns exec <client> node test/e2e/arp-prober.ts <link> <address> <intervalMs>
import type { ArpPacket } from "../../src/net/arp.ts";
import { BROADCAST_MAC } from "../../src/net/mac.ts";
import { openNetlink } from "../../src/net/netlink.ts";
import { openArpSocket } from "../../src/net/neighborsockets.ts";

export type ProbeLine =
  | { kind: "request"; request: number; atMs: number }
  | { kind: "reply" | "announcement"; request: number; atMs: number; mac: string };

const [linkName = "", address = "", intervalText = "200"] = process.argv.slice(2);
const netlink = openNetlink();
const link = (await netlink.listLinks()).find((candidate) => candidate.name === linkName);
const source = (await netlink.listAddresses()).find((entry) => entry.interfaceName === linkName && entry.family === 4);
netlink.close();
if (!link?.mac || !source) {
  console.error(`arp-prober: no link ${linkName} with a MAC and an IPv4 address`);
  process.exit(2);
}

let request = 0;
const print = (line: ProbeLine) => process.stdout.write(`${JSON.stringify(line)}\n`);
const socket = openArpSocket(
  link,
  (packet: ArpPacket) => {
    if (packet.senderIp !== address) return;
    if (packet.targetIp === address) print({ kind: "announcement", request, atMs: Date.now(), mac: packet.senderMac });
    else if (packet.operation === "reply") print({ kind: "reply", request, atMs: Date.now(), mac: packet.senderMac });
  },
  (err) => console.error(`arp-prober: ${err.message}`),
);
const ask: ArpPacket = {
  operation: "request",
  senderMac: link.mac,
  senderIp: source.address,
  targetMac: "00:00:00:00:00:00",
  targetIp: address,
};
const timer = setInterval(() => {
  print({ kind: "request", request: ++request, atMs: Date.now() });
  socket.send(ask, BROADCAST_MAC);
}, Number(intervalText));
process.once("SIGTERM", () => {
  clearInterval(timer);
  socket.close();
});
