// The sockets that answer for addresses on one link, over our sockets addon (./sockets.ts); they need
// CAP_NET_RAW and nothing more. Packet sockets are opened for no protocol and bound to the link with theirs, so
// they receive nothing from other links, nor (NDP) before their filter is in place.
// - ARP: AF_PACKET, SOCK_DGRAM, ETH_P_ARP. The kernel strips and adds the Ethernet header (the destination MAC is
//   the sockaddr_ll we send to) and hands over every ARP frame of the link, unicast requests included, with the
//   sender's sockaddr_ll (its MAC, and whether the frame was our own).
// - NDP receives on AF_PACKET, SOCK_DGRAM, ETH_P_IPV6 with a BPF filter passing only ICMPv6 Neighbor
//   Solicitations and Advertisements of hop limit 255 (RFC 4861 7.1.1, 7.1.2): advertisements are other hosts'
//   claims (an answer to our duplicate address detection, or a takeover), which the announcer watches for, or a
//   peer's answer to the solicitation it sent to learn whether the link still works (agent/announcer/arp-ndp/holding.ts). Not
//   on a raw ICMPv6 socket (as MetalLB does): the kernel delivers to one only what it routes to itself, and the
//   unicast solicitations a client sends to re-check an entry (neighbour unreachability detection) are for an
//   address the node does not hold: unanswered, the client's entry fails every few minutes. It sends on a raw
//   ICMPv6 socket bound to the link (the kernel adds the IPv6 header and checksum), hop limit 255, which also joins
//   the solicited-node group of each address (multicast solicitations reach the link's filter, and MLD-snooping
//   switches forward them to this port).
//   Duplicate address detection goes out whole on the packet socket (the raw socket cannot send from ::); a
//   solicitation to a peer on the raw one (from an address of the link, which the peer answers).
import { type ArpPacket, buildArp, ETH_P_ARP, parseArp } from "./arp.ts";
import { ipFromBytes, ipToBytes } from "./ip.ts";
import { macFromBytes, macToBytes } from "./mac.ts";
import {
  buildNeighborAdvertisement,
  buildNeighborSolicitation,
  duplicateAddressProbe,
  ICMPV6_NEIGHBOR_ADVERTISEMENT,
  ICMPV6_NEIGHBOR_SOLICITATION,
  type NeighborAdvertisement,
  type NeighborSolicitation,
  parseNeighborAdvertisement,
  parseNeighborSolicitation,
  type ReceivedAdvertisement,
  solicitedNodeGroup,
} from "./ndp.ts";
import { Bpf, bpfProgram, Family, openSocket, type Socket, SocketType } from "./sockets.ts";

/** The link the sockets serve. */
export interface LinkRef {
  index: number;
  name: string;
}

export type ReceiveError = (err: NodeJS.ErrnoException) => void;

// Socket options (Linux): levels, then names.
const SOL_SOCKET = 1;
const SO_BINDTODEVICE = 25;
const IPPROTO_IPV6 = 41;
const IPPROTO_ICMPV6 = 58;
const IPV6_UNICAST_HOPS = 16;
const IPV6_MULTICAST_IF = 17;
const IPV6_MULTICAST_HOPS = 18;
const IPV6_ADD_MEMBERSHIP = 20;
const IPV6_DROP_MEMBERSHIP = 21;
const ICMP6_FILTER = 1;
const NDP_HOP_LIMIT = 255;
/** sll_pkttype of a frame to this host's MAC, and of one this host sent (packet sockets see those too). */
const PACKET_HOST = 0;
const PACKET_OUTGOING = 4;
const ETH_P_IPV6 = 0x86dd;
const IPV6_HEADER = 40;
/** IPv6 next header 58 (ICMPv6, no extension header), hop limit 255, ICMPv6 type 135 or 136. */
const NEIGHBOR_MESSAGES_ONLY = bpfProgram([
  { code: Bpf.LOAD_BYTE, k: 6 },
  { code: Bpf.JUMP_IF_EQUAL, k: IPPROTO_ICMPV6, jf: 6 },
  { code: Bpf.LOAD_BYTE, k: 7 },
  { code: Bpf.JUMP_IF_EQUAL, k: NDP_HOP_LIMIT, jf: 4 },
  { code: Bpf.LOAD_BYTE, k: IPV6_HEADER },
  { code: Bpf.JUMP_IF_EQUAL, k: ICMPV6_NEIGHBOR_SOLICITATION, jt: 1 },
  { code: Bpf.JUMP_IF_EQUAL, k: ICMPV6_NEIGHBOR_ADVERTISEMENT, jf: 1 },
  { code: Bpf.RETURN, k: 0xffff },
  { code: Bpf.RETURN, k: 0 },
]);

// C structs in the machine's byte order: little-endian on both architectures we build for (x64, arm64).

/** struct sockaddr_ll of `link` for `protocol` (an EtherType), to `mac` (bind ignores the address). */
function sockaddrLl(link: LinkRef, protocol: number, mac?: string): Buffer {
  const address = Buffer.alloc(20);
  address.writeUInt16LE(Family.PACKET, 0);
  address.writeUInt16BE(protocol, 2);
  address.writeInt32LE(link.index, 4);
  if (mac) {
    address[11] = 6; // sll_halen
    macToBytes(mac).copy(address, 12);
  }
  return address;
}

/** struct sockaddr_in6 of an address on `link` (the scope a link-local or multicast destination needs). */
function sockaddrIn6(address: string, link: LinkRef): Buffer {
  const sockaddr = Buffer.alloc(28);
  sockaddr.writeUInt16LE(Family.INET6, 0);
  ipToBytes(address).copy(sockaddr, 8);
  sockaddr.writeUInt32LE(link.index, 24);
  return sockaddr;
}

/** struct ipv6_mreq: a group on `link`. */
function membership(group: string, link: LinkRef): Buffer {
  const request = Buffer.alloc(20);
  ipToBytes(group).copy(request, 0);
  request.writeInt32LE(link.index, 16);
  return request;
}

/** A set option that fails closes the socket: half-configured, it would answer for the wrong link. */
function configured(socket: Socket, configure: () => void): Socket {
  try {
    configure();
    return socket;
  } catch (err) {
    socket.close();
    throw err;
  }
}

export interface ArpSocket {
  /** Sends `packet` in a frame to `mac` (the broadcast MAC for gratuitous ARP). */
  send(packet: ArpPacket, mac: string): void;
  close(): void;
}

/**
 * A packet socket for nothing yet: bound to `link` and `protocol` by `bind`, after `configure`. Frames come with
 * their source MAC (sll_addr of the sender's sockaddr_ll) and whether they were sent to this host's MAC.
 */
function openPacketSocket(
  link: LinkRef,
  protocol: number,
  onFrame: (data: Buffer, sourceMac: string, toHost: boolean) => void,
  onError: ReceiveError,
  configure: (socket: Socket) => void = () => {},
): Socket {
  const socket = openSocket({ family: Family.PACKET, type: SocketType.DGRAM, protocol: 0 }, (err, data, source) => {
    if (err) onError(err);
    else if (source[10] !== PACKET_OUTGOING)
      onFrame(data, macFromBytes(source.subarray(12, 18)), source[10] === PACKET_HOST);
  });
  return configured(socket, () => {
    configure(socket);
    socket.bind(sockaddrLl(link, protocol));
  });
}

/** Receives the ARP requests and replies other hosts send on the link; throws EPERM without CAP_NET_RAW. */
export function openArpSocket(link: LinkRef, onPacket: (packet: ArpPacket) => void, onError: ReceiveError): ArpSocket {
  const socket = openPacketSocket(
    link,
    ETH_P_ARP,
    (data) => {
      const packet = parseArp(data);
      if (packet) onPacket(packet);
    },
    onError,
  );
  return {
    send: (packet, mac) => socket.send(buildArp(packet), sockaddrLl(link, ETH_P_ARP, mac)),
    close: () => socket.close(),
  };
}

export interface NdpSocket {
  /** Receives solicitations for `address` (joins its solicited-node group; several addresses may share one). */
  listen(address: string): void;
  unlisten(address: string): void;
  /** Sends `advert` to `to` (the asker's address, or ff02::1) on the link, hop limit 255. */
  send(advert: NeighborAdvertisement, to: string): void;
  /** Sends duplicate address detection for `address` (ndp.ts duplicateAddressProbe). */
  probe(address: string): void;
  /** Asks `peer` (a unicast address on the link) for its MAC, from an address of the link, telling it `mac`. */
  ask(peer: string, mac: string): void;
  close(): void;
}

/**
 * What the NDP socket hands over: each message with its IPv6 source address, its frame's source MAC, and whether
 * the frame went to this host's MAC (an advertisement answering this host, rather than all nodes).
 */
export interface NdpReceiver {
  solicitation(solicitation: NeighborSolicitation, source: string, sourceMac: string): void;
  advertisement(advert: ReceivedAdvertisement, source: string, sourceMac: string, toHost: boolean): void;
}

/** Receives Neighbor Solicitations and Advertisements on the link; throws EPERM without CAP_NET_RAW. */
export function openNdpSocket(link: LinkRef, receive: NdpReceiver, onError: ReceiveError): NdpSocket {
  const kind = { family: Family.INET6, type: SocketType.RAW, protocol: IPPROTO_ICMPV6 };
  const socket = openSocket(kind, (err) => err && onError(err));
  configured(socket, () => {
    // Sends only: a struct icmp6_filter with every bit set blocks every type, and the receiver below reads.
    socket.setOption(IPPROTO_ICMPV6, ICMP6_FILTER, Buffer.alloc(32, 0xff));
    socket.setOption(SOL_SOCKET, SO_BINDTODEVICE, Buffer.from(`${link.name}\0`));
    socket.setOption(IPPROTO_IPV6, IPV6_MULTICAST_IF, link.index);
    socket.setOption(IPPROTO_IPV6, IPV6_MULTICAST_HOPS, NDP_HOP_LIMIT);
    socket.setOption(IPPROTO_IPV6, IPV6_UNICAST_HOPS, NDP_HOP_LIMIT);
  });
  let receiver: Socket;
  try {
    receiver = openPacketSocket(
      link,
      ETH_P_IPV6,
      (packet, sourceMac, toHost) => {
        const [message, source] = [packet.subarray(IPV6_HEADER), ipFromBytes(packet.subarray(8, 24))];
        const solicitation = parseNeighborSolicitation(message);
        if (solicitation) return receive.solicitation(solicitation, source, sourceMac);
        const advert = parseNeighborAdvertisement(message);
        if (advert) receive.advertisement(advert, source, sourceMac, toHost);
      },
      onError,
      (opened) => opened.attachFilter(NEIGHBOR_MESSAGES_ONLY),
    );
  } catch (err) {
    socket.close();
    throw err;
  }
  // Addresses per group: a group is joined with its first address and left with its last.
  const groups = new Map<string, Set<string>>();
  return {
    listen(address) {
      const group = solicitedNodeGroup(address);
      const members = groups.get(group) ?? new Set();
      if (members.size === 0) socket.setOption(IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, membership(group, link));
      groups.set(group, members.add(address));
    },
    unlisten(address) {
      const group = solicitedNodeGroup(address);
      const members = groups.get(group);
      if (!members?.delete(address) || members.size > 0) return;
      groups.delete(group);
      socket.setOption(IPPROTO_IPV6, IPV6_DROP_MEMBERSHIP, membership(group, link));
    },
    send: (advert, to) => socket.send(buildNeighborAdvertisement(advert), sockaddrIn6(to, link)),
    probe(address) {
      const { packet, mac } = duplicateAddressProbe(address);
      receiver.send(packet, sockaddrLl(link, ETH_P_IPV6, mac));
    },
    ask: (peer, mac) => socket.send(buildNeighborSolicitation(peer, mac), sockaddrIn6(peer, link)),
    close() {
      receiver.close();
      socket.close();
    },
  };
}
