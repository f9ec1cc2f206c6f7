// Where this node can announce: the on-link prefixes of its links, as pure functions of netlink's listings. The
// Lease tells them to the pool controller (SEGMENTS_ANNOTATION); an assigned address is announced on the link
// whose prefix holds it. A link that is down has no segment: a link down is a withdrawal (nothing answers there,
// and the Lease, still renewed over another link, no longer offers it, so the controller moves its addresses).
import { type Cidr, parseCidr, prefixOf } from "../../../net/ip.ts";
import type { HostAddress, HostLink } from "../../../net/rtnetlink.ts";

/** A link announcements can be made on: one with a MAC, which ARP and NDP answer with. */
export interface AnnouncedLink {
  index: number;
  name: string;
  mac: string;
}

export interface Segment {
  /** The on-link prefix, host bits cleared ("198.18.0.0/24"). */
  prefix: string;
  cidr: Cidr;
  link: AnnouncedLink;
}

/**
 * Each usable address's prefix on its link: scope global (no link-local or host addresses), neither tentative nor
 * failed duplicate detection (not the node's yet), on a link with a MAC (what ARP and NDP answer with) that is up,
 * within `interfaces` when given. One per prefix and link, by prefix.
 */
export function nodeSegments(addresses: HostAddress[], links: HostLink[], interfaces: readonly string[]): Segment[] {
  const usable = new Map<number, AnnouncedLink>();
  for (const { index, name, mac, up } of links)
    if (mac && up && (interfaces.length === 0 || interfaces.includes(name))) usable.set(index, { index, name, mac });
  const segments = new Map<string, Segment>();
  for (const address of addresses) {
    const link = usable.get(address.interfaceIndex);
    if (!link || address.scope !== "global" || address.flags.tentative || address.flags.dadFailed) continue;
    const prefix = prefixOf(address.address, address.prefixLength);
    segments.set(`${prefix} ${link.index}`, { prefix, cidr: parseCidr(prefix) as Cidr, link });
  }
  return [...segments.values()].sort((a, b) => compare(a.prefix, b.prefix) || a.link.index - b.link.index);
}

/** Names in --lb-l2-interfaces that are no link with a MAC here: nothing is announced there. */
export function unusableInterfaces(links: HostLink[], interfaces: readonly string[]): string[] {
  return interfaces.filter((name) => !links.some((link) => link.name === name && link.mac));
}

/** The Lease's SEGMENTS_ANNOTATION: the prefixes, unique, sorted, comma-separated. */
export function segmentsAnnotation(segments: readonly Segment[]): string {
  return [...new Set(segments.map((segment) => segment.prefix))].join(",");
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
