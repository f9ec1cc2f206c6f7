// IP addresses and CIDRs: text ↔ the bytes netlink carries, and CIDR containment.
// Callers pass valid text (the flag layer validates); zones (fe80::1%eth0) are not supported.
import { BlockList, isIPv4, isIPv6 } from "node:net";

export type Family = 4 | 6;

export interface Cidr {
  /** The address as given (host bits may be set). */
  address: string;
  prefixLength: number;
  family: Family;
}

/** "host:port", or "[host]:port" when host is an IPv6 literal (URLs, dial and listen addresses). */
export function hostPort(host: string, port: number | string): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The IPs without repeats, each where it first appears (text compared as is: pass canonical text). */
export function uniqueIPs(ips: Iterable<string>): string[] {
  return [...new Set(ips)];
}

export function ipFamily(ip: string): Family | undefined {
  if (isIPv4(ip)) return 4;
  if (isIPv6(ip)) return 6;
  return undefined;
}

/** Network-order bytes of an IP: 4 for IPv4, 16 for IPv6 (embedded dotted IPv4 included). */
export function ipToBytes(ip: string): Buffer {
  if (isIPv4(ip)) return Buffer.from(ip.split(".").map(Number));
  const groups = (part: string): number[] =>
    part === ""
      ? []
      : part.split(":").flatMap((group) => {
          if (!group.includes(".")) return [Number.parseInt(group, 16)];
          const [a = 0, b = 0, c = 0, d = 0] = group.split(".").map(Number);
          return [(a << 8) | b, (c << 8) | d];
        });
  const [head = "", tail] = ip.split("::");
  const [before, after] = [groups(head), groups(tail ?? "")];
  const all =
    tail === undefined ? before : [...before, ...Array(8 - before.length - after.length).fill(0), ...after];
  const bytes = Buffer.alloc(16);
  all.forEach((group, i) => {
    bytes.writeUInt16BE(group, i * 2);
  });
  return bytes;
}

/**
 * Canonical text of 4 or 16 network-order bytes, as Go prints an IPv6 address (net.IP.String() and
 * netip.Addr.String() alike): lower-case hex groups without leading zeros, the first longest run of two or
 * more zero groups as "::"; a dotted tail only for IPv4-mapped addresses (::ffff:198.18.0.1), as netip prints
 * them. inet_ntop also prints IPv4-compatible ones dotted (::10.0.0.1), Go prints ::a00:1.
 */
export function ipFromBytes(bytes: Uint8Array): string {
  if (bytes.length === 4) return bytes.join(".");
  if (isV4Mapped(bytes)) return `::ffff:${bytes.subarray(12).join(".")}`;
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0));
  let [runStart, runLength] = [-1, 1];
  for (let i = 0; i < 8; i++) {
    let end = i;
    while (end < 8 && groups[end] === 0) end++;
    if (end - i > runLength) [runStart, runLength] = [i, end - i];
  }
  const hex = (part: number[]) => part.map((group) => group.toString(16)).join(":");
  if (runStart < 0) return hex(groups);
  return `${hex(groups.slice(0, runStart))}::${hex(groups.slice(runStart + runLength))}`;
}

/**
 * An IP as Go's net.IP.String() prints it, the form Kubernetes objects and certificates carry: IPv4-mapped
 * IPv6 (::ffff:a.b.c.d) prints as IPv4, because Go writes such an address as 4 bytes into a certificate;
 * IPv6 compressed lower-case. IPv4 with leading zeros reads as decimal, as Kubernetes reads Node addresses
 * (netutils.ParseIPSloppy). Undefined for anything else: other text, zoned IPv6, byte strings not 4 or 16 long.
 */
export function canonicalIp(ip: string | Uint8Array): string | undefined {
  const bytes = typeof ip === "string" ? textToBytes(ip) : ip;
  if (bytes?.length === 16 && isV4Mapped(bytes)) return ipFromBytes(bytes.subarray(12));
  return bytes?.length === 4 || bytes?.length === 16 ? ipFromBytes(bytes) : undefined;
}

const V4_MAPPED_PREFIX = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
const isV4Mapped = (bytes: Uint8Array) => V4_MAPPED_PREFIX.every((byte, i) => bytes[i] === byte);

function textToBytes(text: string): Uint8Array | undefined {
  if (/^\d+(\.\d+){3}$/.test(text)) {
    const octets = text.split(".").map(Number);
    return octets.every((octet) => octet <= 255) ? Uint8Array.from(octets) : undefined;
  }
  return isIPv6(text) && !text.includes("%") ? ipToBytes(text) : undefined;
}

/** "198.18.0.0/15" → Cidr; a bare IP counts as its host prefix (/32 or /128). */
export function parseCidr(text: string): Cidr | undefined {
  const [address = "", length, extra] = text.split("/");
  const family = ipFamily(address);
  if (family === undefined || extra !== undefined) return undefined;
  const max = family === 4 ? 32 : 128;
  const prefixLength = length === undefined ? max : Number(length);
  if (!/^\d{1,3}$/.test(length ?? String(max)) || prefixLength > max) return undefined;
  return { address, prefixLength, family };
}

// A CIDR is checked against every host address on each detection: build its BlockList once.
const blockLists = new WeakMap<Cidr, BlockList>();

export function cidrContains(cidr: Cidr, ip: string): boolean {
  if (ipFamily(ip) !== cidr.family) return false;
  const type = cidr.family === 4 ? "ipv4" : "ipv6";
  let list = blockLists.get(cidr);
  if (!list) {
    list = new BlockList();
    list.addSubnet(cidr.address, cidr.prefixLength, type);
    blockLists.set(cidr, list);
  }
  return list.check(ip, type);
}

/** Whether every address of `inner` lies in `outer`. */
export function cidrWithin(inner: Cidr, outer: Cidr): boolean {
  return inner.prefixLength >= outer.prefixLength && cidrContains(outer, inner.address);
}
