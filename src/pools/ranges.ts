// A pool's addresses as ranges of numbers: each spec.addresses entry (a CIDR or a `first-last` range, read by
// net/ip.ts's readers, which are proven against Go's netip) becomes a [first, last] bigint range of one family,
// and a pool's ranges are merged so that sizes, overlaps and the lowest free address are plain arithmetic.
// Bigints because an IPv6 pool easily holds more than 2^64 addresses.
import { ipFromBytes, parseAddr, parseCidr } from "../net/ip.ts";

export type IpFamily = "IPv4" | "IPv6";

export interface AddressRange {
  family: IpFamily;
  first: bigint;
  last: bigint;
}

const BITS: Record<IpFamily, number> = { IPv4: 32, IPv6: 128 };

/** The family and number of an IP netip reads without a zone; undefined for anything else. */
export function ipNumber(ip: string): { family: IpFamily; value: bigint } | undefined {
  const addr = parseAddr(ip);
  if (!addr || addr.zone !== "") return undefined;
  let value = 0n;
  for (const byte of addr.bytes) value = (value << 8n) | BigInt(byte);
  return { family: addr.bytes.length === 4 ? "IPv4" : "IPv6", value };
}

/** The IP of a number, as netip prints it. */
export function ipText(family: IpFamily, value: bigint): string {
  const bytes = new Uint8Array(BITS[family] / 8);
  for (let i = bytes.length - 1, rest = value; i >= 0; i--, rest >>= 8n) bytes[i] = Number(rest & 0xffn);
  return ipFromBytes(bytes);
}

/**
 * One spec.addresses entry: "198.51.100.0/24" (host bits ignored, as netip's Contains does), a bare IP, or
 * "198.51.100.10-198.51.100.20" (same family, first ≤ last). A one-line reason when it is none of these.
 */
export function parseAddressEntry(text: string): AddressRange | string {
  const dash = text.indexOf("-");
  if (dash < 0) {
    const cidr = parseCidr(text);
    const network = cidr && ipNumber(cidr.address);
    if (!cidr || !network) return `"${text}" is not a CIDR or a first-last range`;
    const hostBits = BigInt(BITS[network.family] - cidr.prefixLength);
    const first = (network.value >> hostBits) << hostBits;
    return { family: network.family, first, last: first + (1n << hostBits) - 1n };
  }
  const [from, to] = [ipNumber(text.slice(0, dash).trim()), ipNumber(text.slice(dash + 1).trim())];
  if (!from || !to) return `"${text}" is not a CIDR or a first-last range`;
  if (from.family !== to.family) return `"${text}" mixes IPv4 and IPv6`;
  if (from.value > to.value) return `"${text}" ends before it starts`;
  return { family: from.family, first: from.value, last: to.value };
}

/** Sorted by family then first address, overlapping and adjacent ranges merged into one. */
export function mergeRanges(ranges: readonly AddressRange[]): AddressRange[] {
  const sorted = [...ranges].sort((a, b) =>
    a.family !== b.family ? (a.family < b.family ? -1 : 1) : a.first < b.first ? -1 : a.first > b.first ? 1 : 0,
  );
  const merged: AddressRange[] = [];
  for (const range of sorted) {
    const last = merged.at(-1);
    if (last && last.family === range.family && range.first <= last.last + 1n) {
      if (range.last > last.last) last.last = range.last;
    } else merged.push({ ...range });
  }
  return merged;
}

/** An IPv4 address ending in .0 or .255, which some old clients and routers refuse (MetalLB's "buggy IPs"). */
export const isBuggyIp = (family: IpFamily, value: bigint) =>
  family === "IPv4" && (value % 256n === 0n || value % 256n === 255n);

/** Numbers in [first, last] congruent to `rest` modulo 256. */
function countCongruent(first: bigint, last: bigint, rest: bigint): bigint {
  const upTo = (n: bigint) => (n < rest ? 0n : (n - rest) / 256n + 1n); // in [0, n]
  return upTo(last) - (first === 0n ? 0n : upTo(first - 1n));
}

/** The addresses a range offers: all of them, less the .0 and .255 ones of IPv4 when those are avoided. */
export function rangeSize({ family, first, last }: AddressRange, avoidBuggyIps: boolean): bigint {
  const all = last - first + 1n;
  if (!avoidBuggyIps || family !== "IPv4") return all;
  return all - countCongruent(first, last, 0n) - countCongruent(first, last, 255n);
}

/** Whether a range holds the address. */
export const rangeHolds = (range: AddressRange, family: IpFamily, value: bigint) =>
  range.family === family && range.first <= value && value <= range.last;

/** The common part of two ranges, if any. */
export function intersection(a: AddressRange, b: AddressRange): AddressRange | undefined {
  if (a.family !== b.family) return undefined;
  const [first, last] = [a.first > b.first ? a.first : b.first, a.last < b.last ? a.last : b.last];
  return first <= last ? { family: a.family, first, last } : undefined;
}

/** "198.51.100.0-198.51.100.255", or one address alone. */
export function formatRange({ family, first, last }: AddressRange): string {
  return first === last ? ipText(family, first) : `${ipText(family, first)}-${ipText(family, last)}`;
}
