// BGP UPDATE (RFC 4271 §4.3) with the attributes an export-only speaker writes — ORIGIN, AS_PATH (4-octet ASNs, RFC
// 6793), NEXT_HOP, MULTI_EXIT_DISC, LOCAL_PREF, COMMUNITIES (RFC 1997), MP_REACH_NLRI and MP_UNREACH_NLRI for IPv6
// unicast (RFC 4760, next hops per RFC 2545) — and the End-of-RIB marker (RFC 4724 §2). The reader validates what a
// peer sends as RFC 7606 says: an error that leaves the message parseable is treat-as-withdraw (the session stays up),
// one that does not (lengths that overrun, NLRI that cannot be read, a broken MP attribute) resets the session.
import { bgpError, type BgpError, type NotificationCode, type Subcode } from "./errors.ts";
import { type Family, ipFromBytes, ipToBytes, parseCidr, prefixOf } from "../ip.ts";
import { Reader, refuse } from "./reader.ts";

export type Origin = "igp" | "egp" | "incomplete";
const ORIGINS: Origin[] = ["igp", "egp", "incomplete"];

export type SegmentType = "set" | "sequence" | "confed-sequence" | "confed-set";
const SEGMENT_TYPES: SegmentType[] = ["set", "sequence", "confed-sequence", "confed-set"]; // codes 1-4

export interface AsPathSegment {
  type: SegmentType;
  asns: number[];
}

/** MP_REACH_NLRI for unicast: a global next hop and, for IPv6 on a shared link, a link-local one (RFC 2545 §3). */
export interface MpReach {
  family: Family;
  nextHop: string;
  linkLocalNextHop?: string;
  nlri: string[];
}

export interface MpUnreach {
  family: Family;
  withdrawn: string[];
}

/** The attributes we read and write; one missing from the message is absent here. */
export interface PathAttributes {
  origin?: Origin;
  asPath?: AsPathSegment[];
  nextHop?: string;
  med?: number;
  localPref?: number;
  /** "asn:value" (RFC 1997's two 16-bit halves), in the order sent. */
  communities?: string[];
  mpReach?: MpReach;
  mpUnreach?: MpUnreach;
}

export interface Update {
  /** IPv4 prefixes withdrawn (host bits clear, e.g. "198.18.0.0/24"). */
  withdrawn: string[];
  attributes: PathAttributes;
  /** IPv4 prefixes announced with the attributes. */
  nlri: string[];
}

const ATTR = {
  origin: 1,
  asPath: 2,
  nextHop: 3,
  med: 4,
  localPref: 5,
  atomicAggregate: 6,
  aggregator: 7,
  communities: 8,
  mpReach: 14,
  mpUnreach: 15,
} as const;
const FLAG_OPTIONAL = 0x80;
const FLAG_TRANSITIVE = 0x40;
const FLAG_EXTENDED = 0x10;
const WELL_KNOWN = FLAG_TRANSITIVE;
const OPTIONAL_TRANSITIVE = FLAG_OPTIONAL | FLAG_TRANSITIVE;
const AFI: Record<Family, number> = { 4: 1, 6: 2 };
const SAFI_UNICAST = 1;

// ---- writing ----

function prefixBytes(prefix: string, family: Family): Buffer {
  const cidr = parseCidr(prefix);
  if (!cidr || cidr.family !== family) throw new Error(`not an IPv${family} prefix: ${prefix}`);
  const bytes = ipToBytes(cidr.address).subarray(0, Math.ceil(cidr.prefixLength / 8));
  return Buffer.concat([Buffer.from([cidr.prefixLength]), bytes]);
}

function nlriBytes(prefixes: string[], family: Family): Buffer {
  return Buffer.concat(prefixes.map((prefix) => prefixBytes(prefix, family)));
}

/** The bytes one prefix takes in NLRI: what the packer counts. */
export function prefixSize(prefix: string): number {
  const slash = prefix.lastIndexOf("/");
  return 1 + Math.ceil(Number(prefix.slice(slash + 1)) / 8);
}

function attribute(flags: number, type: number, value: Buffer): Buffer {
  const extended = value.length > 255;
  const header = Buffer.alloc(extended ? 4 : 3);
  header[0] = flags | (extended ? FLAG_EXTENDED : 0);
  header[1] = type;
  if (extended) header.writeUInt16BE(value.length, 2);
  else header[2] = value.length;
  return Buffer.concat([header, value]);
}

const u32 = (value: number) => {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(value);
  return bytes;
};

function communityValue(community: string): number {
  const match = /^(\d+):(\d+)$/.exec(community);
  const [high, low] = [Number(match?.[1]), Number(match?.[2])];
  if (!match || high > 0xffff || low > 0xffff) throw new Error(`not a community (asn:value): ${community}`);
  return high * 0x10000 + low;
}

/** AFI (2 octets) and SAFI. */
function familyHeader(family: Family): Buffer {
  return Buffer.from([0, AFI[family], SAFI_UNICAST]);
}

/** The path attributes as the UPDATE carries them, in type order. */
export function encodeAttributes(attributes: PathAttributes): Buffer {
  const parts: Buffer[] = [];
  const { origin, asPath, nextHop, med, localPref, communities, mpReach, mpUnreach } = attributes;
  if (origin !== undefined) parts.push(attribute(WELL_KNOWN, ATTR.origin, Buffer.from([ORIGINS.indexOf(origin)])));
  if (asPath !== undefined) {
    const segments = asPath.map((segment) =>
      Buffer.concat([
        Buffer.from([SEGMENT_TYPES.indexOf(segment.type) + 1, segment.asns.length]),
        ...segment.asns.map(u32),
      ]),
    );
    parts.push(attribute(WELL_KNOWN, ATTR.asPath, Buffer.concat(segments)));
  }
  if (nextHop !== undefined) parts.push(attribute(WELL_KNOWN, ATTR.nextHop, ipToBytes(nextHop)));
  if (med !== undefined) parts.push(attribute(FLAG_OPTIONAL, ATTR.med, u32(med)));
  if (localPref !== undefined) parts.push(attribute(WELL_KNOWN, ATTR.localPref, u32(localPref)));
  if (communities !== undefined)
    parts.push(
      attribute(OPTIONAL_TRANSITIVE, ATTR.communities, Buffer.concat(communities.map((c) => u32(communityValue(c))))),
    );
  if (mpReach !== undefined) {
    const nextHops = [
      ipToBytes(mpReach.nextHop),
      ...(mpReach.linkLocalNextHop ? [ipToBytes(mpReach.linkLocalNextHop)] : []),
    ];
    const nextHopBytes = Buffer.concat(nextHops);
    const value = Buffer.concat([
      familyHeader(mpReach.family),
      Buffer.from([nextHopBytes.length]),
      nextHopBytes,
      Buffer.from([0]), // reserved
      nlriBytes(mpReach.nlri, mpReach.family),
    ]);
    parts.push(attribute(FLAG_OPTIONAL, ATTR.mpReach, value));
  }
  if (mpUnreach !== undefined) {
    const value = Buffer.concat([familyHeader(mpUnreach.family), nlriBytes(mpUnreach.withdrawn, mpUnreach.family)]);
    parts.push(attribute(FLAG_OPTIONAL, ATTR.mpUnreach, value));
  }
  return Buffer.concat(parts);
}

/** The UPDATE body (after the 19-byte header). */
export function encodeUpdateBody(update: Update): Buffer {
  const withdrawn = nlriBytes(update.withdrawn, 4);
  const attributes = encodeAttributes(update.attributes);
  const lengths = Buffer.alloc(2);
  lengths.writeUInt16BE(withdrawn.length);
  const attributesLength = Buffer.alloc(2);
  attributesLength.writeUInt16BE(attributes.length);
  return Buffer.concat([lengths, withdrawn, attributesLength, attributes, nlriBytes(update.nlri, 4)]);
}

/** The End-of-RIB marker for a family: an empty UPDATE for IPv4, an empty MP_UNREACH_NLRI for IPv6. */
export function endOfRib(family: Family): Update {
  return family === 4
    ? { withdrawn: [], attributes: {}, nlri: [] }
    : { withdrawn: [], attributes: { mpUnreach: { family, withdrawn: [] } }, nlri: [] };
}

/** The family an UPDATE marks the End-of-RIB of, or undefined when it is no marker. */
export function endOfRibFamily(update: Update): Family | undefined {
  const { attributes } = update;
  if (update.withdrawn.length > 0 || update.nlri.length > 0) return undefined;
  const keys = Object.keys(attributes);
  if (keys.length === 0) return 4;
  if (keys.length === 1 && attributes.mpUnreach && attributes.mpUnreach.withdrawn.length === 0)
    return attributes.mpUnreach.family;
  return undefined;
}

// ---- reading ----

function updateError<S extends Subcode<"update">>(
  subcode: S | "unspecific",
  reason: string,
  data?: Buffer,
  withdraw = false,
) {
  return bgpError("update" satisfies NotificationCode, subcode, reason, data, withdraw);
}

/** Reads NLRI to the end of `reader`; a length past the family's or bytes that run out reset the session. */
function readPrefixes(reader: Reader, family: Family, what: string): string[] {
  const prefixes: string[] = [];
  const max = family === 4 ? 32 : 128;
  const invalid = () => updateError("invalid-network-field", `${what}: a prefix runs past its field`);
  while (reader.remaining > 0) {
    const length = reader.u8();
    if (length > max) refuse(updateError("invalid-network-field", `${what}: prefix length ${length} > ${max}`));
    const bytes = Buffer.alloc(family === 4 ? 4 : 16);
    const n = Math.ceil(length / 8);
    if (n > reader.remaining) refuse(invalid());
    reader.take(n).copy(bytes);
    prefixes.push(prefixOf(ipFromBytes(bytes), length));
  }
  return prefixes;
}

function familyOf(afi: number, safi: number): Family | undefined {
  if (safi !== SAFI_UNICAST) return undefined;
  return afi === 1 ? 4 : afi === 2 ? 6 : undefined;
}

interface AttributeHeader {
  flags: number;
  type: number;
  /** The whole attribute (flags, type, length, value): NOTIFICATION data for attribute errors. */
  raw: Buffer;
  value: Buffer;
}

/** The flags each attribute we know must carry (the partial and extended-length bits aside). */
const EXPECTED_FLAGS: Record<number, number> = {
  [ATTR.origin]: WELL_KNOWN,
  [ATTR.asPath]: WELL_KNOWN,
  [ATTR.nextHop]: WELL_KNOWN,
  [ATTR.med]: FLAG_OPTIONAL,
  [ATTR.localPref]: WELL_KNOWN,
  [ATTR.atomicAggregate]: WELL_KNOWN,
  [ATTR.aggregator]: OPTIONAL_TRANSITIVE,
  [ATTR.communities]: OPTIONAL_TRANSITIVE,
  [ATTR.mpReach]: FLAG_OPTIONAL,
  [ATTR.mpUnreach]: FLAG_OPTIONAL,
};

function readAttributeHeaders(reader: Reader): AttributeHeader[] {
  const headers: AttributeHeader[] = [];
  while (reader.remaining > 0) {
    const start = reader.offset;
    const flags = reader.u8();
    const type = reader.u8();
    const length = flags & FLAG_EXTENDED ? reader.u16() : reader.u8();
    const value = reader.take(length);
    headers.push({ flags, type, raw: reader.bytes.subarray(start, reader.offset), value });
  }
  return headers;
}

function readMpReach(value: Buffer): MpReach | undefined {
  const malformed = () => updateError("optional-attribute-error", "MP_REACH_NLRI is malformed");
  const reader = new Reader(value, malformed);
  const family = familyOf(reader.u16(), reader.u8());
  if (family === undefined)
    refuse(updateError("optional-attribute-error", "MP_REACH_NLRI for an AFI/SAFI we did not offer"));
  const nextHopLength = reader.u8();
  const size = family === 4 ? 4 : 16;
  if (nextHopLength !== size && nextHopLength !== 2 * size)
    refuse(updateError("optional-attribute-error", `MP_REACH_NLRI next hop length ${nextHopLength}`));
  const nextHop = ipFromBytes(reader.take(size));
  const linkLocal = nextHopLength === 2 * size ? ipFromBytes(reader.take(size)) : undefined;
  reader.u8(); // reserved
  const nlri = readPrefixes(reader, family, "MP_REACH_NLRI");
  return { family, nextHop, ...(linkLocal === undefined ? {} : { linkLocalNextHop: linkLocal }), nlri };
}

function readMpUnreach(value: Buffer): MpUnreach {
  const reader = new Reader(value, () => updateError("optional-attribute-error", "MP_UNREACH_NLRI is malformed"));
  const family = familyOf(reader.u16(), reader.u8());
  if (family === undefined)
    refuse(updateError("optional-attribute-error", "MP_UNREACH_NLRI for an AFI/SAFI we did not offer"));
  return { family, withdrawn: readPrefixes(reader, family, "MP_UNREACH_NLRI") };
}

function readAsPath(attr: AttributeHeader): AsPathSegment[] | BgpError {
  const malformed = (why: string) => updateError("malformed-as-path", `AS_PATH ${why}`, undefined, true);
  const segments: AsPathSegment[] = [];
  const { value } = attr;
  let offset = 0;
  while (offset < value.length) {
    if (offset + 2 > value.length) return malformed("ends inside a segment header");
    const type = SEGMENT_TYPES[(value[offset] ?? 0) - 1];
    const count = value[offset + 1] ?? 0;
    if (!type) return malformed(`has segment type ${value[offset]}`);
    if (count === 0) return malformed("has an empty segment");
    if (offset + 2 + 4 * count > value.length) return malformed("segment runs past the attribute");
    const asns: number[] = [];
    for (let i = 0; i < count; i++) asns.push(value.readUInt32BE(offset + 2 + 4 * i));
    segments.push({ type, asns });
    offset += 2 + 4 * count;
  }
  return segments;
}

function invalidIpv4NextHop(bytes: Buffer): boolean {
  const first = bytes[0] ?? 0;
  return bytes.readUInt32BE() === 0 || first >= 224; // unspecified, multicast (224/4) and class E (240/4)
}

/**
 * Reads an UPDATE body; throws a Refusal (reader.ts) where the session must reset, so call it through decodeMessage.
 * A BgpError with treatAsWithdraw means the message was read to its end and its routes are
 * to be treated as withdrawn (RFC 7606); any other BgpError means NOTIFICATION and reset.
 */
export function readUpdateBody(body: Buffer): Update | BgpError {
  const list = (why: string) => () => updateError("malformed-attribute-list", why);
  const reader = new Reader(body, list("UPDATE ends inside its length fields"));
  const withdrawnReader = reader.sub(
    reader.u16(),
    list("withdrawn routes"),
    list("withdrawn routes length runs past the message"),
  );
  const withdrawn = readPrefixes(withdrawnReader, 4, "withdrawn routes");
  const attributesReader = reader.sub(
    reader.u16(),
    list("an attribute runs past the path attributes"),
    list("path attribute length runs past the message"),
  );
  const headers = readAttributeHeaders(attributesReader);
  const nlri = readPrefixes(reader, 4, "NLRI");

  // MP attributes first: an error in them resets the session (RFC 7606 §5.3), which outranks treat-as-withdraw.
  const attributes: PathAttributes = {};
  const seen = new Set<number>();
  for (const attr of headers.filter((h) => h.type === ATTR.mpReach || h.type === ATTR.mpUnreach)) {
    if (seen.has(attr.type)) refuse(updateError("malformed-attribute-list", `MP attribute ${attr.type} appears twice`));
    seen.add(attr.type);
    if ((attr.flags & 0xc0) !== FLAG_OPTIONAL)
      refuse(updateError("attribute-flags-error", `MP attribute ${attr.type} has flags ${attr.flags}`, attr.raw));
    if (attr.type === ATTR.mpReach) attributes.mpReach = readMpReach(attr.value);
    else attributes.mpUnreach = readMpUnreach(attr.value);
  }

  let withdraw: BgpError | undefined;
  const treat = (subcode: Subcode<"update">, why: string, attr: AttributeHeader) => {
    withdraw ??= updateError(subcode, why, attr.raw, true);
  };
  for (const attr of headers) {
    if (attr.type === ATTR.mpReach || attr.type === ATTR.mpUnreach) continue;
    const expected = EXPECTED_FLAGS[attr.type];
    if (expected === undefined) {
      if (!(attr.flags & FLAG_OPTIONAL))
        refuse(updateError("unrecognized-well-known-attribute", `unknown well-known attribute ${attr.type}`, attr.raw));
      continue; // an optional attribute we do not know: ignored (we pass nothing on)
    }
    if (seen.has(attr.type)) continue; // RFC 7606 §3(g): all but the first are discarded
    seen.add(attr.type);
    if ((attr.flags & 0xc0) !== expected) {
      treat("attribute-flags-error", `attribute ${attr.type} has flags ${attr.flags}`, attr);
      continue;
    }
    const length = attr.value.length;
    switch (attr.type) {
      case ATTR.origin: {
        const origin = ORIGINS[attr.value[0] ?? 3];
        if (length !== 1) treat("attribute-length-error", `ORIGIN length ${length}`, attr);
        else if (!origin) treat("invalid-origin-attribute", `ORIGIN ${attr.value[0]}`, attr);
        else attributes.origin = origin;
        break;
      }
      case ATTR.asPath: {
        const path = readAsPath(attr);
        if ("notification" in path) withdraw ??= path;
        else attributes.asPath = path;
        break;
      }
      case ATTR.nextHop:
        if (length !== 4) treat("attribute-length-error", `NEXT_HOP length ${length}`, attr);
        else if (invalidIpv4NextHop(attr.value))
          treat("invalid-next-hop-attribute", `NEXT_HOP ${ipFromBytes(attr.value)}`, attr);
        else attributes.nextHop = ipFromBytes(attr.value);
        break;
      case ATTR.med:
      case ATTR.localPref:
        if (length !== 4) treat("attribute-length-error", `attribute ${attr.type} length ${length}`, attr);
        else if (attr.type === ATTR.med) attributes.med = attr.value.readUInt32BE();
        else attributes.localPref = attr.value.readUInt32BE();
        break;
      case ATTR.communities:
        if (length === 0 || length % 4 !== 0) treat("optional-attribute-error", `COMMUNITIES length ${length}`, attr);
        else {
          const communities: string[] = [];
          for (let i = 0; i < length; i += 4)
            communities.push(`${attr.value.readUInt16BE(i)}:${attr.value.readUInt16BE(i + 2)}`);
          attributes.communities = communities;
        }
        break;
      // ATOMIC_AGGREGATE and AGGREGATOR: known, carry nothing we use; a malformed one is discarded (RFC 7606 §7.6-7.7).
    }
  }
  const announces = nlri.length > 0 || (attributes.mpReach?.nlri.length ?? 0) > 0;
  if (!withdraw && announces) {
    const required: [keyof PathAttributes, string, number][] = [
      ["origin", "ORIGIN", ATTR.origin],
      ["asPath", "AS_PATH", ATTR.asPath],
      ...(nlri.length > 0 ? [["nextHop", "NEXT_HOP", ATTR.nextHop] as [keyof PathAttributes, string, number]] : []),
    ];
    const missing = required.find(([key]) => attributes[key] === undefined);
    if (missing)
      withdraw = updateError(
        "missing-well-known-attribute",
        `${missing[1]} is missing`,
        Buffer.from([missing[2]]),
        true,
      );
  }
  return withdraw ?? { withdrawn, attributes, nlri };
}
