// IPv6 Neighbor Discovery (RFC 4861) as the ICMPv6 message of a raw IPPROTO_ICMPV6 socket: the kernel strips
// and adds the IPv6 header, and computes the ICMPv6 checksum of what we send (it always does for raw ICMPv6
// sockets, RFC 3542 3.1), so messages are built with a zero checksum. Pure codecs; the reader is compared with
// github.com/mdlayher/ndp (what MetalLB answers with) by test/oracle/neighbor.test.ts.
import { ipFromBytes, ipToBytes } from "./ip.ts";
import { macFromBytes, macToBytes } from "./mac.ts";

export const ICMPV6_NEIGHBOR_SOLICITATION = 135;
export const ICMPV6_NEIGHBOR_ADVERTISEMENT = 136;
export const ALL_NODES = "ff02::1";
export const UNSPECIFIED_IPV6 = "::";
const OPTION_SOURCE_LINK_ADDRESS = 1;
const OPTION_TARGET_LINK_ADDRESS = 2;
const LINK_ADDRESS_OPTIONS = new Set([OPTION_SOURCE_LINK_ADDRESS, OPTION_TARGET_LINK_ADDRESS]);
const HEADER = 24; // type, code, checksum, reserved/flags, target
const FLAG = { ROUTER: 0x80, SOLICITED: 0x40, OVERRIDE: 0x20 } as const;

export interface NeighborSolicitation {
  target: string;
  /** The asker's MAC from its source link-layer address option, when it sent one (never with a :: source). */
  sourceMac?: string;
}

/**
 * A Neighbor Solicitation, or undefined where RFC 4861 7.1.1 says to discard it (code not 0, shorter than 24
 * bytes, an option of length 0 or running past the end, a multicast target) or where mdlayher/ndp refuses it too
 * (an IPv4-mapped target, a link-layer address option not of Ethernet's 8 bytes). The hop limit of 255 that
 * 7.1.1 also asks for is not in the ICMPv6 message: the socket's filter checks it (neighborsockets.ts).
 */
export function parseNeighborSolicitation(data: Buffer): NeighborSolicitation | undefined {
  const message = parseNeighborMessage(data, ICMPV6_NEIGHBOR_SOLICITATION);
  if (!message) return undefined;
  const source = message.options.get(OPTION_SOURCE_LINK_ADDRESS);
  return { target: message.target, ...(source && { sourceMac: macFromBytes(source) }) };
}

/** What solicitations and advertisements share (type, code 0, a target neither multicast nor IPv4-mapped). */
function parseNeighborMessage(data: Buffer, type: number) {
  if (data.length < HEADER || data[0] !== type || data[1] !== 0) return undefined;
  const targetBytes = data.subarray(8, 24);
  if (targetBytes[0] === 0xff || isV4Mapped(targetBytes)) return undefined;
  const options = parseOptions(data.subarray(HEADER));
  return options && { target: ipFromBytes(targetBytes), options };
}

/** Option bodies (after type and length) by type, the first of each type; undefined when malformed. */
function parseOptions(data: Buffer): Map<number, Buffer> | undefined {
  const options = new Map<number, Buffer>();
  for (let at = 0; at < data.length; ) {
    if (at + 2 > data.length) return undefined;
    const length = (data[at + 1] ?? 0) * 8;
    const type = data[at] ?? 0;
    if (length === 0 || at + length > data.length) return undefined;
    if (LINK_ADDRESS_OPTIONS.has(type) && length !== 8) return undefined;
    if (!options.has(type)) options.set(type, data.subarray(at + 2, at + length));
    at += length;
  }
  return options;
}

const V4_MAPPED_PREFIX = Buffer.from("00000000000000000000ffff", "hex");
const isV4Mapped = (bytes: Buffer) => bytes.subarray(0, 12).equals(V4_MAPPED_PREFIX);

export interface NeighborAdvertisement {
  target: string;
  /** Announced in the target link-layer address option. */
  mac: string;
  /** An answer to a solicitation from a unicast address (RFC 4861 7.2.4); false when unsolicited. */
  solicited: boolean;
  /** The receiver replaces the MAC it has for the target (for an address that moves between hosts: always). */
  override: boolean;
}

/** A Neighbor Advertisement as received: the target link-layer option may be missing (RFC 4861 4.4). */
export interface ReceivedAdvertisement {
  target: string;
  mac?: string;
  solicited: boolean;
  override: boolean;
}

/**
 * A Neighbor Advertisement, or undefined where RFC 4861 7.1.2 says to discard it (code not 0, shorter than 24
 * bytes, a multicast target, a malformed option) or mdlayher/ndp refuses it (as for solicitations). Its other
 * checks need the IPv6 header: the hop limit is the socket filter's, and a solicited flag on an advertisement to a
 * multicast address is read as sent (the answer to a probe is what matters here, whoever it went to).
 */
export function parseNeighborAdvertisement(data: Buffer): ReceivedAdvertisement | undefined {
  const message = parseNeighborMessage(data, ICMPV6_NEIGHBOR_ADVERTISEMENT);
  if (!message) return undefined;
  const mac = message.options.get(OPTION_TARGET_LINK_ADDRESS);
  const flags = data[4] ?? 0;
  return {
    target: message.target,
    ...(mac && { mac: macFromBytes(mac) }),
    solicited: (flags & FLAG.SOLICITED) !== 0,
    override: (flags & FLAG.OVERRIDE) !== 0,
  };
}

/** The ICMPv6 message of a Neighbor Advertisement with a target link-layer address option, checksum left 0. */
export function buildNeighborAdvertisement(advert: NeighborAdvertisement): Buffer {
  const flags = (advert.solicited ? FLAG.SOLICITED : 0) | (advert.override ? FLAG.OVERRIDE : 0);
  return neighborMessage(ICMPV6_NEIGHBOR_ADVERTISEMENT, flags, advert.target, OPTION_TARGET_LINK_ADDRESS, advert.mac);
}

/**
 * The ICMPv6 message of a Neighbor Solicitation for `target` with a source link-layer address option (`mac`, so
 * that the target can answer without asking back), checksum left 0: sent from a unicast address of the link.
 */
export function buildNeighborSolicitation(target: string, mac: string): Buffer {
  return neighborMessage(ICMPV6_NEIGHBOR_SOLICITATION, 0, target, OPTION_SOURCE_LINK_ADDRESS, mac);
}

/** A solicitation or advertisement with one link-layer address option. */
function neighborMessage(type: number, flags: number, target: string, option: number, mac: string): Buffer {
  const data = Buffer.alloc(HEADER + 8);
  data[0] = type;
  data[4] = flags;
  ipv6Bytes(target).copy(data, 8);
  data[HEADER] = option;
  data[HEADER + 1] = 1; // in units of 8 bytes
  macToBytes(mac).copy(data, HEADER + 2);
  return data;
}

/** What a host that takes over `target` sends to all nodes (RFC 4861 7.2.6): not solicited, override set. */
export function unsolicitedAdvertisement(target: string, mac: string): NeighborAdvertisement {
  return { target, mac, solicited: false, override: true };
}

/** The solicited-node multicast group of an address (RFC 4291 2.7.1): ff02::1:ff and its last 24 bits. */
export function solicitedNodeGroup(address: string): string {
  const group = ipToBytes("ff02::1:ff00:0");
  ipv6Bytes(address).copy(group, 13, 13, 16);
  return ipFromBytes(group);
}

const IPV6_HEADER = 40;
const NEXT_HEADER_ICMPV6 = 58;
const HOP_LIMIT = 255;

/**
 * Duplicate address detection for `target` (RFC 4862 5.4.2) as a whole IPv6 packet, to send on a packet socket:
 * a Neighbor Solicitation from :: to the target's solicited-node group, hop limit 255, no source link-layer
 * option (7.1.1 forbids one from ::), with its ICMPv6 checksum. Whole, because a raw ICMPv6 socket sends from an
 * address of the link (the kernel picks it) and never from ::. `mac` is the frame's destination (RFC 2464 7).
 */
export function duplicateAddressProbe(target: string): { packet: Buffer; mac: string } {
  const group = solicitedNodeGroup(target);
  const message = Buffer.alloc(HEADER);
  message[0] = ICMPV6_NEIGHBOR_SOLICITATION;
  ipv6Bytes(target).copy(message, 8);
  const [source, destination] = [ipToBytes(UNSPECIFIED_IPV6), ipToBytes(group)];
  message.writeUInt16BE(icmpv6Checksum(source, destination, message), 2);
  const header = Buffer.alloc(IPV6_HEADER);
  header[0] = 0x60; // version 6, traffic class and flow label 0
  header.writeUInt16BE(message.length, 4);
  header[6] = NEXT_HEADER_ICMPV6;
  header[7] = HOP_LIMIT;
  source.copy(header, 8);
  destination.copy(header, 24);
  const mac = ["33", "33", ...[12, 13, 14, 15].map((i) => (destination[i] ?? 0).toString(16).padStart(2, "0"))];
  return { packet: Buffer.concat([header, message]), mac: mac.join(":") };
}

/** RFC 4443 2.3: the one's complement sum over the pseudo-header (RFC 8200 8.1) and the message. */
function icmpv6Checksum(source: Buffer, destination: Buffer, message: Buffer): number {
  const pseudo = Buffer.alloc(8);
  pseudo.writeUInt32BE(message.length, 0);
  pseudo[7] = NEXT_HEADER_ICMPV6;
  const data = Buffer.concat([source, destination, pseudo, message, Buffer.alloc(message.length % 2)]);
  let sum = 0;
  for (let i = 0; i < data.length; i += 2) sum += data.readUInt16BE(i);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

function ipv6Bytes(ip: string): Buffer {
  const bytes = ipToBytes(ip);
  if (bytes.length !== 16) throw new Error(`not an IPv6 address: ${ip}`);
  return bytes;
}
