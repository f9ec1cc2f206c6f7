// IPv6 Neighbor Discovery (RFC 4861) as the ICMPv6 message of a raw IPPROTO_ICMPV6 socket: the kernel strips
// and adds the IPv6 header, and computes the ICMPv6 checksum of what we send (it always does for raw ICMPv6
// sockets, RFC 3542 3.1), so messages are built with a zero checksum. Pure codecs; the reader is compared with
// github.com/mdlayher/ndp (what MetalLB answers with) by test/oracle/neighbor.test.ts.
import { ipFromBytes, ipToBytes } from "./ip.ts";
import { macFromBytes, macToBytes } from "./mac.ts";

export const ICMPV6_NEIGHBOR_SOLICITATION = 135;
export const ICMPV6_NEIGHBOR_ADVERTISEMENT = 136;
export const ALL_NODES = "ff02::1";
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
  if (data.length < HEADER || data[0] !== ICMPV6_NEIGHBOR_SOLICITATION || data[1] !== 0) return undefined;
  const targetBytes = data.subarray(8, 24);
  if (targetBytes[0] === 0xff || isV4Mapped(targetBytes)) return undefined;
  const options = parseOptions(data.subarray(HEADER));
  if (!options) return undefined;
  const source = options.get(OPTION_SOURCE_LINK_ADDRESS);
  return { target: ipFromBytes(targetBytes), ...(source && { sourceMac: macFromBytes(source) }) };
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

/** The ICMPv6 message of a Neighbor Advertisement with a target link-layer address option, checksum left 0. */
export function buildNeighborAdvertisement(advert: NeighborAdvertisement): Buffer {
  const data = Buffer.alloc(HEADER + 8);
  data[0] = ICMPV6_NEIGHBOR_ADVERTISEMENT;
  data[4] = (advert.solicited ? FLAG.SOLICITED : 0) | (advert.override ? FLAG.OVERRIDE : 0);
  ipv6Bytes(advert.target).copy(data, 8);
  data[HEADER] = OPTION_TARGET_LINK_ADDRESS;
  data[HEADER + 1] = 1; // in units of 8 bytes
  macToBytes(advert.mac).copy(data, HEADER + 2);
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

function ipv6Bytes(ip: string): Buffer {
  const bytes = ipToBytes(ip);
  if (bytes.length !== 16) throw new Error(`not an IPv6 address: ${ip}`);
  return bytes;
}
