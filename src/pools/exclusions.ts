// The addresses the network already uses, which allocate() never hands out: each segment's default gateways, its
// network and broadcast addresses (IPv4) or subnet-router anycast address (IPv6), the Service CIDRs, the pods'
// CIDRs, the API server's endpoints and every Node's addresses. A pure function of plain data (the controller reads
// it from the announcer Leases, ServiceCIDRs, Nodes and the EndpointSlices of default/kubernetes); each exclusion
// carries a rule id (metrics, Events) and a reason naming where it comes from.
import { parseCidr } from "../net/ip.ts";
import { type AddressRange, type IpFamily, ipNumber, ipText, parseAddressEntry, rangeHolds } from "./ranges.ts";

export type ExclusionRule =
  | "gateway"
  | "network-address"
  | "broadcast-address"
  | "service-cidr"
  | "pod-cidr"
  | "api-server"
  | "node-address";

export interface Exclusion extends AddressRange {
  rule: ExclusionRule;
  /** What the addresses are, after the address: "is the default gateway of segment 198.51.100.0/24 (node n1)". */
  reason: string;
}

/** What the network uses, as the controller reads it. */
export interface NetworkFacts {
  /** Per announcer Lease: its node, on-link prefixes and default routes' next hops, as the agent wrote them. */
  announcers: { node: string; segments: string[]; gateways: string[] }[];
  /** ServiceCIDR objects: name and spec.cidrs. */
  serviceCidrs: { name: string; cidrs: string[] }[];
  /** Per Node: spec.podCIDRs and the IPs of status.addresses. */
  nodes: { name: string; podCidrs: string[]; addresses: string[] }[];
  /** The addresses of the EndpointSlices of default/kubernetes. */
  apiServers: string[];
}

const ADDRESS_BITS: Record<IpFamily, number> = { IPv4: 32, IPv6: 128 };

/** Every exclusion, one per address or CIDR and reason (what does not parse is left out). */
export function exclusions(facts: NetworkFacts): Exclusion[] {
  const out: Exclusion[] = [];
  const add = (text: string, rule: ExclusionRule, reason: string) => {
    const range = parseAddressEntry(text);
    if (typeof range !== "string") out.push({ ...range, rule, reason });
  };
  for (const { node, segments, gateways } of facts.announcers) {
    const prefixes = segments.flatMap((text) => {
      const cidr = parseCidr(text.trim());
      const range = cidr && parseAddressEntry(text.trim());
      if (!cidr || !range || typeof range === "string") return [];
      return [{ text: `${ipText(range.family, range.first)}/${cidr.prefixLength}`, range, bits: cidr.prefixLength }];
    });
    for (const { text, range, bits } of prefixes) {
      // A /31 or /32 (RFC 3021), a /127 or /128 has no network or broadcast address: every address is a host's.
      if (ADDRESS_BITS[range.family] - bits < 2) continue;
      const segment = `segment ${text} (node ${node})`;
      if (range.family === "IPv4") {
        out.push(single(range.family, range.first, "network-address", `is the network address of ${segment}`));
        out.push(single(range.family, range.last, "broadcast-address", `is the broadcast address of ${segment}`));
      } else {
        const reason = `is the subnet-router anycast address of ${segment}`;
        out.push(single(range.family, range.first, "network-address", reason));
      }
    }
    for (const gateway of gateways) {
      const ip = ipNumber(gateway.trim());
      if (!ip) continue;
      const on = prefixes.find(({ range }) => rangeHolds(range, ip.family, ip.value));
      const reason = on
        ? `is the default gateway of segment ${on.text} (node ${node})`
        : `is a default gateway of node ${node}`;
      out.push(single(ip.family, ip.value, "gateway", reason));
    }
  }
  for (const { name, cidrs } of facts.serviceCidrs)
    for (const cidr of cidrs) add(cidr, "service-cidr", `is in Service CIDR ${cidr} (ServiceCIDR ${name})`);
  for (const { name, podCidrs, addresses } of facts.nodes) {
    for (const cidr of podCidrs) add(cidr, "pod-cidr", `is in pod CIDR ${cidr} of node ${name}`);
    for (const address of addresses) add(address, "node-address", `is an address of node ${name}`);
  }
  for (const address of facts.apiServers)
    add(address, "api-server", "is an endpoint of the API server (EndpointSlices of default/kubernetes)");
  return out;
}

const single = (family: IpFamily, value: bigint, rule: ExclusionRule, reason: string): Exclusion => ({
  family,
  first: value,
  last: value,
  rule,
  reason,
});

/**
 * The exclusions, searchable: which one covers an address (the lowest-starting one, then by rule and reason, so
 * that the reason told is the same after a restart), and which ones meet a range.
 */
export class ExclusionSet {
  /** Per family, sorted by first address; each with the highest `last` of it and those before it. */
  private readonly byFamily = new Map<IpFamily, { list: Exclusion[]; reach: bigint[] }>();
  readonly all: readonly Exclusion[];

  constructor(list: Iterable<Exclusion>) {
    this.all = [...list].sort(
      (a, b) =>
        (a.family < b.family ? -1 : a.family > b.family ? 1 : 0) ||
        (a.first < b.first ? -1 : a.first > b.first ? 1 : 0) ||
        (a.rule < b.rule ? -1 : a.rule > b.rule ? 1 : 0) ||
        (a.reason < b.reason ? -1 : a.reason > b.reason ? 1 : 0),
    );
    for (const family of ["IPv4", "IPv6"] as const) {
      const list = this.all.filter((each) => each.family === family);
      let reach = -1n;
      this.byFamily.set(family, { list, reach: list.map(({ last }) => (reach = last > reach ? last : reach)) });
    }
  }

  /** The exclusion covering an address, if any. */
  find(family: IpFamily, value: bigint): Exclusion | undefined {
    const { list, reach } = this.byFamily.get(family) ?? { list: [], reach: [] };
    // The last one starting at or before `value`; then back while some earlier one may still reach it.
    let low = 0;
    let high = list.length - 1;
    while (low <= high) {
      const middle = (low + high) >> 1;
      if ((list[middle] as Exclusion).first <= value) low = middle + 1;
      else high = middle - 1;
    }
    let found: Exclusion | undefined;
    for (let index = high; index >= 0 && (reach[index] as bigint) >= value; index--) {
      const each = list[index] as Exclusion;
      if (each.last >= value) found = each; // the lowest-starting one wins: keep looking back
    }
    return found;
  }

  /** The exclusion covering an address given as text, if any. */
  findIp(ip: string): Exclusion | undefined {
    const number = ipNumber(ip);
    return number && this.find(number.family, number.value);
  }

  /** The exclusions that meet a range, in order. */
  meeting(range: AddressRange): Exclusion[] {
    return (this.byFamily.get(range.family)?.list ?? []).filter(
      (each) => each.first <= range.last && each.last >= range.first,
    );
  }
}

/** "198.51.100.1 is the default gateway of …": an exclusion's reason for one address. */
export const excludedBecause = (ip: string, exclusion: Exclusion) => `${ip} ${exclusion.reason}`;
