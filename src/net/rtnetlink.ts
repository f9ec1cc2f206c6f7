// Wire format of the few rtnetlink messages the agent exchanges with the kernel (see netlink(7),
// rtnetlink(7)): pure encoding and decoding of plain bytes, so the socket adapter stays small. Only the
// native socket of the `netlink` package is used: its generated codecs for every rtnetlink family
// cost ~4 MiB RSS, more than the agent's whole budget for netlink.
import { endianness } from "node:os";
import { ipFromBytes, ipToBytes } from "./ip.ts";
import { macFromBytes } from "./mac.ts";

/** What hostAddress() makes of an RTM_NEWADDR message (the adapter, netlink.ts, lists them). */
export interface HostAddress {
  /** Canonical text (IPv6 compressed, lowercase). */
  address: string;
  prefixLength: number;
  family: 4 | 6;
  interfaceName: string;
  interfaceIndex: number;
  /** ifa_scope as `ip address` names it: a reserved name, else the number (1–199, 201–252: user-defined). */
  scope: "global" | "site" | "link" | "host" | "nowhere" | `${number}`;
  flags: {
    /** IFA_F_SECONDARY: IPv4 — a further address in a subnet the interface already has; IPv6 — the same bit marks a temporary (privacy) address. */
    secondary: boolean;
    tentative: boolean;
    deprecated: boolean;
    dadFailed: boolean;
  };
}

/** What hostLink() makes of an RTM_NEWLINK message. */
export interface HostLink {
  index: number;
  name: string;
  /** The link's hardware address when it is 6 bytes long (Ethernet, veth, bridge); none for loopback, tunnels. */
  mac?: string;
  /** Administratively up and operationally up (IFF_UP, IFF_RUNNING: a carrier): frames can pass. */
  up: boolean;
}

export const MessageType = {
  NOOP: 1,
  ERROR: 2,
  DONE: 3,
  NEWLINK: 16,
  DELLINK: 17,
  GETLINK: 18,
  NEWADDR: 20,
  DELADDR: 21,
  GETADDR: 22,
  NEWROUTE: 24,
  DELROUTE: 25,
  GETROUTE: 26,
  NEWRULE: 32,
  DELRULE: 33,
} as const;

export const Flags = { REQUEST: 0x1, MULTI: 0x2, DUMP_INTR: 0x10, DUMP: 0x300 } as const;

/** Multicast groups (RTNLGRP_*) whose changes can move a route source, a host address or a link's state. */
export const CHANGE_GROUPS = {
  LINK: 1,
  IPV4_IFADDR: 5,
  IPV4_ROUTE: 7,
  IPV4_RULE: 8,
  IPV6_IFADDR: 9,
  IPV6_ROUTE: 11,
  IPV6_RULE: 19,
} as const;

const AF_UNSPEC = 0;
const AF_INET = 2;
const AF_INET6 = 10;
const RTA_DST = 1;
const RTA_GATEWAY = 5;
const RTA_PREFSRC = 7;
const RTA_MULTIPATH = 9;
const RTN_UNICAST = 1;
const IFA_ADDRESS = 1;
const IFA_LOCAL = 2;
const IFA_FLAGS = 8;
const IFLA_ADDRESS = 1;
const IFLA_IFNAME = 3;
const IFA_F = { SECONDARY: 0x01, DADFAILED: 0x08, DEPRECATED: 0x20, TENTATIVE: 0x40 } as const;
/** The reserved names of rtm scopes (iproute2's rt_scopes); any other value is a user scope, named by its number. */
const SCOPE_NAMES = new Map<number, HostAddress["scope"]>([
  [0, "global"],
  [200, "site"],
  [253, "link"],
  [254, "host"],
  [255, "nowhere"],
]);

const HEADER = 16; // struct nlmsghdr
const RTMSG = 12; // struct rtmsg
const IFADDRMSG = 8; // struct ifaddrmsg
const IFINFOMSG = 16; // struct ifinfomsg
const RTNEXTHOP = 8; // struct rtnexthop
const IFF_UP = 0x1;
const IFF_RUNNING = 0x40; // operationally up (RFC 2863): carrier, and not dormant

// Netlink headers are in host byte order.
const LE = endianness() === "LE";
const u16 = (b: Buffer, at: number) => (LE ? b.readUInt16LE(at) : b.readUInt16BE(at));
const u32 = (b: Buffer, at: number) => (LE ? b.readUInt32LE(at) : b.readUInt32BE(at));
const i32 = (b: Buffer, at: number) => (LE ? b.readInt32LE(at) : b.readInt32BE(at));
const put16 = (b: Buffer, v: number, at: number) => (LE ? b.writeUInt16LE(v, at) : b.writeUInt16BE(v, at));
const put32 = (b: Buffer, v: number, at: number) => (LE ? b.writeUInt32LE(v, at) : b.writeUInt32BE(v, at));
const align = (n: number) => (n + 3) & ~3;

export interface Message {
  type: number;
  flags: number;
  seq: number;
  /** The payload after the netlink header. */
  body: Buffer;
}

export function encodeMessage(message: Message): Buffer {
  const out = Buffer.alloc(HEADER + message.body.length);
  put32(out, out.length, 0);
  put16(out, message.type, 4);
  put16(out, message.flags, 6);
  put32(out, message.seq, 8);
  // nlmsg_pid 0: the kernel answers to the sending socket whatever this says.
  message.body.copy(out, HEADER);
  return out;
}

/** The messages of one datagram; a truncated trailing message is dropped. */
export function decodeMessages(datagram: Buffer): Message[] {
  const messages: Message[] = [];
  for (let at = 0; at + HEADER <= datagram.length; ) {
    const length = u32(datagram, at);
    if (length < HEADER || at + length > datagram.length) break;
    messages.push({
      type: u16(datagram, at + 4),
      flags: u16(datagram, at + 6),
      seq: u32(datagram, at + 8),
      body: datagram.subarray(at + HEADER, at + length),
    });
    at += align(length);
  }
  return messages;
}

/** Attribute payloads (struct rtattr TLVs) by type; nested/flag bits of the type are masked off. */
export function parseAttributes(data: Buffer): Map<number, Buffer> {
  const attributes = new Map<number, Buffer>();
  for (let at = 0; at + 4 <= data.length; ) {
    const length = u16(data, at);
    if (length < 4 || at + length > data.length) break;
    attributes.set(u16(data, at + 2) & 0x3fff, data.subarray(at + 4, at + length));
    at += align(length);
  }
  return attributes;
}

function attribute(type: number, payload: Buffer): Buffer {
  const out = Buffer.alloc(align(4 + payload.length));
  put16(out, 4 + payload.length, 0);
  put16(out, type, 2);
  payload.copy(out, 4);
  return out;
}

/** The negative errno of an ERROR message (0 = acknowledgement) or of a failed dump's DONE. */
export function errorCode(message: Message): number {
  return message.body.length >= 4 ? i32(message.body, 0) : 0;
}

/** RTM_GETROUTE body for one destination: the kernel resolves it like a connect() would, rules included. */
export function routeQuery(target: string): Buffer {
  const destination = ipToBytes(target);
  const header = Buffer.alloc(RTMSG);
  header[0] = destination.length === 4 ? AF_INET : AF_INET6; // rtm_family
  header[1] = destination.length * 8; // rtm_dst_len
  return Buffer.concat([header, attribute(RTA_DST, destination)]);
}

/** Body of an RTM_GETADDR, RTM_GETLINK or RTM_GETROUTE dump over all families. */
export function dumpQuery(
  type: typeof MessageType.GETADDR | typeof MessageType.GETLINK | typeof MessageType.GETROUTE,
): Buffer {
  const size = type === MessageType.GETADDR ? IFADDRMSG : type === MessageType.GETLINK ? IFINFOMSG : RTMSG;
  const body = Buffer.alloc(size);
  body[0] = AF_UNSPEC;
  return body;
}

/** RTA_PREFSRC of a route reply: the source address the kernel picked, if it could pick one. */
export function routeSource(body: Buffer): string | undefined {
  const source = parseAttributes(body.subarray(RTMSG)).get(RTA_PREFSRC);
  return source && (source.length === 4 || source.length === 16) ? ipFromBytes(source) : undefined;
}

/**
 * The next hops of an RTM_NEWROUTE message that is a default route (rtm_dst_len 0, unicast, IPv4 or IPv6): its
 * RTA_GATEWAY, or each RTA_MULTIPATH hop's; none for any other route.
 */
export function defaultRouteGateways(body: Buffer): string[] {
  if (body.length < RTMSG) return [];
  const [family, dstLength] = body;
  const size = family === AF_INET ? 4 : family === AF_INET6 ? 16 : 0;
  if (dstLength !== 0 || body[7] !== RTN_UNICAST || size === 0) return [];
  const attributes = parseAttributes(body.subarray(RTMSG));
  const gateways: string[] = [];
  const add = (bytes: Buffer | undefined) => {
    if (bytes?.length === size) gateways.push(ipFromBytes(bytes));
  };
  add(attributes.get(RTA_GATEWAY));
  const hops = attributes.get(RTA_MULTIPATH) ?? Buffer.alloc(0);
  for (let at = 0; at + RTNEXTHOP <= hops.length; ) {
    const length = u16(hops, at);
    if (length < RTNEXTHOP || at + length > hops.length) break;
    add(parseAttributes(hops.subarray(at + RTNEXTHOP, at + length)).get(RTA_GATEWAY));
    at += align(length);
  }
  return gateways;
}

/**
 * Interface index, name, state (ifi_flags: IFF_UP and IFF_RUNNING) and (for an Ethernet-like link: 6 bytes of
 * IFLA_ADDRESS) MAC of an RTM_NEWLINK message.
 */
export function hostLink(body: Buffer): HostLink | undefined {
  const attributes = parseAttributes(body.subarray(IFINFOMSG));
  const name = attributes.get(IFLA_IFNAME);
  if (body.length < IFINFOMSG || !name) return undefined;
  const address = attributes.get(IFLA_ADDRESS);
  const flags = u32(body, 8);
  return {
    index: i32(body, 4),
    name: name.toString("utf8").replace(/\0.*$/s, ""),
    up: (flags & IFF_UP) !== 0 && (flags & IFF_RUNNING) !== 0,
    ...(address?.length === 6 && { mac: macFromBytes(address) }),
  };
}

/** An RTM_NEWADDR message as a HostAddress (IPv4 and IPv6 only); the name comes from the link dump. */
export function hostAddress(body: Buffer, names: Map<number, string>): HostAddress | undefined {
  if (body.length < IFADDRMSG) return undefined;
  const [family, prefixLength = 0, shortFlags = 0, scope = 0] = body;
  const interfaceIndex = u32(body, 4);
  const interfaceName = names.get(interfaceIndex);
  const attributes = parseAttributes(body.subarray(IFADDRMSG));
  // IFA_LOCAL is the local side of a point-to-point address; otherwise only IFA_ADDRESS is sent.
  const bytes = attributes.get(IFA_LOCAL) ?? attributes.get(IFA_ADDRESS);
  const expected = family === AF_INET ? 4 : family === AF_INET6 ? 16 : 0;
  if (interfaceName === undefined || !bytes || bytes.length !== expected || expected === 0) return undefined;
  const longFlags = attributes.get(IFA_FLAGS); // u32 extension of the u8 ifa_flags; wins when present
  const flags = longFlags && longFlags.length >= 4 ? u32(longFlags, 0) : shortFlags;
  return {
    address: ipFromBytes(bytes),
    prefixLength,
    family: expected === 4 ? 4 : 6,
    interfaceName,
    interfaceIndex,
    // A scope is a distance, not a class: an address of scope 100 is no source for a global route, so no range of
    // numbers may pass for "global".
    scope: SCOPE_NAMES.get(scope) ?? `${scope}`,
    flags: {
      secondary: (flags & IFA_F.SECONDARY) !== 0,
      tentative: (flags & IFA_F.TENTATIVE) !== 0,
      deprecated: (flags & IFA_F.DEPRECATED) !== 0,
      dadFailed: (flags & IFA_F.DADFAILED) !== 0,
    },
  };
}
