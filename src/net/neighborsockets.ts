// The two sockets that answer for addresses on one link, over our sockets addon (./sockets.ts); both need
// CAP_NET_RAW and nothing more.
// - ARP: AF_PACKET, SOCK_DGRAM, protocol ETH_P_ARP, bound to the link's sockaddr_ll. The kernel strips and adds
//   the Ethernet header (the destination MAC is the sockaddr_ll we send to) and hands over every ARP frame of the
//   link, unicast requests included, with the sender's sockaddr_ll (its MAC, and whether the frame was our own).
// - NDP: raw ICMPv6, bound to the link (SO_BINDTODEVICE), filtered to Neighbor Solicitations (ICMP6_FILTER), in
//   the solicited-node group of each address it answers for, hop limit 255 on what it sends (RFC 4861 7.1.2:
//   receivers drop NDP with any other). It sees solicitations addressed to those groups; a unicast solicitation
//   to an address the node does not hold is not delivered to any socket (the kernel forwards or drops it).
import { type ArpPacket, buildArp, ETH_P_ARP, parseArp } from "./arp.ts";
import { ipFromBytes, ipToBytes } from "./ip.ts";
import { macToBytes } from "./mac.ts";
import {
  buildNeighborAdvertisement,
  type NeighborAdvertisement,
  type NeighborSolicitation,
  parseNeighborSolicitation,
  solicitedNodeGroup,
} from "./ndp.ts";
import { Family, openSocket, type Socket, SocketType } from "./sockets.ts";

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
/** sll_pkttype of a frame this host sent (packet sockets see those too). */
const PACKET_OUTGOING = 4;

// C structs in the machine's byte order: little-endian on both architectures we build for (x64, arm64).

/** struct sockaddr_ll of `link` for ARP, to `mac` (bind ignores the address). */
function sockaddrLl(link: LinkRef, mac?: string): Buffer {
  const address = Buffer.alloc(20);
  address.writeUInt16LE(Family.PACKET, 0);
  address.writeUInt16BE(ETH_P_ARP, 2);
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

/** Receives the ARP requests and replies other hosts send on the link; throws EPERM without CAP_NET_RAW. */
export function openArpSocket(link: LinkRef, onPacket: (packet: ArpPacket) => void, onError: ReceiveError): ArpSocket {
  // The protocol argument of socket() is in network byte order.
  const protocol = ((ETH_P_ARP & 0xff) << 8) | (ETH_P_ARP >> 8);
  const socket = openSocket({ family: Family.PACKET, type: SocketType.DGRAM, protocol }, (err, data, source) => {
    if (err) return onError(err);
    // Until bind() the socket sees every link's frames: the source's ifindex says which link it came from.
    if (source.readInt32LE(4) !== link.index || source[10] === PACKET_OUTGOING) return;
    const packet = parseArp(data);
    if (packet) onPacket(packet);
  });
  configured(socket, () => socket.bind(sockaddrLl(link)));
  return {
    send: (packet, mac) => socket.send(buildArp(packet), sockaddrLl(link, mac)),
    close: () => socket.close(),
  };
}

export interface NdpSocket {
  /** Receives solicitations for `address` (joins its solicited-node group; several addresses may share one). */
  listen(address: string): void;
  unlisten(address: string): void;
  /** Sends `advert` to `to` (the asker's address, or ff02::1) on the link, hop limit 255. */
  send(advert: NeighborAdvertisement, to: string): void;
  close(): void;
}

/** Receives Neighbor Solicitations on the link with their source address; throws EPERM without CAP_NET_RAW. */
export function openNdpSocket(
  link: LinkRef,
  onSolicitation: (solicitation: NeighborSolicitation, source: string) => void,
  onError: ReceiveError,
): NdpSocket {
  const kind = { family: Family.INET6, type: SocketType.RAW, protocol: IPPROTO_ICMPV6 };
  const socket = openSocket(kind, (err, data, source) => {
    if (err) return onError(err);
    const solicitation = parseNeighborSolicitation(data);
    if (solicitation) onSolicitation(solicitation, ipFromBytes(source.subarray(8, 24)));
  });
  configured(socket, () => {
    socket.setOption(IPPROTO_ICMPV6, ICMP6_FILTER, passOnly(135));
    socket.setOption(SOL_SOCKET, SO_BINDTODEVICE, Buffer.from(`${link.name}\0`));
    socket.setOption(IPPROTO_IPV6, IPV6_MULTICAST_IF, link.index);
    socket.setOption(IPPROTO_IPV6, IPV6_MULTICAST_HOPS, NDP_HOP_LIMIT);
    socket.setOption(IPPROTO_IPV6, IPV6_UNICAST_HOPS, NDP_HOP_LIMIT);
  });
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
    close: () => socket.close(),
  };
}

/** struct icmp6_filter passing one ICMPv6 type: 256 bits, a set bit blocks its type. */
function passOnly(type: number): Buffer {
  const filter = Buffer.alloc(32, 0xff);
  filter[type >> 3] = 0xff & ~(1 << (type & 7));
  return filter;
}
