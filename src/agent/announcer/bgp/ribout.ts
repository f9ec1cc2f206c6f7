// The RIB-out towards one peer, pure: which routes the peer must hear about, as the fewest UPDATEs that fit in
// 4096 bytes. Given what the peer was last told and what it should now know, only the differences go out —
// withdrawals, new routes, routes whose attributes changed — so a change of Services never resets a session.
import { type Family, ipFamily } from "../../../net/ip.ts";
import { HEADER_LENGTH, MAX_MESSAGE_LENGTH } from "../../../net/bgp/message.ts";
import { encodeAttributes, type PathAttributes, prefixSize, type Update } from "../../../net/bgp/update.ts";

/** A route we announce: a prefix and what the routers are told about it. */
export interface Route {
  /** Canonical CIDR text, host bits clear ("198.18.0.7/32", "fd00:1::7/128"). */
  prefix: string;
  /** The node's own address towards the peer, of the prefix's family. */
  nextHop: string;
  /** IPv6 only: the node's link-local address on the link to the peer (RFC 2545 §3), when they share that link. */
  linkLocalNextHop?: string;
  communities?: string[];
  /** Sent to iBGP peers only (RFC 4271 §5.1.5); 100 there when unset. */
  localPref?: number;
  med?: number;
}

/** What the attributes depend on besides the route: whose session it is. */
export interface Peer {
  myAsn: number;
  ibgp: boolean;
  /** The families negotiated with the peer; routes of others are not sent. */
  families: Family[];
}

export const DEFAULT_LOCAL_PREF = 100;

/** The attributes the peer receives for a route (the NLRI aside). */
export function routeAttributes(route: Route, peer: Peer): PathAttributes {
  const family = ipFamily(route.nextHop) === 6 ? 6 : 4;
  const attributes: PathAttributes = {
    origin: "igp",
    // eBGP: our ASN, once; iBGP: the empty path (RFC 4271 §5.1.2)
    asPath: peer.ibgp ? [] : [{ type: "sequence", asns: [peer.myAsn] }],
  };
  if (family === 4) attributes.nextHop = route.nextHop;
  if (route.med !== undefined) attributes.med = route.med;
  if (peer.ibgp) attributes.localPref = route.localPref ?? DEFAULT_LOCAL_PREF;
  if (route.communities && route.communities.length > 0)
    attributes.communities = canonicalCommunities(route.communities);
  if (family === 6) {
    const { nextHop, linkLocalNextHop } = route;
    attributes.mpReach = { family, nextHop, ...(linkLocalNextHop ? { linkLocalNextHop } : {}), nlri: [] };
  }
  return attributes;
}

/**
 * Communities without repeats, in numeric order: one set, one attribute, whatever order the pool lists them in
 * (FRR sorts them on receipt too, so what a router shows matches what we sent).
 */
export function canonicalCommunities(communities: readonly string[]): string[] {
  const value = (community: string) => {
    const [high = "0", low = "0"] = community.split(":");
    return Number(high) * 0x10000 + Number(low);
  };
  return [...new Set(communities)].sort((a, b) => value(a) - value(b));
}

/** What the peer has been told: prefix → the attributes, as a comparable key. */
export type Advertised = ReadonlyMap<string, string>;

/** The family of a route's prefix. */
export function prefixFamily(prefix: string): Family {
  return prefix.includes(":") ? 6 : 4;
}

// Room for NLRI: the message minus header, the two length fields, the attributes, and one byte in case the MP
// attribute's length needs the extended (two-byte) form once NLRI fill it.
const room = (attributes: Buffer) => MAX_MESSAGE_LENGTH - HEADER_LENGTH - 4 - attributes.length - 1;

/** Splits prefixes into runs that each fit in `budget` bytes of NLRI. */
function pack(prefixes: string[], budget: number): string[][] {
  const batches: string[][] = [];
  let [batch, used] = [[] as string[], 0];
  for (const prefix of prefixes) {
    const size = prefixSize(prefix);
    if (used + size > budget && batch.length > 0) {
      batches.push(batch);
      [batch, used] = [[], 0];
    }
    batch.push(prefix);
    used += size;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}

function withdrawals(prefixes: string[], family: Family): Update[] {
  if (family === 4) {
    return pack(prefixes, room(Buffer.alloc(0))).map((withdrawn) => ({ withdrawn, attributes: {}, nlri: [] }));
  }
  const empty = encodeAttributes({ mpUnreach: { family, withdrawn: [] } });
  return pack(prefixes, room(empty)).map((withdrawn) => ({
    withdrawn: [],
    attributes: { mpUnreach: { family, withdrawn } },
    nlri: [],
  }));
}

function announcements(attributes: PathAttributes, prefixes: string[]): Update[] {
  return pack(prefixes, room(encodeAttributes(attributes))).map((nlri) =>
    attributes.mpReach
      ? { withdrawn: [], attributes: { ...attributes, mpReach: { ...attributes.mpReach, nlri } }, nlri: [] }
      : { withdrawn: [], attributes, nlri },
  );
}

/**
 * The UPDATEs that take the peer from `advertised` to `desired` (routes of families not negotiated left out), and
 * what it has been told afterwards. Withdrawals go first; routes sharing attributes share UPDATEs. A route whose
 * next hop is not of its prefix's family is left out.
 */
export function planUpdates(
  advertised: Advertised,
  desired: Iterable<Route>,
  peer: Peer,
): { updates: Update[]; advertised: Map<string, string> } {
  const next = new Map<string, string>();
  const byAttributes = new Map<string, { attributes: PathAttributes; prefixes: string[] }>();
  // Routes share a few sets of attributes (a next hop, a pool's): each set is made, checked and keyed once, not once
  // a route (with 1,000 routes, parsing each next hop and writing each key was most of a plan).
  const made = new Map<string, { attributes: PathAttributes; key: string; family: Family | undefined }>();
  for (const route of desired) {
    const family = prefixFamily(route.prefix);
    if (!peer.families.includes(family)) continue;
    const { nextHop, linkLocalNextHop = "", communities = [], localPref = "", med = "" } = route;
    const sameAttributes = `${nextHop} ${linkLocalNextHop} ${communities.join(",")} ${localPref} ${med}`;
    let set = made.get(sameAttributes);
    if (!set) {
      const attributes = routeAttributes(route, peer);
      set = { attributes, key: JSON.stringify(attributes), family: ipFamily(nextHop) };
      made.set(sameAttributes, set);
    }
    if (set.family !== family) continue;
    const { attributes, key } = set;
    next.set(route.prefix, key);
    if (advertised.get(route.prefix) === key) continue;
    const group = byAttributes.get(key) ?? { attributes, prefixes: [] };
    group.prefixes.push(route.prefix);
    byAttributes.set(key, group);
  }
  const gone = [...advertised.keys()].filter((prefix) => !next.has(prefix));
  const updates = [
    ...withdrawals(
      gone.filter((prefix) => prefixFamily(prefix) === 4),
      4,
    ),
    ...withdrawals(
      gone.filter((prefix) => prefixFamily(prefix) === 6),
      6,
    ),
    ...[...byAttributes.values()].flatMap(({ attributes, prefixes }) => announcements(attributes, prefixes)),
  ];
  return { updates, advertised: next };
}
