// ARP for IPv4 over Ethernet (RFC 826) as the payload of an AF_PACKET SOCK_DGRAM socket: the kernel adds and
// strips the Ethernet header, so these 28 bytes are all there is to read and write. Pure codecs; the reader is
// compared with github.com/mdlayher/arp (what MetalLB answers with) by test/oracle/neighbor.test.ts.
import { ipFromBytes, ipToBytes } from "./ip.ts";
import { macFromBytes, macToBytes, ZERO_MAC } from "./mac.ts";

export const ETH_P_ARP = 0x0806;
const HTYPE_ETHERNET = 1;
const PTYPE_IPV4 = 0x0800;
export const ARP_LENGTH = 28;

export type ArpOperation = "request" | "reply";
const OPERATION_CODES = { request: 1, reply: 2 } as const;

export interface ArpPacket {
  operation: ArpOperation;
  senderMac: string;
  senderIp: string;
  targetMac: string;
  targetIp: string;
}

/**
 * An Ethernet/IPv4 request or reply, or undefined for anything else (other hardware or protocol types, other
 * operations such as RARP, a short packet). Bytes after the 28 (Ethernet padding) are ignored.
 */
export function parseArp(data: Buffer): ArpPacket | undefined {
  if (data.length < ARP_LENGTH) return undefined;
  if (data.readUInt16BE(0) !== HTYPE_ETHERNET || data.readUInt16BE(2) !== PTYPE_IPV4) return undefined;
  if (data[4] !== 6 || data[5] !== 4) return undefined;
  const code = data.readUInt16BE(6);
  const operation = code === 1 ? "request" : code === 2 ? "reply" : undefined;
  if (!operation) return undefined;
  return {
    operation,
    senderMac: macFromBytes(data.subarray(8, 14)),
    senderIp: ipFromBytes(data.subarray(14, 18)),
    targetMac: macFromBytes(data.subarray(18, 24)),
    targetIp: ipFromBytes(data.subarray(24, 28)),
  };
}

export function buildArp(packet: ArpPacket): Buffer {
  const data = Buffer.alloc(ARP_LENGTH);
  data.writeUInt16BE(HTYPE_ETHERNET, 0);
  data.writeUInt16BE(PTYPE_IPV4, 2);
  data[4] = 6;
  data[5] = 4;
  data.writeUInt16BE(OPERATION_CODES[packet.operation], 6);
  macToBytes(packet.senderMac).copy(data, 8);
  ipv4Bytes(packet.senderIp).copy(data, 14);
  macToBytes(packet.targetMac).copy(data, 18);
  ipv4Bytes(packet.targetIp).copy(data, 24);
  return data;
}

/** The answer to `request` saying that `mac` has the address it asked for (sent to the asker's MAC). */
export function arpReply(request: ArpPacket, mac: string): ArpPacket {
  return {
    operation: "reply",
    senderMac: mac,
    senderIp: request.targetIp,
    targetMac: request.senderMac,
    targetIp: request.senderIp,
  };
}

/**
 * Gratuitous ARP in its request form (RFC 5227 "ARP announcement"): sender and target address both `ip`, target
 * MAC zero, sent to the broadcast MAC. Linux updates an existing entry from it (and, as most hosts, prefers the
 * request form to the reply form).
 */
export function gratuitousArp(ip: string, mac: string): ArpPacket {
  return { operation: "request", senderMac: mac, senderIp: ip, targetMac: ZERO_MAC, targetIp: ip };
}

/**
 * An ARP probe (RFC 5227 2.1.1): a request for `ip` from sender address 0.0.0.0, so that no host's cache learns
 * anything from it; a host that holds `ip` answers it (Linux: with a reply from `ip` to our MAC).
 */
export function arpProbe(ip: string, mac: string): ArpPacket {
  return { operation: "request", senderMac: mac, senderIp: UNSPECIFIED_IPV4, targetMac: ZERO_MAC, targetIp: ip };
}

export const UNSPECIFIED_IPV4 = "0.0.0.0";

function ipv4Bytes(ip: string): Buffer {
  const bytes = ipToBytes(ip);
  if (bytes.length !== 4) throw new Error(`not an IPv4 address: ${ip}`);
  return bytes;
}
