// Run inside a test namespace by announce.test.ts, one JSON line per event on stdout.
//   announcer <link>   the announcer of <link>, driven by stdin lines "announce <ip>" / "withdraw <ip>"; prints
//                      {ready, link}, {decision} per received request, {conflict} per other host's claim it
//                      refuses or reports, {done, error?} per command. Ends at stdin's end.
//   claimer <link>     another host taking addresses over: "claim <ip>" sends one gratuitous ARP or unsolicited
//                      Neighbor Advertisement for <ip> with <link>'s MAC; prints {ready, link}, {done, error?}.
//   capture <link>     every ARP packet and Neighbor Solicitation/Advertisement that crosses <link>, seen through
//                      our own packet socket (ETH_P_ALL, whole frames): from and to which MAC, which way, and what
//                      it says.
import { createInterface } from "node:readline";
import { findLink, startAnnouncer } from "../../src/agent/announcer/arp-ndp/announcer.ts";
import { createLogger } from "../../src/cli/log.ts";
import { gratuitousArp, parseArp } from "../../src/net/arp.ts";
import { ipFromBytes } from "../../src/net/ip.ts";
import { BROADCAST_MAC, macFromBytes } from "../../src/net/mac.ts";
import { ALL_NODES, parseNeighborSolicitation, unsolicitedAdvertisement } from "../../src/net/ndp.ts";
import { openArpSocket, openNdpSocket } from "../../src/net/neighborsockets.ts";
import { openNetlink } from "../../src/net/netlink.ts";
import { Family, openSocket, SocketType } from "../../src/net/sockets.ts";

const [mode, name = ""] = process.argv.slice(2);
const print = (event: object) => process.stdout.write(`${JSON.stringify(event)}\n`);
const netlink = openNetlink();
const link = await findLink(netlink, name);
netlink.close();
const commands = createInterface({ input: process.stdin });

if (mode === "announcer") {
  const log = createLogger({ verbosity: 4, format: "json" });
  const announcer = startAnnouncer({
    link,
    log,
    observe: (family, decision) => print({ decision: { family, rule: decision.rule, reason: decision.reason } }),
    onConflict: ({ family, claim, decision, reprobeInMs }) =>
      print({ conflict: { family, ...claim, action: decision.action, reason: decision.reason, reprobeInMs } }),
  });
  commands.on("line", (line) => {
    const [verb, address = ""] = line.split(" ");
    try {
      if (verb === "announce") announcer.announce(address);
      else announcer.withdraw(address);
      print({ done: line });
    } catch (err) {
      print({ done: line, error: (err as Error).message });
    }
  });
  commands.once("close", () => announcer.close());
  print({ ready: true, link });
} else if (mode === "claimer") {
  const ignore = () => {};
  const arp = openArpSocket(link, ignore, ignore);
  const ndp = openNdpSocket(link, { solicitation: ignore, advertisement: ignore }, ignore);
  commands.on("line", (line) => {
    const address = line.split(" ")[1] ?? "";
    try {
      if (address.includes(":")) ndp.send(unsolicitedAdvertisement(address, link.mac), ALL_NODES);
      else arp.send(gratuitousArp(address, link.mac), BROADCAST_MAC);
      print({ done: line });
    } catch (err) {
      print({ done: line, error: (err as Error).message });
    }
  });
  commands.once("close", () => {
    arp.close();
    ndp.close();
  });
  print({ ready: true, link });
} else {
  const [ETH_P_ALL, ETH_P_ARP, ETH_P_IPV6, PACKET_OUTGOING] = [0x0003, 0x0806, 0x86dd, 4];
  const bound = Buffer.alloc(20);
  bound.writeUInt16LE(Family.PACKET, 0);
  bound.writeUInt16BE(ETH_P_ALL, 2);
  bound.writeInt32LE(link.index, 4);
  const kind = { family: Family.PACKET, type: SocketType.RAW, protocol: 0x0300 }; // htons(ETH_P_ALL)
  const socket = openSocket(kind, (err, frame, source) => {
    if (err) return print({ error: err.message });
    const seen = {
      from: macFromBytes(frame.subarray(6, 12)),
      to: macFromBytes(frame.subarray(0, 6)),
      outgoing: source[10] === PACKET_OUTGOING,
    };
    const [ethertype, data] = [frame.readUInt16BE(12), frame.subarray(14)];
    const arp = ethertype === ETH_P_ARP ? parseArp(data) : undefined;
    if (arp) return print({ ...seen, arp });
    // IPv6 with ICMPv6 right after the fixed header (next header 58): solicitations and advertisements.
    if (ethertype !== ETH_P_IPV6 || data[6] !== 58) return;
    const icmp = data.subarray(40);
    const addresses = { source: ipFromBytes(data.subarray(8, 24)), destination: ipFromBytes(data.subarray(24, 40)) };
    if (icmp[0] === 135) print({ ...seen, ...addresses, solicitation: parseNeighborSolicitation(icmp) });
    // An answer to a unicast solicitation may carry no target link-layer option (Linux sends none): 24 bytes.
    if (icmp[0] === 136 && icmp.length >= 24)
      print({
        ...seen,
        ...addresses,
        advertisement: {
          target: ipFromBytes(icmp.subarray(8, 24)),
          solicited: ((icmp[4] ?? 0) & 0x40) !== 0,
          override: ((icmp[4] ?? 0) & 0x20) !== 0,
          mac: icmp.length >= 32 && icmp[24] === 2 ? macFromBytes(icmp.subarray(26, 32)) : undefined,
        },
      });
  });
  socket.bind(bound);
  socket.keepAlive(true);
  commands.once("close", () => socket.close());
  print({ ready: true, link });
}
