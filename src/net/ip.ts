// IP addresses and CIDRs as Go reads and prints them: one reader per Go function, each compared with that function
// on generated text by test/oracle/netip.test.ts.
// - parseAddr: net/netip ParseAddr (no leading zeros; an IPv6 zone kept apart). CIDRs and containment read this.
// - canonicalIp: k8s.io/utils/net ParseIPSloppy, then net.IP.String(): how Kubernetes reads Node addresses, kubelet's
//   --node-ip and its provided-node-ip annotation ("010.0.0.1" is 10.0.0.1, "::ffff:1.2.3.4" is 1.2.3.4).
// - ipProblem, cidrProblem: what kube-apiserver's strict IP and CIDR validation (on by default since 1.36) refuses:
//   leading zeros, which other software reads as octal, and IPv4-mapped IPv6, which it reads as either family. Our IP
//   and CIDR flags are checked this way.
// - parseCidr, cidrContains: net/netip ParsePrefix and Prefix.Contains.

export type Family = 4 | 6;

export interface Cidr {
  /** The address as netip prints it; host bits may be set (containment ignores them, as netip's does). */
  address: string;
  prefixLength: number;
  family: Family;
}

export interface Addr {
  /** 4 bytes for IPv4, 16 for IPv6 (IPv4-mapped included), network order. */
  bytes: Uint8Array;
  /** The IPv6 zone (eth0 of fe80::1%eth0), "" when none. */
  zone: string;
}

/** "host:port", or "[host]:port" when host is an IPv6 literal (URLs, dial and listen addresses). */
export function hostPort(host: string, port: number | string): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The IPs without repeats, each where it first appears (text compared as is: pass canonical text). */
export function uniqueIPs(ips: Iterable<string>): string[] {
  return [...new Set(ips)];
}

/** The family of an IP as netip reads it (IPv4-mapped IPv6 is 6); undefined when it is not one. */
export function ipFamily(ip: string): Family | undefined {
  const addr = parseAddr(ip);
  return addr && (addr.bytes.length === 4 ? 4 : 6);
}

// ---- readers ----

/** net/netip ParseAddr: the address and its zone, or undefined where Go returns an error. */
export function parseAddr(text: string): Addr | undefined {
  const first = /[.:%]/.exec(text)?.[0]; // Go picks the reader by the first of these
  if (first === ".") {
    const bytes = ipv4Bytes(text, "strict");
    return bytes && { bytes, zone: "" };
  }
  if (first !== ":") return undefined;
  const percent = text.indexOf("%");
  const zone = percent < 0 ? "" : text.slice(percent + 1);
  if (percent >= 0 && zone === "") return undefined;
  const bytes = ipv6Bytes(percent < 0 ? text : text.slice(0, percent), "strict");
  return bytes && { bytes, zone };
}

/** k8s.io/utils/net ParseIPSloppy (Go 1.16's net.ParseIP): leading zeros read as decimal, no zones. */
function parseIpSloppy(text: string): Uint8Array | undefined {
  const first = /[.:]/.exec(text)?.[0];
  if (first === ".") return ipv4Bytes(text, "sloppy");
  return first === ":" ? ipv6Bytes(text, "sloppy") : undefined;
}

const [DOT, ZERO] = [".".charCodeAt(0), "0".charCodeAt(0)];

/**
 * Four dot-separated decimal fields of at most 255: "strict" (netip) without leading zeros, "sloppy" (Go 1.16) with
 * any number of them. A loop over the characters, not split and a regular expression per field: every apply of the
 * agent reads each Service's addresses, and with 1,000 Services this was most of its time.
 */
function ipv4Bytes(text: string, mode: "strict" | "sloppy"): Uint8Array | undefined {
  const bytes = new Uint8Array(4);
  let [field, value, digits] = [0, 0, 0];
  for (let i = 0; i <= text.length; i++) {
    const code = i < text.length ? text.charCodeAt(i) : DOT; // the end closes the last field as a dot would
    if (code === DOT) {
      if (digits === 0 || field === 4) return undefined;
      bytes[field++] = value;
      [value, digits] = [0, 0];
      continue;
    }
    if (code < ZERO || code > ZERO + 9) return undefined;
    if (mode === "strict" && digits > 0 && value === 0) return undefined; // a leading zero
    value = value * 10 + (code - ZERO);
    digits++;
    if (value > 255) return undefined;
  }
  return field === 4 ? bytes : undefined;
}

/**
 * The 16 bytes of IPv6 text without its zone, as netip's parseIPv6 ("strict": groups of at most 4 hex digits, an
 * embedded IPv4 without leading zeros) or Go 1.16's ("sloppy": any number of leading zeros) reads them.
 */
function ipv6Bytes(text: string, mode: "strict" | "sloppy"): Uint8Array | undefined {
  const bytes = new Uint8Array(16);
  let rest = text;
  let ellipsis = -1;
  if (rest.startsWith("::")) {
    ellipsis = 0;
    rest = rest.slice(2);
    if (rest === "") return bytes;
  }
  let i = 0;
  while (i < 16) {
    const digits = /^[0-9a-fA-F]*/.exec(rest)?.[0] ?? "";
    const tooLong = mode === "strict" ? digits.length > 4 : Number.parseInt(digits, 16) >= 0xffffff;
    const value = Number.parseInt(digits, 16);
    if (digits === "" || tooLong || value > 0xffff) return undefined;
    if (rest[digits.length] === ".") {
      // An embedded IPv4 address: the last 32 bits, or before a "::" that makes room for it.
      if ((ellipsis < 0 && i !== 12) || i + 4 > 16) return undefined;
      const ipv4 = ipv4Bytes(rest, mode);
      if (!ipv4) return undefined;
      bytes.set(ipv4, i);
      [rest, i] = ["", i + 4];
      break;
    }
    [bytes[i], bytes[i + 1]] = [value >> 8, value & 0xff];
    i += 2;
    rest = rest.slice(digits.length);
    if (rest === "") break;
    if (rest[0] !== ":" || rest.length === 1) return undefined;
    rest = rest.slice(1);
    if (rest[0] === ":") {
      if (ellipsis >= 0) return undefined;
      ellipsis = i;
      rest = rest.slice(1);
      if (rest === "") break;
    }
  }
  if (rest !== "") return undefined;
  if (i < 16) {
    if (ellipsis < 0) return undefined;
    const moved = bytes.slice(ellipsis, i);
    bytes.fill(0, ellipsis);
    bytes.set(moved, 16 - moved.length);
  } else if (ellipsis >= 0) {
    return undefined; // "::" must stand for at least one group of zeros
  }
  return bytes;
}

// ---- printing ----

/** Network-order bytes of an IP netip reads (4 for IPv4, 16 for IPv6, a zone dropped); throws on anything else. */
export function ipToBytes(ip: string): Buffer {
  const addr = parseAddr(ip);
  if (!addr) throw new Error(`not an IP address: ${JSON.stringify(ip)}`);
  return Buffer.from(addr.bytes);
}

/**
 * 4 or 16 network-order bytes as netip.AddrFromSlice(bytes).String() prints them: lower-case hex groups without
 * leading zeros, the first longest run of two or more zero groups as "::", a dotted tail only for IPv4-mapped
 * addresses (::ffff:198.18.0.1). inet_ntop also prints IPv4-compatible ones dotted (::10.0.0.1), Go prints ::a00:1.
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
 * An IP as Kubernetes reads it (ParseIPSloppy for text, net.IP for 4 or 16 bytes) and writes it (net.IP.String()):
 * the form Node addresses and certificates carry. IPv4 with leading zeros reads as decimal; IPv4-mapped IPv6
 * (::ffff:a.b.c.d) prints as IPv4, because Go writes such an address as 4 bytes into a certificate; IPv6 compressed
 * lower-case. Undefined for anything else: other text, zoned IPv6, byte strings not 4 or 16 long.
 */
export function canonicalIp(ip: string | Uint8Array): string | undefined {
  const bytes = typeof ip === "string" ? parseIpSloppy(ip) : ip;
  if (bytes?.length === 16 && isV4Mapped(bytes)) return ipFromBytes(bytes.subarray(12));
  return bytes?.length === 4 || bytes?.length === 16 ? ipFromBytes(bytes) : undefined;
}

const V4_MAPPED_PREFIX = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
const isV4Mapped = (bytes: Uint8Array) => bytes.length === 16 && V4_MAPPED_PREFIX.every((byte, i) => bytes[i] === byte);

// ---- validation, as kube-apiserver's strict validation (k8s.io/apimachinery/pkg/util/validation) ----

/** Why `text` is no IP for an IP flag (IsValidIPForLegacyField, strict): undefined when it is one. */
export function ipProblem(text: string): string | undefined {
  if (parseIpSloppy(text) === undefined) return `"${text}" is not an IP address`;
  const addr = parseAddr(text);
  if (!addr) return `"${text}" has leading zeros, which some software reads as octal: write ${canonicalIp(text)}`;
  if (isV4Mapped(addr.bytes)) return `"${text}" is an IPv4-mapped IPv6 address: write ${canonicalIp(text)}`;
  return undefined;
}

/**
 * Why `text` is no CIDR for a CIDR flag, or undefined: what netip.ParsePrefix refuses (leading zeros in the address
 * or the length, zones, lengths past the family's), and an IPv4-mapped address, as the apiserver refuses it. Host
 * bits may be set (198.18.0.7/24 is 198.18.0.0/24 for containment).
 */
export function cidrProblem(text: string): string | undefined {
  const cidr = text.includes("/") ? parseCidr(text) : undefined;
  if (!cidr) {
    const [, address = "", length] = /^(.*)\/([1-9][0-9]*)$/.exec(text) ?? [];
    const family = ipFamily(address);
    if (family && !address.includes("%") && Number(length) > (family === 4 ? 32 : 128))
      return `"${text}" has a prefix length above ${family === 4 ? 32 : 128}`;
    return `"${text}" is not a CIDR (e.g. 198.18.0.0/15 or fd00::/8)`;
  }
  if (cidr.family === 6 && isV4Mapped(ipToBytes(cidr.address)))
    return `"${text}" has an IPv4-mapped IPv6 address: write the IPv4 CIDR`;
  return undefined;
}

// ---- prefixes ----

/** netip.ParsePrefix ("198.18.0.0/15", "fd00::/8"); also a bare IP, as its host prefix (/32 or /128). */
export function parseCidr(text: string): Cidr | undefined {
  const slash = text.lastIndexOf("/");
  const addr = parseAddr(slash < 0 ? text : text.slice(0, slash));
  if (!addr || addr.zone !== "") return undefined;
  const family: Family = addr.bytes.length === 4 ? 4 : 6;
  const max = family === 4 ? 32 : 128;
  const length = slash < 0 ? String(max) : text.slice(slash + 1);
  if (!/^(0|[1-9][0-9]*)$/.test(length) || Number(length) > max) return undefined;
  return { address: ipFromBytes(addr.bytes), prefixLength: Number(length), family };
}

/** The prefix `address` lies in, host bits cleared, as CIDR text: ("198.18.0.7", 24) → "198.18.0.0/24". */
export function prefixOf(address: string, prefixLength: number): string {
  const bytes = ipToBytes(address);
  for (let i = 0; i < bytes.length; i++) {
    const bits = Math.min(8, Math.max(0, prefixLength - i * 8));
    bytes[i] = (bytes[i] ?? 0) & ((0xff00 >> bits) & 0xff);
  }
  return `${ipFromBytes(bytes)}/${prefixLength}`;
}

// A CIDR is checked against every host address on each detection: read its bytes once.
const cidrBytes = new WeakMap<Cidr, Uint8Array>();

/**
 * netip's Prefix.Contains(ParseAddr(ip)): false for text netip refuses, a zoned IP, or the other family (an
 * IPv4-mapped IPv6 address is not in an IPv4 CIDR).
 */
export function cidrContains(cidr: Cidr, ip: string): boolean {
  const addr = parseAddr(ip);
  if (!addr || addr.zone !== "" || addr.bytes.length !== (cidr.family === 4 ? 4 : 16)) return false;
  let network = cidrBytes.get(cidr);
  if (!network) {
    network = ipToBytes(cidr.address);
    cidrBytes.set(cidr, network);
  }
  const [whole, bits] = [Math.floor(cidr.prefixLength / 8), cidr.prefixLength % 8];
  for (let i = 0; i < whole; i++) if (addr.bytes[i] !== network[i]) return false;
  const mask = (0xff00 >> bits) & 0xff;
  return bits === 0 || (((addr.bytes[whole] ?? 0) ^ (network[whole] ?? 0)) & mask) === 0;
}

/** Whether every address of `inner` lies in `outer`. */
export function cidrWithin(inner: Cidr, outer: Cidr): boolean {
  return inner.prefixLength >= outer.prefixLength && cidrContains(outer, inner.address);
}
